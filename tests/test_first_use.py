"""A long-running bot pays its first-use imports when it starts, not in a user's first run
(:func:`bot.backends.start_first_use_imports`). In a fresh interpreter (the test process has imported everything already):
the service starts on the sandbox stand-ins with a store, waits a moment as a bot would before
its first message, then answers a request that generates an image and reads a photo; the modules
first imported during that run are listed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bot.backends import FIRST_USE_MODULES, YOUNG_COLLECTION

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import asyncio, json, sys
from pathlib import Path
from bot.incoming import ConversationKey, Message, Requester
from bot.service import Service
from bot.settings import load_settings
from sandbox import Sandbox
from tests.conftest import media_file

async def main():
    sandbox = await Sandbox().start()
    overrides = sandbox.overrides(Path(sys.argv[1]))
    overrides.setdefault("inference", {})["selection"] = "top"
    service = await Service.create(load_settings(env={}, overrides=overrides))
    await asyncio.sleep(2)  # a bot waits for its first message
    before = set(sys.modules)
    message = Message("draw a cat, then describe this photo", [media_file("chelsea.png")],
                      key=ConversationKey("test", "w", "c", "first"), who=Requester("terminal", "u1"))
    statuses = [e.record.status async for e in service.handle(message) if hasattr(e, "record")]
    new = sorted(set(sys.modules) - before)
    await service.close()
    await sandbox.close()
    print(json.dumps({"statuses": statuses, "new": new}))

asyncio.run(main())
"""


def test_a_first_run_imports_none_of_the_first_use_modules(tmp_path):
    p = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "data")], cwd=ROOT, capture_output=True,
                       text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout.strip().splitlines()[-1])
    assert doc["statuses"] and doc["statuses"][-1] in ("ok", "partial")
    late = [m for m in doc["new"] if m in FIRST_USE_MODULES or m.startswith(("PIL.", "encodings.", "anyio._backends"))]
    assert late == [], f"imported during the user's first run: {late}"


def test_version_and_help_import_only_what_they_print(tmp_path):
    """``--version`` imports no asyncio, json or logging; ``--help`` loads no pipeline, settings
    model or version lookup (``-X importtime`` lists every module a process imports)."""
    for flag, never in (("--version", ("asyncio", "json", "logging", "pipeline.core")),
                        ("--help", ("importlib.metadata", "pipeline.core", "pydantic", "openai"))):
        p = subprocess.run([sys.executable, "-X", "importtime", "-m", "hugginggpt", flag], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and p.stdout, p.stderr[-2000:]
        imported = {line.rsplit("|", 1)[-1].strip() for line in p.stderr.splitlines() if line.startswith("import time:")}
        assert not imported & set(never), (flag, sorted(imported & set(never)))


FROZEN = """
import asyncio, gc, json
import bot.service  # what a bot imports and builds at start-up
from bot.backends import start_first_use_imports

async def main():
    await start_first_use_imports()()  # the closer waits for the imports
asyncio.run(main())
print(json.dumps({"frozen": gc.get_freeze_count(), "collectable": len(gc.get_objects()), "young": gc.get_threshold()[0]}))
"""


def test_after_start_up_a_full_collection_scans_only_what_runs_made():
    """Once the first-use imports are done, what start-up built is out of the collector's
    generations (``gc.freeze``): a full collection on the event loop walks only what was made
    since, not the ~190,000 objects of the modules and clients; and young collections come
    :data:`bot.backends.YOUNG_COLLECTION` allocations apart, so that full ones are rare."""
    p = subprocess.run([sys.executable, "-c", FROZEN], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout.strip().splitlines()[-1])
    assert doc["frozen"] > 50_000 and doc["collectable"] < doc["frozen"] // 10, doc
    assert doc["young"] == YOUNG_COLLECTION > 700, doc


REGISTRY = """
import asyncio, json, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from bot.backends import start_first_use_imports

asked = []

class Hub(BaseHTTPRequestHandler):  # the Hub's agent registry (huggingface_hub.utils._detect_agent)
    def do_GET(self):
        asked.append(self.path)
        body = json.dumps({"standardEnvVars": ["AI_AGENT"], "harnesses": {}}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

async def main():
    await start_first_use_imports()()

with open("port") as f:
    hub = ThreadingHTTPServer(("127.0.0.1", int(f.read())), Hub)
threading.Thread(target=hub.serve_forever, daemon=True).start()
asyncio.run(main())
at_start = list(asked)
from huggingface_hub.utils import build_hf_headers
build_hf_headers()  # what an expert call does on the event loop
print(json.dumps({"at_start": at_start, "in_a_run": asked[len(at_start):]}))
"""


def test_the_hubs_agent_registry_is_never_fetched_on_the_event_loop(tmp_path):
    """huggingface_hub fetches its agent registry (a synchronous request of up to 3 s) the first
    time it builds request headers, when telemetry is on: start-up fetches it on its worker
    thread, so a run's first expert call does not; with telemetry off (the program's default)
    nothing is fetched at all."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "port").write_text(str(port))
    for telemetry_off, expected in (("0", {"at_start": ["/api/agent-harnesses"], "in_a_run": []}),
                                    ("1", {"at_start": [], "in_a_run": []})):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HOME": str(tmp_path / f"hf{telemetry_off}"),
               "HF_ENDPOINT": f"http://127.0.0.1:{port}", "HF_HUB_DISABLE_TELEMETRY": telemetry_off}
        p = subprocess.run([sys.executable, "-c", REGISTRY], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr[-3000:]
        assert json.loads(p.stdout.strip().splitlines()[-1]) == expected, telemetry_off
