"""Plan approval on the terminal (issue 36 item 2): ``hugginggpt run`` asks y/N in a pty before
anything runs, refuses without a terminal unless ``--yes``. Real subprocesses, the sandbox."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pexpect

from bot.approval import CANCELLED, NO_TERMINAL

MEDIA = Path(__file__).parent / "fixtures" / "media"
ROOT = Path(__file__).resolve().parent.parent


def _env(tmp_path, extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_TOKEN"))}
    env.update({"HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(ROOT), "TERM": "xterm-256color"})
    return {**env, **extra}

ASK = {"HUGGINGGPT_PLANNING__APPROVE": "always"}
PHOTO = ["describe this photo", "--file", str(MEDIA / "chelsea.png")]


def spawn(tmp_path, *args):
    return pexpect.spawn(sys.executable, ["-m", "hugginggpt", "run", "--sandbox", *args], cwd=str(tmp_path),
                         env=_env(tmp_path, ASK), encoding="utf-8", timeout=120, dimensions=(40, 160))


def test_yes_at_the_prompt_runs_the_plan(tmp_path):
    run = spawn(tmp_path, *PHOTO)
    run.expect("cost: unknown")
    run.expect(r"Run this plan\? \[y/N\]")
    run.sendline("y")
    run.expect(pexpect.EOF)
    run.close()
    assert run.exitstatus == 0, run.before
    assert "image-to-text" in run.before  # the plan ran and its answer was written


def test_no_at_the_prompt_runs_nothing(tmp_path):
    run = spawn(tmp_path, *PHOTO)
    run.expect(r"Run this plan\? \[y/N\]")
    run.sendline("")
    run.expect(pexpect.EOF)
    run.close()
    assert run.exitstatus == 0 and CANCELLED in run.before


def test_without_a_terminal_it_is_refused_unless_yes(tmp_path):
    cmd = [sys.executable, "-m", "hugginggpt", "run", "--sandbox", *PHOTO]
    p = subprocess.run(cmd, cwd=tmp_path, env=_env(tmp_path, ASK), stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=180)
    assert p.returncode == 3 and NO_TERMINAL in p.stderr and "Traceback" not in p.stderr
    p = subprocess.run([*cmd, "--yes"], cwd=tmp_path, env=_env(tmp_path, ASK), stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip()  # the answer


def test_the_chat_asks_too_and_runs_the_plan_as_its_next_turn(tmp_path):
    env = {**_env(tmp_path, ASK), "PROMPT_TOOLKIT_NO_CPR": "1"}
    chat = pexpect.spawn(sys.executable, ["-m", "hugginggpt", "chat", "--sandbox"], cwd=str(tmp_path), env=env,
                         encoding="utf-8", timeout=120, dimensions=(40, 200))
    chat.expect("you>")
    chat.sendline(f"/file {MEDIA / 'chelsea.png'}")
    chat.expect("you>")
    chat.sendline("describe this photo")
    chat.expect("cost: unknown")
    chat.expect(r"Run this plan\? \[y/N\]")
    chat.sendline("y")
    chat.expect("Sandbox stand-in")  # the answer of the approved plan
    chat.expect("you>")
    chat.sendline("describe this photo again")
    chat.expect(r"Run this plan\? \[y/N\]")
    chat.sendline("n")
    chat.expect(CANCELLED)
    chat.expect("you>")
    chat.sendeof()
    chat.expect(pexpect.EOF)
