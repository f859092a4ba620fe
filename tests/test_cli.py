"""``hugginggpt run`` as a user runs it: a real subprocess, real files, exit statuses, no tracebacks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

MEDIA = Path(__file__).parent / "fixtures" / "media"


def hugginggpt(args, tmp_path, env_extra=None, timeout=120):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_TOKEN"))}
    env["HUGGINGGPT_STORAGE__DATA_DIR"] = str(tmp_path / "data")
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )


def no_traceback(p):
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout, p.stderr


def test_run_json_record(tmp_path):
    p = hugginggpt(["run", "--sandbox", "--json", "Describe this picture in as much detail as you can", "--file", str(MEDIA / "chelsea.png")], tmp_path)
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert set(doc) >= {"tasks", "selections", "results", "response", "files", "llm_calls", "timings_ms"}
    assert [t["task"] for t in doc["tasks"]] and all(r["status"] == "ok" for r in doc["results"].values())
    assert set(doc["selections"]) == set(doc["results"]) == {str(t["id"]) for t in doc["tasks"]}
    assert doc["llm_calls"] >= 2 and doc["timings_ms"]["total"] > 0
    [f] = doc["files"]
    assert Image.open(f["path"]).size == (451, 300)
    assert "Sandbox stand-in" in doc["response"]


def test_run_prints_plan_models_answer_and_files(tmp_path):
    p = hugginggpt(["run", "--sandbox", "Generate an image of a cat on a red sofa, then tell me what breed it might be"], tmp_path)
    no_traceback(p)
    assert p.returncode == 0
    out, err = p.stdout, p.stderr  # not a terminal: progress on stderr, only the answer on stdout
    assert "[0] text-to-image" in err and "[1] image-classification" in err and "(after 0)" in err
    assert "running on" in err and "done" in err
    assert "running on" not in out and "Plan" not in out and out.startswith("*(Sandbox stand-in")
    assert "Files:" in out
    path = out.split("Files:")[1].strip().splitlines()[0].rsplit(": ", 1)[1]
    assert Image.open(path).size == (512, 512)


def test_missing_credentials_names_the_setting(tmp_path):
    p = hugginggpt(["run", "hello"], tmp_path)
    no_traceback(p)
    assert p.returncode == 2
    assert "OPENAI_API_KEY" in p.stderr and "--sandbox" in p.stderr
    p = hugginggpt(["run", "hello"], tmp_path, {"OPENAI_API_KEY": "sk-test-123456"})
    assert p.returncode == 2 and "HF_TOKEN" in p.stderr


def test_invalid_config_file(tmp_path):
    (tmp_path / "hugginggpt.toml").write_text("[inference]\ntop_k = 'many'\n")
    p = hugginggpt(["run", "--sandbox", "hello"], tmp_path)
    no_traceback(p)
    assert p.returncode == 2 and "[inference] top_k in hugginggpt.toml" in p.stderr
    assert p.stderr.count("top_k") == 1, p.stderr  # said once, not once per log handler


def test_config_errors_one_line_each_no_secret_values(tmp_path):
    (tmp_path / "hugginggpt.toml").write_text(
        "[inference]\ntopk = 3\ndeadline = -5\n[stroage]\nx = 1\n[llm]\napi_key = 'sk-in-file-999'\ntimeout = 'soon'\n"
    )
    p = hugginggpt(["run", "--sandbox", "hello"], tmp_path, {"HUGGINGGPT_SLACK__PORT": "0"})
    no_traceback(p)
    assert p.returncode == 2
    err = p.stderr
    assert "[inference] topk in hugginggpt.toml is not a known key; did you mean top_k?" in err
    assert "[inference] deadline in hugginggpt.toml is invalid" in err
    assert "[stroage] in hugginggpt.toml is not a known section; did you mean storage?" in err
    assert "[slack] port from HUGGINGGPT_SLACK__PORT is invalid" in err
    assert "[llm] timeout in hugginggpt.toml is invalid" in err
    assert "sk-in-file-999" not in err and "soon" not in err and "pydantic" not in err
    (tmp_path / "hugginggpt.toml").write_text("[llm\n")
    p = hugginggpt(["run", "--sandbox", "hello"], tmp_path)
    assert p.returncode == 2 and "not valid TOML" in p.stderr


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda d: d / "nope.png", "does not exist"),
        (lambda d: (d / "empty.png").write_bytes(b"") and d / "empty.png" or d / "empty.png", "empty"),
        (lambda d: d, "directory"),
    ],
)
def test_bad_file_arguments(tmp_path, make, expected):
    p = hugginggpt(["run", "--sandbox", "Describe", "--file", str(make(tmp_path))], tmp_path)
    no_traceback(p)
    assert p.returncode == 3 and expected in p.stderr


def test_unreachable_controller(tmp_path):
    env = {"OPENAI_API_KEY": "sk-secret-value-999", "HUGGINGGPT_LLM__BASE_URL": "http://127.0.0.1:9/v1", "HUGGINGGPT_LLM__MAX_RETRIES": "0",
           "HUGGINGGPT_INFERENCE__BASE_URL": "http://127.0.0.1:9"}
    p = hugginggpt(["run", "hello"], tmp_path, env)
    no_traceback(p)
    assert p.returncode == 4 and "cannot be reached" in p.stderr
    log = (tmp_path / "data" / "logs" / "hugginggpt.log").read_text()
    assert "APIConnectionError" in log and "sk-secret-value-999" not in log + p.stderr + p.stdout


def test_ctrl_c_leaves_no_half_written_files(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_"))}
    env["HUGGINGGPT_STORAGE__DATA_DIR"] = str(tmp_path / "data")
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from bot.cli import main; import sandbox; "
         "orig = sandbox.Sandbox.__init__\n"
         "def slow(self, **kw):\n    orig(self, latency={'image-to-text': 30})\n"
         "sandbox.Sandbox.__init__ = slow\nsys.exit(main(sys.argv[1:]))",
         "run", "--sandbox", "Describe this picture in as much detail as you can", "--file", str(MEDIA / "chelsea.png")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    # wait until the slow task is running (its progress line is printed), then interrupt
    deadline = time.monotonic() + 60
    seen = ""
    while time.monotonic() < deadline and "running on" not in seen:
        line = proc.stderr.readline()  # progress goes to stderr when stdout is not a terminal
        if not line:
            break
        seen += line
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "Stopping this run" in err
    assert "You stopped this run; here is what finished." in out
    leftovers = [p for p in (tmp_path / "data").rglob("*") if p.is_file() and (".tmp" in p.name or p.name.startswith("."))]
    assert leftovers == []
    for f in (tmp_path / "data" / "media").rglob("*.png"):
        Image.open(f).load()  # every stored file is whole


def test_non_utf8_request_and_file_name_are_accepted(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_TOKEN"))}
    env["HUGGINGGPT_STORAGE__DATA_DIR"] = str(tmp_path / "data")
    odd = tmp_path / os.fsdecode(b"caf\xe9.png")
    odd.write_bytes((MEDIA / "chelsea.png").read_bytes())
    argv = [os.fsencode(sys.executable), b"-m", b"bot.cli", b"run", b"--sandbox", b"--json",
            b"describe this picture \xff", b"--file", os.fsencode(odd)]
    p = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, timeout=120)
    assert b"Traceback" not in p.stderr, p.stderr
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["request"] == "describe this picture \ufffd"
    assert doc["results"]["0"]["status"] == "ok"


def test_closed_reader_ends_quietly(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_TOKEN"))}
    env["HUGGINGGPT_STORAGE__DATA_DIR"] = str(tmp_path / "data")
    cmd = f"{sys.executable} -m bot.cli run --sandbox 'describe this picture' --file {MEDIA / 'chelsea.png'} | head -1"
    p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.stdout.count("\n") == 1
    assert "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr, p.stderr
    assert p.returncode in (0, 141)


def test_bare_command_prints_help_version_and_verbose_after_the_command(tmp_path):
    p = hugginggpt([], tmp_path)
    assert p.returncode == 0 and "usage: hugginggpt" in p.stdout and "run" in p.stdout
    p = hugginggpt(["--version"], tmp_path)
    assert p.returncode == 0 and p.stdout.startswith("hugginggpt ")
    p = hugginggpt(["run", "-v", "--sandbox", "hello"], tmp_path)
    assert p.returncode == 0 and " INFO " in p.stderr  # -v after the command logs to stderr too


def test_json_document_even_when_the_run_fails_before_planning(tmp_path):
    p = hugginggpt(["run", "--sandbox", "--json", "describe", "--file", "missing.png"], tmp_path)
    no_traceback(p)
    assert p.returncode == 3
    doc = json.loads(p.stdout)
    assert doc["status"] == "error" and "missing.png does not exist" in doc["error"] and doc["exit_status"] == 3
    assert p.stderr.count("does not exist") == 1


def test_terminal_answer_lists_tasks_by_id_and_says_where_files_are(tmp_path):
    p = hugginggpt(["run", "--sandbox", "Generate an image of a cat on a red sofa, then tell me what breed it might be"], tmp_path)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "attached below" not in out and "delivered with this answer" in out
    how = out.split("How I did it")[1]
    assert how.index("0. `text-to-image`") < how.index("1. `image-classification`")
    p = hugginggpt(["store"], tmp_path)
    assert p.returncode == 2 and "store_command" not in p.stderr and "{prune,forget}" in p.stderr
