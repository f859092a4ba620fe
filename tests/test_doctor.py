"""``hugginggpt doctor`` run as a user runs it (a subprocess) against stand-ins on 127.0.0.1: the
controller (OpenAI wire format), the Hub (``whoami-v2``), an expert server (``GET /models``); one
line per check, and exit status 0 only when no check failed."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from sandbox.controller import ControllerStandIn
from benchmarks.harness.realparts import free_port
from sandbox.faulty_controller import FaultyController
from tests.standins.expert_server import ExpertServerStandIn, model
from tests.standins.hub import HubStandIn, whoami_body

LLM_KEY = "sk-doctor-secret-1f2e"
HF_TOKEN = "hf_doctor_secret_9a8b"
PG_PASSWORD = "pg-doctor-secret-77"
NAMES = ["settings", "controller", "hub", "providers", "store", "experts", "mcp", "ffmpeg", "disk"]
ROOT = Path(__file__).resolve().parents[1]
PLACEHOLDER = "/path/to/hugginggpt-bot/.venv/bin/python"  # docs/mcp.md's example, not edited


class Setup:
    """Stand-ins, a config file and the environment of one doctor run."""

    def __init__(self, tmp: Path, controller: ControllerStandIn, hub: HubStandIn, experts: ExpertServerStandIn) -> None:
        self.tmp, self.controller, self.hub, self.experts = tmp, controller, hub, experts
        self.config: dict[str, dict[str, Any]] = {
            "llm": {"base_url": controller.base_url, "api_key": LLM_KEY, "model": "sandbox-controller", "max_retries": 0},
            "inference": {"token": HF_TOKEN, "experts_url": [experts.url]},
            "storage": {"data_dir": str(tmp / "data")},
        }
        self.env = {"PATH": os.environ["PATH"], "HOME": str(tmp), "HF_ENDPOINT": hub.url,
                    "HUGGINGGPT_CONFIG": str(tmp / "hugginggpt.toml")}
        if os.environ.get("PYTHONPATH"):  # a checkout run without installing
            self.env["PYTHONPATH"] = os.environ["PYTHONPATH"]

    def write_config(self) -> None:
        lines = []
        for section, values in self.config.items():
            lines.append(f"[{section}]")
            lines += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
        (self.tmp / "hugginggpt.toml").write_text("\n".join(lines) + "\n")

    async def doctor(self, *args: str) -> tuple[int, str]:
        """Run ``hugginggpt doctor ARGS``; returns (exit status, stdout + stderr). The checks get 30 s:
        no stand-in here hangs, and a loaded CI machine needs seconds to import the clients."""
        self.write_config()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "hugginggpt", "doctor", "--timeout", "30", *args, cwd=self.tmp, env=self.env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        text = out.decode()
        for secret in (LLM_KEY, HF_TOKEN, PG_PASSWORD):
            assert secret not in text
        return proc.returncode, text


def verdicts(text: str) -> dict[str, tuple[str, str]]:
    """``{check name: (status, rest of its line)}`` of doctor's output."""
    out = {}
    for line in text.splitlines():
        status, _, rest = line.partition(" ")
        name, _, said = rest.strip().partition(" ")
        if name in NAMES:
            out[name] = (status, said.strip())
    return out


@pytest.fixture
async def setup(tmp_path):
    with ExpertServerStandIn([model("facebook/detr-resnet-50", "object-detection")]).start() as experts:
        async with ControllerStandIn(api_key=LLM_KEY) as controller, HubStandIn([], token=HF_TOKEN) as hub:
            yield Setup(tmp_path, controller, hub, experts)


async def test_all_ok_one_line_per_check_and_exit_0(setup):
    status, text = await setup.doctor()
    got = verdicts(text)
    assert status == 0 and list(got) == NAMES, text
    assert all(s == "ok" for n, (s, _) in got.items() if n != "mcp"), text
    assert f"Config file {setup.tmp / 'hugginggpt.toml'}; data dir {setup.tmp / 'data'}" in got["settings"][1]
    assert "lists sandbox-controller" in got["controller"][1]
    assert "token of ada (fineGrained); provider auto; billing: payment method on file" in got["hub"][1]
    assert "will be created at the first start" in got["store"][1]
    assert got["experts"][1].startswith(f"1 models at {setup.experts.url}")
    assert "ffmpeg" in got["ffmpeg"][1] and "GiB free" in got["disk"][1]
    assert got["mcp"] == ("skip", "No MCP tool servers configured ([mcp] servers is empty).")
    assert text.rstrip().endswith("All checks passed.")
    assert not (setup.tmp / "data").exists()  # doctor looks, it does not create
    assert setup.hub.calls("/api/whoami-v2") and setup.experts.listing_calls == 1


