"""``hugginggpt chat`` in a real terminal (a pty, through pexpect): Ctrl-C at the prompt clears the
line and a second one leaves; Ctrl-C during a run stops the run and the chat goes on; ``/new``
says how to come back; resuming lists the first turn too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pexpect

from tests.standins.faulty_controller import FaultyController

MEDIA = Path(__file__).parent / "fixtures" / "media"


def _env(tmp_path, extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_"))}
    env["HUGGINGGPT_STORAGE__DATA_DIR"] = str(tmp_path / "data")
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    env.update(extra or {})
    return env


def spawn(tmp_path, *args, env=None):
    return pexpect.spawn(
        sys.executable, ["-m", "bot.cli", "chat", *args], cwd=str(tmp_path), env=env or _env(tmp_path),
        encoding="utf-8", timeout=60, dimensions=(40, 200),
    )


def test_ctrl_c_at_the_prompt_clears_the_line_and_twice_leaves(tmp_path):
    chat = spawn(tmp_path, "--sandbox")
    chat.expect("you> ")
    chat.send("this half-typed line is dropped")
    chat.sendintr()
    chat.expect("Line cleared")
    chat.sendline("hello")
    chat.expect("Sandbox stand-in")  # the answer to "hello", not to the dropped text
    chat.expect("you> ")
    assert "half-typed" not in chat.before
    chat.sendintr()
    chat.expect("Line cleared")
    chat.sendintr()
    chat.expect("Resume with: hugginggpt chat --conversation")
    chat.expect(pexpect.EOF)
    chat.close()
    assert chat.exitstatus == 130
    assert "Traceback" not in (chat.before or "")


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
        chat.expect("you> ")
        chat.sendline(f"/file {MEDIA / 'chelsea.png'}")
        chat.expect("Attached chelsea.png")
        chat.expect("you> ")
        chat.sendline("describe this photo")
        chat.expect("image-to-text")
        chat.expect("running on")
        chat.sendintr()
        chat.expect("Stopping this run", timeout=5)
        # the answer covers what finished, and the task still running is stopped (how fast: the benchmark)
        chat.expect("You stopped this run; here is what finished.", timeout=10)
        chat.expect("you> ")
        assert "task 0 (image-to-text): Stopped before it finished." in chat.before and "Traceback" not in chat.before
        chat.sendline("describe this photo again")
        chat.expect("running on")
        chat.sendintr()
        chat.expect("Stopping this run", timeout=5)
        chat.sendintr()  # a second Ctrl-C does not wait for the run to wind down
        chat.expect("Abandoned this run", timeout=5)
        chat.expect("you> ")
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
    p = subprocess.run([sys.executable, "-m", "bot.cli", "chat", "--sandbox"], input=lines, cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    first = p.stdout.split("resume later with: hugginggpt chat --conversation ")[1].split(")")[0]
    assert f"Resume the previous one with: hugginggpt chat --conversation {first}" in p.stdout
    p = subprocess.run([sys.executable, "-m", "bot.cli", "chat", "--sandbox", "--conversation", first], input="/quit\n",
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "6 earlier turns" in p.stdout
    assert "[0] you: first, with a photo" in p.stdout and "[5] you: sixth" in p.stdout and "… 2 more" in p.stdout
