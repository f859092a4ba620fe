"""The ``hugginggpt serve`` cases of ``python -m benchmarks.bench_faults``: a full disk (an 8 MiB
tmpfs this benchmark mounts; root only, else skipped with a note), a database scribbled over
under the running server, and a browser page (Debian's headless Chromium through Playwright)
from another origin, by DNS rebinding and from an allowed origin.

Each case runs a real ``hugginggpt serve --sandbox`` process and prints one line::

    <case>: requests N, statuses {code: count}, tracebacks T, recovered yes|no|n/a  (note)

*tracebacks*: ``Traceback`` in the server's stderr and log file. *recovered*: after the fault is
removed (space freed) the server answers a request with 200 without a restart; for the database,
whether the process still answers ``/healthz`` (the file itself needs a restore).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-bench-serve-key"
BODY = {"model": "hugginggpt", "messages": [{"role": "user", "content": "Say hello"}]}
PHOTO = ROOT / "tests" / "fixtures" / "media" / "chelsea.png"


@dataclass
class Case:
    name: str
    statuses: Counter = field(default_factory=Counter)
    tracebacks: int = 0
    recovered: str = "n/a"
    note: str = ""

    def line(self) -> str:
        tried = sum(self.statuses.values())
        shown = dict(sorted(self.statuses.items(), key=lambda kv: str(kv[0])))
        return (f"{self.name}: requests {tried}, statuses {shown}, tracebacks {self.tracebacks}, "
                f"recovered {self.recovered}" + (f"  ({self.note})" if self.note else ""))


@contextlib.asynccontextmanager
async def serving(data: Path, **server: str) -> AsyncIterator[tuple[str, Any]]:
    """A ``hugginggpt serve --sandbox --port 0`` process on ``data``; yields (URL, process)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_"))}
    env.update({"HUGGINGGPT_STORAGE__DATA_DIR": str(data), "PYTHONPATH": str(ROOT),
                **{f"HUGGINGGPT_SERVER__{k.upper()}": v for k, v in server.items()}})
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "hugginggpt", "serve", "--sandbox", "--port", "0",
                                                env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 120)).decode()
    url = re.search(r"http://\S+?(?=/v1)", line)
    try:
        if url is None:
            raise RuntimeError(f"serve did not start: {line!r}")
        yield url.group(0), proc
    finally:
        proc.terminate()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(proc.wait(), 20)


async def _tracebacks(proc: Any, data: Path) -> int:
    err = (await proc.stderr.read()).decode("utf-8", "replace") if proc.returncode is not None else ""
    logs = "".join(p.read_text("utf-8", "replace") for p in data.rglob("*.log*") if p.is_file())
    return (err + logs).count("Traceback")


async def _requests(http: aiohttp.ClientSession, url: str, case: Case) -> None:
    """The same set on every case: whole and streamed answers (with a photo), the reference
    endpoint and readiness."""
    import base64

    photo = "data:image/png;base64," + base64.b64encode(PHOTO.read_bytes()).decode()
    with_photo = {"model": "hugginggpt", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "Detect the objects"}, {"type": "image_url", "image_url": {"url": photo}}]}]}
    for path, body in (("/v1/chat/completions", with_photo), ("/v1/chat/completions", {**with_photo, "stream": True}),
                       ("/v1/chat/completions", BODY), ("/hugginggpt", {"messages": BODY["messages"]})):
        async with http.post(url + path, json=body) as r:
            text = await r.text()
            code = r.status
            if r.status == 200 and "storage_unavailable" in text:  # refused inside the stream
                code = "200+stream error"
            case.statuses[code] += 1
    async with http.get(url + "/readyz") as r:
        case.statuses[f"readyz {r.status}"] += 1
        case.note = (await r.text())[:120]


async def full_disk() -> Case:
    case = Case("full disk (8 MiB tmpfs)")
    with tempfile.TemporaryDirectory(prefix="hgpt-disk-") as tmp:
        disk = Path(tmp)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", tmp], capture_output=True).returncode:
            case.note = "skipped: cannot mount a tmpfs (needs root)"
            return case
        try:
            async with serving(disk / "data", api_keys=KEY, ready_min_free_bytes=str(1 << 20)) as (url, proc):
                async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEY}"}) as http:
                    filler = disk / "filler"
                    with open(filler, "wb") as f, contextlib.suppress(OSError):
                        while True:
                            f.write(b"\0" * 65536)
                            f.flush()
                    await _requests(http, url, case)
                    filler.unlink()
                    async with http.post(url + "/v1/chat/completions", json=BODY) as r:
                        case.recovered = "yes" if r.status == 200 else f"no ({r.status})"
            case.tracebacks = await _tracebacks(proc, disk / "data")
        finally:
            subprocess.run(["umount", "-l", tmp], check=False)
    return case