async def test_json_document(setup):
    setup.config["storage"]["data_dir"] = str(setup.tmp / "file")
    (setup.tmp / "file").write_text("not a directory")
    status, text = await setup.doctor("--json")
    doc = json.loads(text)
    assert status == 1 and doc["ok"] is False
    assert [c["name"] for c in doc["checks"]] == NAMES
    store = doc["checks"][NAMES.index("store")]
    assert store["status"] == "FAIL" and "is a file, not a directory" in store["message"] and store["fix"]


def _wrong_key(s: Setup) -> None:
    s.config["llm"]["api_key"] = "sk-not-the-key"


def _missing_model(s: Setup) -> None:
    s.config["llm"]["model"] = "gpt-missing"


def _controller_down(s: Setup) -> None:
    s.config["llm"]["base_url"] = f"http://127.0.0.1:{free_port()}/v1"


def _hub_token_refused(s: Setup) -> None:
    s.config["inference"]["token"] = "hf_revoked"


def _hub_without_permission(s: Setup) -> None:
    s.hub.account = whoami_body(permissions=("repo.content.read",))


def _hub_down(s: Setup) -> None:
    s.env["HF_ENDPOINT"] = f"http://127.0.0.1:{free_port()}"


def _no_hub_token(s: Setup) -> None:
    del s.config["inference"]["token"]
    s.config["inference"]["mode"] = "providers"


def _removed_provider(s: Setup) -> None:
    s.config["inference"]["provider"] = "nebius"


def _unknown_override(s: Setup) -> None:
    s.config["inference.providers"] = {"text-to-image": "acme-cloud"}


def _corrupt_database(s: Setup) -> None:
    (s.tmp / "data").mkdir()
    (s.tmp / "data" / "conversations.sqlite3").write_bytes(b"this is not SQLite" * 100)


def _postgres_down(s: Setup) -> None:
    s.config["storage"]["database_url"] = f"postgresql://bot:{PG_PASSWORD}@127.0.0.1:{free_port()}/hugginggpt"


def _expert_down(s: Setup) -> None:
    s.config["inference"]["experts_url"] = [s.experts.url, f"http://127.0.0.1:{free_port()}"]


def _mcp_placeholder(s: Setup) -> None:
    s.config["mcp.servers.standin"] = {"command": PLACEHOLDER, "args": ["-m", "sandbox.mcp_tools"]}


def _no_ffmpeg(s: Setup) -> None:
    empty = s.tmp / "bin"
    empty.mkdir()
    s.env["PATH"] = str(empty)


FAILURES = [
    ("controller", _wrong_key, [], "refused the API key (HTTP 401)"),
    ("controller", _missing_model, [], "does not list the model 'gpt-missing' (it lists 1: sandbox-controller)"),
    ("controller", _controller_down, [], "cannot be reached (connection failed)"),
    ("hub", _hub_token_refused, [], "The Hub refused the token"),
    ("hub", _hub_without_permission, [], "The token of ada may not call Inference Providers"),
    ("hub", _hub_down, [], "cannot be reached (ConnectError)"),
    ("hub", _no_hub_token, [], "No Hugging Face token"),
    ("providers", _removed_provider, [], '[inference] provider = "nebius" names nebius, which Hugging Face removed '
                                        "from Inference Providers on 2026-07-01; set it to \"auto\" or to a provider "
                                        "enabled at https://huggingface.co/settings/inference-providers."),
    ("providers", _unknown_override, [], '[inference.providers] "text-to-image" = "acme-cloud" names acme-cloud, which '
                                         "is not a provider the Hugging Face router knows"),
    ("store", _corrupt_database, [], "cannot be read as a conversation database"),
    ("store", _postgres_down, [], "postgresql://bot:***@127.0.0.1"),
    ("experts", _expert_down, [], "cannot be reached (ConnectError)"),
    ("mcp", _mcp_placeholder, [], f"The MCP server standin cannot start: its program {PLACEHOLDER} does not "
                                  "exist or cannot be run."),
    ("ffmpeg", _no_ffmpeg, [], "ffmpeg is not on PATH"),
    ("disk", lambda s: None, ["--min-free-mb", "1e12"], "below 1e+12 MiB"),
]


@pytest.mark.parametrize("name,breaks,args,said", FAILURES, ids=[f.__name__.strip("_") if hasattr(f, "__name__")
                                                                 and f.__name__ != "<lambda>" else "disk_full"
                                                                 for _, f, _, _ in FAILURES])
async def test_each_failure_is_one_line_with_what_to_do_and_exit_1(setup, name, breaks, args, said):
    breaks(setup)
    status, text = await setup.doctor(*args)
    got = verdicts(text)
    assert status == 1 and list(got) == NAMES, text
    assert got[name][0] == "FAIL" and said in got[name][1] and " → " in got[name][1], text
    assert all(s in ("ok", "skip") for n, (s, _) in got.items() if n != name), text  # the rest is judged on its own
    assert "Traceback" not in text


