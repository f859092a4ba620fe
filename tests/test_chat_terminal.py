"""``hugginggpt chat`` in a real terminal (a pty, through pexpect), as a person uses it: line editing
with the arrow keys, history recalled in a later session, multi-line messages, answers rendered as
Markdown, the live task view with its seconds, Ctrl-C at the prompt (clears; two within 2 s leave),
Ctrl-D, Ctrl-C during a run (stops it; twice abandons it); ``/new`` says how to come back;
resuming lists the first turn too."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest

from sandbox.faulty_controller import FaultyController

MEDIA = Path(__file__).parent / "fixtures" / "media"
PROMPT = "you>"  # prompt_toolkit draws "you> " and moves the cursor instead of writing the space
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")
UP, LEFT, ALT_ENTER = "\x1b[A", "\x1b[D", "\x1b\r"
RESUME = r"\S*python\S* -m hugginggpt chat --sandbox --conversation"  # as these tests start it


def drawn(text: str) -> str:
    """A pattern for ``text`` as prompt_toolkit draws it (a space may be a cursor move right)."""
    return r"(?:\x1b\[\d*C| )".join(re.escape(w) for w in text.split(" "))


def screen_text(raw: str) -> str:
    """What the pty received, without colours and cursor moves (the words a person reads)."""
    return _ANSI.sub("", raw)


def _env(tmp_path, extra=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_", "KITTY_", "TERM_PROGRAM", "TMUX", "STY"))}
    env["HUGGINGGPT_STORAGE__DATA_DIR"] = str(tmp_path / "data")
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    env["TERM"] = "xterm-256color"
    env["PROMPT_TOOLKIT_NO_CPR"] = "1"  # pexpect does not answer cursor-position requests
    env.update(extra or {})
    return env


def spawn(tmp_path, *args, env=None):
    return pexpect.spawn(
        sys.executable, ["-m", "hugginggpt", "chat", *args], cwd=str(tmp_path), env=env or _env(tmp_path),
        encoding="utf-8", timeout=60, dimensions=(40, 200),
    )


def _faulty(tmp_path, c, extra=None):
    return _env(tmp_path, {
        "HUGGINGGPT_LLM__BASE_URL": c.url, "HUGGINGGPT_LLM__API_KEY": "sk-test-0000",
        "HUGGINGGPT_INFERENCE__BASE_URL": f"http://127.0.0.1:{c.port}", "HUGGINGGPT_INFERENCE__SELECTION": "top",
        **(extra or {}),
    })


def test_ctrl_c_at_the_prompt_clears_the_line_and_only_two_within_two_seconds_leave(tmp_path):
    chat = spawn(tmp_path, "--sandbox")
    chat.expect("Ctrl-C twice within 2 s, or Ctrl-D, leaves")  # the banner says the keys
    chat.expect(PROMPT)
    chat.send("this half-typed line is dropped")
    chat.sendintr()
    chat.expect("Line cleared")
    time.sleep(2.3)  # a second Ctrl-C later than 2 s clears again and does not leave
    chat.send("another draft")
    chat.sendintr()
    chat.expect("Line cleared")
    chat.send("hello\r")
    chat.expect("Sandbox stand-in")  # the answer to "hello", not to the dropped text
    chat.expect(PROMPT)
    assert "half-typed" not in screen_text(chat.before) and "another draft" not in screen_text(chat.before)
    chat.sendintr()
    chat.expect("Line cleared")
    chat.sendintr()
    chat.expect("Bye. Resume with: " + RESUME)
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 130
    assert "Traceback" not in (chat.before or "")


def test_a_pasted_text_keeps_its_lines_and_ctrl_d_leaves(tmp_path):
    chat = spawn(tmp_path, "--sandbox")
    chat.expect(r"Conversation (\w+) ")
    conv = chat.match.group(1)
    chat.expect(PROMPT)
    chat.send("\x1b[200~pasted one\rpasted two\x1b[201~")  # bracketed paste: its line break does not send
    chat.expect(drawn("pasted two"))
    chat.send("\r")
    chat.expect("Sandbox stand-in")
    chat.expect(PROMPT)
    chat.sendcontrol("d")
    chat.expect("Bye. Resume with: " + RESUME)
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 0
    p = subprocess.run([sys.executable, "-m", "hugginggpt", "chat", "--sandbox", "--conversation", conv], input="/quit\n",
                       cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert "1 earlier turns" in p.stdout and "[0] you: pasted one\npasted two" in p.stdout, p.stdout


def test_arrow_key_editing_multi_line_messages_and_history_in_a_later_session(tmp_path):
    chat = spawn(tmp_path, "--sandbox")
    chat.expect(r"Conversation (\w+) ")
    conv = chat.match.group(1)
    chat.expect(PROMPT)
    chat.send("hllo there" + LEFT * 9 + "e" + "\r")  # the missing letter typed after moving back
    chat.expect("Sandbox stand-in")
    chat.expect(PROMPT)
    chat.send("first line" + ALT_ENTER + "second line")  # Alt-Enter: a new line, not sent yet
    chat.expect(drawn("second line"))
    chat.send("\r")
    chat.expect("Sandbox stand-in")
    chat.expect(PROMPT)
    chat.sendcontrol("d")
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 0
    assert "^[[D" not in chat.before

    # what was stored is what the user edited: one turn with the fix, one turn of two lines
    p = subprocess.run([sys.executable, "-m", "hugginggpt", "chat", "--sandbox", "--conversation", conv], input="/quit\n",
                       cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert "[0] you: hello there" in p.stdout, p.stdout
    assert "[1] you: first line\nsecond line" in p.stdout, p.stdout

    # a new session recalls both with the Up arrow, newest first
    chat = spawn(tmp_path, "--sandbox")
    chat.expect(PROMPT)
    chat.send(UP)
    chat.expect(drawn("second line"))
    chat.send(UP + UP)  # inside a two-line message Up first moves to its first line, then to the older one
    chat.expect(drawn("hello there"))
    chat.send("\r")
    chat.expect("Sandbox stand-in")
    chat.expect(PROMPT)
    chat.sendline("/quit")
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 0
    assert oct((tmp_path / "data" / "chat_history").stat().st_mode & 0o777) == "0o600"


def test_the_answer_is_markdown_and_the_tasks_show_their_state_and_seconds(tmp_path):
    c = FaultyController().start()
    try:
        c.plan = json.dumps({"tasks": [{"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": "image-1"}}]})
        c.expert_delay = 2.5  # the model answers 404 after 2.5 s: the task runs, then fails
        c.answer = "The photo could not be captioned, **sorry**.\n\n- first point\n- second point"
        chat = spawn(tmp_path, env=_faulty(tmp_path, c))
        chat.expect(PROMPT)
        chat.sendline(f"/file {MEDIA / 'chelsea.png'}")
        chat.expect("Attached chelsea.png")
        chat.expect(PROMPT)
        chat.sendline("describe this photo")
        chat.expect(r"\[0\] image-to-text  \S*running on \S+?(\x1b\[0m)?(\x1b\[36m)?  [12]\.\d s")  # redrawn while it runs
        chat.expect(r"Running the tasks…  \S*[12]\.\d s")
        chat.expect("sorry")
        chat.expect(PROMPT)
        shown = screen_text(chat.before)
        assert "The photo could not be captioned, sorry." in shown and "**" not in shown
        assert "• first point" in shown and "- first point" not in shown
        assert re.search(r"\[0\] image-to-text  failed  \d\.\d s: ", shown), shown
        chat.sendline("/quit")
        chat.expect(pexpect.EOF)
        chat.close()
        assert chat.exitstatus == 0
    finally:
        c.close()


def test_ctrl_c_during_a_run_stops_it_with_what_finished_twice_abandons_it(tmp_path):
    c = FaultyController().start()
    try:
        c.plan = json.dumps({"tasks": [{"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": "image-1"}}]})
        c.expert_delay = 60
        env = _env(tmp_path, {
            "HUGGINGGPT_LLM__BASE_URL": c.url, "HUGGINGGPT_LLM__API_KEY": "sk-test-0000",
            "HUGGINGGPT_INFERENCE__BASE_URL": f"http://127.0.0.1:{c.port}", "HUGGINGGPT_INFERENCE__SELECTION": "top",
        })
        chat = spawn(tmp_path, env=env)
        chat.expect(PROMPT)
        chat.sendline(f"/file {MEDIA / 'chelsea.png'}")
        chat.expect("Attached chelsea.png")
        chat.expect(PROMPT)
        chat.sendline("describe this photo")
        chat.expect("image-to-text")
        chat.expect("running on")
        chat.sendintr()
        chat.expect("Stopping this run", timeout=5)
        # the answer covers what finished, and the task still running is stopped (how fast: the benchmark)
        chat.expect("You stopped this run; here is what finished.", timeout=10)
        chat.expect(PROMPT)
        assert "task 0 (image-to-text): Stopped before it finished." in chat.before and "Traceback" not in chat.before
        chat.sendline("describe this photo again")
        chat.expect("running on")
        chat.sendintr()
        chat.expect("Stopping this run", timeout=5)
        chat.sendintr()  # a second Ctrl-C does not wait for the run to wind down
        chat.expect("Abandoned this run", timeout=5)
        chat.expect(PROMPT)
        chat.sendline("/quit")
        chat.expect(pexpect.EOF)
        chat.close()
        assert chat.exitstatus == 0
        assert "Traceback" not in chat.before
    finally:
        c.close()


def test_new_gives_a_resume_hint_and_resuming_lists_the_first_turn(tmp_path):
    env = _env(tmp_path)
    lines = "\n".join(["first, with a photo", "second", "third", "fourth", "fifth", "sixth", "/new", "/quit"]) + "\n"
    p = subprocess.run([sys.executable, "-m", "hugginggpt", "chat", "--sandbox"], input=lines, cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    first = re.search(rf"resume later with: {RESUME} (\w+)\)", p.stdout).group(1)
    assert re.search(rf"Resume the previous one with: {RESUME} {first}\)", p.stdout), p.stdout
    p = subprocess.run([sys.executable, "-m", "hugginggpt", "chat", "--sandbox", "--conversation", first], input="/quit\n",
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "6 earlier turns" in p.stdout
    assert "[0] you: first, with a photo" in p.stdout and "[5] you: sixth" in p.stdout and "… 2 more" in p.stdout


def _resume_hint(out: str) -> list[str]:
    """The command of the chat's first resume hint, split as a shell splits it."""
    return shlex.split(out.split("(resume later with: ")[1].split(")")[0])