async def corrupted_database() -> Case:
    case = Case("database scribbled over under the server")
    with tempfile.TemporaryDirectory(prefix="hgpt-corrupt-") as tmp:
        data = Path(tmp) / "data"
        async with serving(data, api_keys=KEY) as (url, proc):
            async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEY}"}) as http:
                async with http.post(url + "/v1/chat/completions", json=BODY) as r:
                    await r.read()
                db = data / "conversations.sqlite3"
                with contextlib.closing(sqlite3.connect(db)) as conn:
                    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                with open(db, "r+b") as f:
                    f.seek(100)
                    f.write(os.urandom(db.stat().st_size - 100))
                await _requests(http, url, case)
                async with http.get(url + "/healthz") as r:
                    case.recovered = f"n/a (process alive: {'yes' if r.status == 200 else 'no'})"
        case.tracebacks = await _tracebacks(proc, data)
    return case


PAGE_FETCH = """async ([url, init]) => {
  try { const r = await fetch(url, init); return String(r.status); } catch (e) { return 'blocked'; } }"""


async def browser() -> Case:
    case = Case("browser page (Chromium): other origin, DNS rebinding, allowed origin")
    chromium = shutil.which("chromium")
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        chromium = None
    if chromium is None:
        case.note = "skipped: needs chromium (apt) and playwright (pip)"
        return case
    from aiohttp import web

    page_app = web.Application()
    page_app.router.add_get("/", lambda _: web.Response(text="<p>elsewhere</p>", content_type="text/html"))
    runner = web.AppRunner(page_app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    origin = f"http://127.0.0.1:{runner.addresses[0][1]}"
    with tempfile.TemporaryDirectory(prefix="hgpt-browser-") as tmp:
        async with serving(Path(tmp) / "data", cors_origins=origin) as (url, proc), async_playwright() as p:
            b = await p.chromium.launch(executable_path=chromium, args=[
                "--host-resolver-rules=MAP rebind.test 127.0.0.1",
                "--disable-features=LocalNetworkAccessChecks,PrivateNetworkAccessSendPreflights,"
                "BlockInsecurePrivateNetworkRequests"])
            page = await b.new_page()
            api = url + "/v1/chat/completions"
            text_plain = {"method": "POST", "headers": {"Content-Type": "text/plain"}, "body": json.dumps(BODY)}
            as_json = {"method": "POST", "headers": {"Content-Type": "application/json"}, "body": json.dumps(BODY)}
            other = "http://localhost:" + origin.rsplit(":", 1)[1]  # the same page, an origin not allowed
            await page.goto(other + "/")
            for init in (text_plain, as_json):
                case.statuses[f"other origin: {await page.evaluate(PAGE_FETCH, [api, init])}"] += 1
            port = url.rsplit(":", 1)[1]
            await page.route(f"http://rebind.test:{port}/", lambda r: r.fulfill(body="<p>x</p>", content_type="text/html"))
            await page.goto(f"http://rebind.test:{port}/")
            case.statuses[f"rebinding: {await page.evaluate(PAGE_FETCH, ['/v1/chat/completions', as_json])}"] += 1
            await page.goto(origin + "/")
            case.statuses[f"allowed origin: {await page.evaluate(PAGE_FETCH, [api, as_json])}"] += 1
            await b.close()
        case.tracebacks = await _tracebacks(proc, Path(tmp) / "data")
    await runner.cleanup()
    case.note = "want: other origin blocked, rebinding 421, allowed origin 200"
    return case


async def run_all(only: list[str] | None = None) -> list[Case]:
    """Run the serve cases (those whose name contains a word of ``only``); print one line each."""
    cases = []
    for make in (full_disk, corrupted_database, browser):
        if only and not any(w in make.__name__.replace("_", " ") for w in only):
            continue
        t0 = time.monotonic()
        case = await make()
        print(f"{case.line()}  [{time.monotonic() - t0:.0f} s]", flush=True)
        cases.append(case)
    return cases