async def test_bad_settings_fail_first_and_skip_the_rest(setup):
    setup.config["llm"]["modle"] = "gpt-4o"
    status, text = await setup.doctor()
    got = verdicts(text)
    assert status == 1 and got["settings"][0] == "FAIL"
    assert "[llm] modle" in got["settings"][1] and "did you mean model?" in got["settings"][1]
    assert [s for s, _ in got.values()] == ["FAIL"] + ["skip"] * (len(NAMES) - 1)


async def test_free_credits_only_is_a_warning_not_a_failure(setup):
    setup.hub.account = whoami_body(can_pay=False)
    status, text = await setup.doctor()
    got = verdicts(text)
    assert status == 0 and got["hub"][0] == "warn"
    assert "free monthly credits only" in got["hub"][1] and "huggingface.co/settings/billing" in got["hub"][1]


async def test_a_controller_without_a_model_listing_gets_one_tiny_request(setup):
    bare = FaultyController().start()  # answers chat completions only: GET /models is a 404
    try:
        setup.config["llm"]["base_url"] = bare.url
        status, text = await setup.doctor()
    finally:
        bare.close()
    got = verdicts(text)
    assert status == 0 and got["controller"] == ("ok", f"{bare.url} answers a chat request with sandbox-controller "
                                                       "(it has no GET /models).")
    [asked] = bare.requests
    assert asked["body"]["max_tokens"] == 1 and asked["body"]["model"] == "sandbox-controller"


async def test_without_a_token_hybrid_mode_still_runs_the_expert_servers_models(setup):
    del setup.config["inference"]["token"]
    status, text = await setup.doctor()
    got = verdicts(text)
    assert status == 0 and got["hub"][0] == "warn" and "only the expert servers' models can run" in got["hub"][1]


async def test_mcp_servers_are_started_and_their_tools_listed(setup):
    start = f"import runpy, sys; sys.path.insert(0, {str(ROOT)!r}); runpy.run_module('sandbox.mcp_tools', run_name='__main__')"
    setup.config["mcp.servers.standin"] = {"command": sys.executable, "args": ["-c", start]}
    status, text = await setup.doctor()
    got = verdicts(text)
    assert status == 0 and got["mcp"][0] == "ok", text
    assert got["mcp"][1].startswith("standin: ") and " tools (its program python" in got["mcp"][1], text


async def test_an_mcp_server_that_never_answers_fails_within_the_timeout_alone(setup):
    setup.config["mcp.servers.mute"] = {"command": sys.executable, "args": ["-c", "import time; time.sleep(60)"]}
    status, text = await setup.doctor("--timeout", "3")
    got = verdicts(text)
    assert status == 1 and got["mcp"][0] == "FAIL", text
    assert "The MCP server mute (its program python" in got["mcp"][1] and "within 3 s." in got["mcp"][1], text
    assert all(s in ("ok", "skip") for n, (s, _) in got.items() if n != "mcp"), text
    assert len(text.strip().splitlines()) == len(NAMES) + 1  # the verdicts and the summary: no log lines


async def test_a_library_slow_to_import_does_not_fail_the_other_checks(setup):
    """The controller's client library takes 8 s to import (a loaded machine, a slow disk): with
    3 s per check, every check still passes, because each deadline starts when its check does."""
    slow = setup.tmp / "slow" / "openai"
    slow.mkdir(parents=True)
    (slow / "__init__.py").write_text(
        "import importlib, os, sys, time\n"
        "time.sleep(8)\n"
        "_mine = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))\n"
        "sys.path[:] = [p for p in sys.path if os.path.abspath(p or '.') != _mine]\n"
        "del sys.modules['openai']\n"
        "sys.modules['openai'] = importlib.import_module('openai')  # the real library, loaded late\n")
    setup.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(slow.parent), os.environ.get("PYTHONPATH")) if p)
    status, text = await setup.doctor("--timeout", "3")
    got = verdicts(text)
    assert status == 0 and all(s in ("ok", "skip") for s, _ in got.values()), text
    assert "lists sandbox-controller" in got["controller"][1]


async def test_the_prune_hint_names_the_program_as_it_was_run(setup):
    status, text = await setup.doctor("--min-free-mb", "1e12", "--json")
    [disk] = [c for c in json.loads(text)["checks"] if c["name"] == "disk"]
    command = shlex.split(disk["fix"].split("`")[1])
    assert status == 1 and "python" in Path(command[0]).name and command[1:] == ["-m", "hugginggpt", "store", "prune"]