@pytest.mark.parametrize("how", ["module", "script on PATH", "script by path"])
def test_the_resume_hint_is_the_command_the_user_ran_with_their_options_and_it_resumes(tmp_path, how):
    """The hint names the program as the user ran it, with their --config and --sandbox, and
    running it exactly as printed resumes the conversation."""
    bin_dir = Path(sys.executable).parent
    script = bin_dir / "hugginggpt"
    if how != "module" and not script.is_file():
        pytest.skip("the hugginggpt script is not installed beside this interpreter")
    (tmp_path / "my config.toml").write_text('[inference]\ndeadline = 300\n')
    env = _env(tmp_path, {"PATH": os.pathsep.join([str(bin_dir), os.environ["PATH"]]) if how == "script on PATH"
                          else os.environ["PATH"].replace(str(bin_dir), "/nonexistent")})
    start = {"module": [sys.executable, "-m", "hugginggpt"], "script on PATH": ["hugginggpt"],
             "script by path": [str(script)]}[how]
    p = subprocess.run([*start, "--config", "my config.toml", "chat", "--sandbox"], input="hello\n/quit\n",
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    hint = _resume_hint(p.stdout)
    assert hint[:-1] == [*start, "--config", "my config.toml", "chat", "--sandbox", "--conversation"], hint
    again = subprocess.run(hint, input="/quit\n", cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and f"Resuming conversation {hint[-1]}: 1 earlier turns" in again.stdout, again.stderr
