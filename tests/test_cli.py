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

from benchmarks.harness.realparts import cpu_seconds

MEDIA = Path(__file__).parent / "fixtures" / "media"


def hugginggpt(args, tmp_path, env_extra=None, timeout=120):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_TOKEN"))}
    env["HUGGINGGPT_STORAGE__DATA_DIR"] = str(tmp_path / "data")
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "hugginggpt", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
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


def test_a_variable_of_no_settings_section_is_refused_not_ignored(tmp_path):
    """``HUGGINGGPT_APROVAL__APPROVE`` would otherwise be read by nothing and the run go on with the
    default: a typo in a section's name is refused like one in a key's."""
    p = hugginggpt(["run", "--sandbox", "hello"], tmp_path, {"HUGGINGGPT_PLANING__APPROVE": "always"})
    no_traceback(p)
    assert p.returncode == 2, p.stderr
    assert "[planing] from HUGGINGGPT_PLANING__APPROVE is not a known section; did you mean planning?" in p.stderr


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
        [sys.executable, "-c", "import sys; from hugginggpt import main; import sandbox; "
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
    argv = [os.fsencode(sys.executable), b"-m", b"hugginggpt", b"run", b"--sandbox", b"--json",
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
    cmd = f"{sys.executable} -m hugginggpt run --sandbox 'describe this picture' --file {MEDIA / 'chelsea.png'} | head -1"
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
    assert how.index("1. Task 0, `text-to-image`") < how.index("2. Task 1, `image-classification` with")
    p = hugginggpt(["run", "--sandbox", "--json", "Generate an image of a cat on a red sofa"], tmp_path)
    assert "**How I did it**\n\n1. Task 0, `text-to-image`" in json.loads(p.stdout)["response"]  # a list, not glued on
    p = hugginggpt(["store"], tmp_path)
    assert p.returncode == 2 and "store_command" not in p.stderr and "{prune,forget}" in p.stderr


# --- files read with their limit applied while reading; ports checked as settings -----------------------------------

def _env(tmp_path, extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_TOKEN"))}
    env["HUGGINGGPT_STORAGE__DATA_DIR"] = str(tmp_path / "data")
    env.update(extra or {})
    return env


def _cap_memory():  # a child that ignored the file limit would stop at 4 GB instead of taking the machine
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def _peak_rss(args, tmp_path, stdin=None, extra=None):
    """(exit status, stderr, peak RSS in bytes) of ``hugginggpt ARGS``, measured on that process alone."""
    proc = subprocess.Popen([sys.executable, "-m", "hugginggpt", *args], cwd=tmp_path, env=_env(tmp_path, extra), stdin=stdin,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_cap_memory)
    err = proc.stderr.read().decode()  # ends when the process does (bounded by the read timeout below)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, err, usage.ru_maxrss * 1024


LIMIT = 2 * 1024 * 1024
SMALL_LIMITS = {"HUGGINGGPT_STORAGE__MAX_FILE_BYTES": str(LIMIT), "HUGGINGGPT_DOCUMENTS__MAX_PDF_BYTES": str(LIMIT),
                "HUGGINGGPT_STORAGE__FILE_READ_TIMEOUT": "20"}


def test_an_endless_device_is_refused_at_the_limit_in_bounded_memory(tmp_path):
    status, err, empty_peak = _peak_rss(["run", "--sandbox", "Describe", "--file", "/dev/null"], tmp_path, extra=SMALL_LIMITS)
    assert status == 3 and "The file /dev/null is empty." in err, err  # the baseline: the same run, nothing read
    status, err, peak = _peak_rss(["run", "--sandbox", "Describe", "--file", "/dev/zero"], tmp_path, extra=SMALL_LIMITS)
    assert "Traceback" not in err
    assert status == 3 and "The file /dev/zero goes on past the limit of 2 MiB." in err, err
    assert peak - empty_peak < LIMIT + 16 * 1024 * 1024, (peak, empty_peak)


def test_an_endless_pipe_is_refused_at_the_limit(tmp_path):
    yes = subprocess.Popen(["yes", "a fairly long line of text that keeps coming"], stdout=subprocess.PIPE)
    try:
        status, err, _ = _peak_rss(["run", "--sandbox", "Summarize", "--file", "/dev/stdin"], tmp_path, stdin=yes.stdout,
                                   extra=SMALL_LIMITS)
    finally:
        yes.kill()
        yes.wait()
    assert "Traceback" not in err
    assert status == 3 and "The file /dev/stdin goes on past the limit of 2 MiB." in err, err


def test_a_regular_file_over_the_limit_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big.wav"
    with open(big, "wb") as f:
        f.truncate(3 * LIMIT)  # sparse: the size alone refuses it
    p = hugginggpt(["run", "--sandbox", "Transcribe", "--file", str(big)], tmp_path, SMALL_LIMITS)
    no_traceback(p)
    assert p.returncode == 3 and f"The file {big} is 6.0 MiB; the limit is 2 MiB." in p.stderr, p.stderr


def test_a_fifo_nothing_writes_to_is_given_up_after_the_read_timeout(tmp_path):
    fifo = tmp_path / "photo.png"
    os.mkfifo(fifo)
    started = time.monotonic()
    p = hugginggpt(["run", "--sandbox", "Describe", "--file", str(fifo)], tmp_path,
                   {"HUGGINGGPT_STORAGE__FILE_READ_TIMEOUT": "1"}, timeout=60)
    no_traceback(p)
    assert p.returncode == 3 and f"The file {fifo} was still not read after 1 seconds" in p.stderr, p.stderr
    assert time.monotonic() - started < 45


def test_a_file_from_process_substitution_is_attached(tmp_path):
    command = f'"{sys.executable}" -m hugginggpt run --sandbox --json "Describe this picture" --file <(cat "{MEDIA / "chelsea.png"}")'
    p = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert [t["task"] for t in doc["tasks"]] == ["image-to-text"]  # the piped photo reached the plan


def _sigint_to_a_worker_thread(pid: int) -> None:
    """SIGINT to one of ``pid``'s threads other than its main one (``tgkill``), as the kernel may
    hand a process's signal to any of its threads."""
    import ctypes

    workers = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    assert workers, "the program has no worker thread yet"
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.tgkill(pid, workers[0], signal.SIGINT) == 0, os.strerror(ctypes.get_errno())


def _wait_until_idle(pid: int, quiet: float = 0.5, limit: float = 30.0) -> None:
    """Return once process ``pid`` used no CPU for ``quiet`` seconds (its event loop waits)."""
    last, since, end = cpu_seconds(pid), time.monotonic(), time.monotonic() + limit
    while time.monotonic() < end:
        time.sleep(0.1)
        now = cpu_seconds(pid)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_ctrl_c_goes_back_where_it_went_before(loop):
    """Between and after the terminal's Ctrl-C handlers (a file's read, a run's first Ctrl-C),
    SIGINT reaches the handler that was there (the command's asyncio.Runner, which cancels its
    task), never Python's default, which raised KeyboardInterrupt inside whatever the main thread
    ran: in an import holding the interpreter's lock, it left the other threads waiting forever."""
    import asyncio

    from adapters.terminal import on_ctrl_c
    from hugginggpt.common import loop_factory

    got: list[str] = []

    async def ctrl_c() -> None:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(50):  # the loop's handlers run on its next turns
            await asyncio.sleep(0.01)

    async def main() -> None:
        with on_ctrl_c(lambda: got.append("read")):
            await ctrl_c()
        await ctrl_c()
        with on_ctrl_c(lambda: got.append("stop"), once=True):
            await ctrl_c()
            await ctrl_c()
        await ctrl_c()

    before = signal.signal(signal.SIGINT, lambda *_: got.append("runner"))
    try:
        with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
            runner.run(main())
    except KeyboardInterrupt:
        pytest.fail(f"Ctrl-C raised KeyboardInterrupt in the main thread after {got}")
    finally:
        signal.signal(signal.SIGINT, before)
    assert got == ["read", "runner", "stop", "runner", "runner"]


@pytest.mark.parametrize("to", ["process", "worker thread"])
def test_ctrl_c_stops_a_read_that_waits(tmp_path, to):
    fifo = tmp_path / "speech.wav"
    os.mkfifo(fifo)
    env = {**_env(tmp_path), "HUGGINGGPT_STORAGE__FILE_READ_TIMEOUT": "600"}
    proc = subprocess.Popen([sys.executable, "-m", "hugginggpt", "run", "--sandbox", "Transcribe", "--file", str(fifo)],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    writer = None
    deadline = time.monotonic() + 60
    while writer is None and time.monotonic() < deadline and proc.poll() is None:
        try:  # opening for writing succeeds once the program has the FIFO open for reading
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            time.sleep(0.05)
    assert writer is not None, proc.communicate(timeout=5)
    try:
        # the writer stays open and silent: only Ctrl-C ends the wait (the read's own limit is 600 s)
        if to == "process":
            time.sleep(0.3)
            proc.send_signal(signal.SIGINT)
        else:  # once the event loop sleeps on the FIFO: only a wake-up by the signal notices it
            _wait_until_idle(proc.pid)
            _sigint_to_a_worker_thread(proc.pid)
        # the exit waits for start-up work already on worker threads (the store's schema in a new
        # data directory, the first-use imports): seconds on a loaded machine; the bound is a hang's
        _, err = proc.communicate(timeout=60)
    finally:
        os.close(writer)
        proc.kill()
    assert "Traceback" not in err
    assert proc.returncode == 130 and "Interrupted" in err, err


@pytest.mark.parametrize("command", [["serve"], ["slack", "--mode", "http"], ["experts", "serve"]])
def test_a_port_outside_the_tcp_range_is_a_settings_error(tmp_path, command):
    p = hugginggpt([*command, "--port", "70000"], tmp_path)
    no_traceback(p)
    assert p.returncode == 2 and "'70000' is not a port: give a whole number from 0 to 65535" in p.stderr, p.stderr


def test_the_expert_server_on_a_busy_port_says_so(tmp_path):
    pytest.importorskip("torch")
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for argv in (["-m", "hugginggpt", "experts", "serve"], ["-m", "expert_server"]):
            p = subprocess.run([sys.executable, *argv, "--port", str(port), "--device", "cpu"], cwd=tmp_path,
                               env=_env(tmp_path), capture_output=True, text=True, timeout=120)
            no_traceback(p)
            assert p.returncode == 2, p.stderr
            assert f"I cannot listen on 127.0.0.1:{port} (Address already in use)" in p.stderr, p.stderr
            assert p.stderr.count("\n") == 1, p.stderr  # one sentence
