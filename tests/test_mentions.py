"""A request that relies on a file that is not there gets a sentence, before any LLM call
(issue 15, "Inputs people give"): as a user types it, in a real process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bot.mentions import check_mentions
from bot.errors import InputError

MEDIA = Path(__file__).parent / "fixtures" / "media"


def hugginggpt(args, tmp_path, stdin=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_TOKEN"))}
    env["HUGGINGGPT_STORAGE__DATA_DIR"] = str(tmp_path / "data")
    return subprocess.run([sys.executable, "-m", "bot.cli", *args], cwd=tmp_path, env=env, input=stdin,
                          capture_output=True, text=True, timeout=120)


def test_named_but_not_attached_file_says_how_to_attach(tmp_path):
    p = hugginggpt(["run", "--sandbox", "identify the objects in example.jpg"], tmp_path)
    assert p.returncode == 3 and "Traceback" not in p.stderr
    assert "You mention example.jpg, but no such file is attached: attach it with --file PATH." in p.stderr
    p = hugginggpt(["run", "--sandbox", "identify the objects in example.jpg", "--file", str(MEDIA / "rocket.jpg")], tmp_path)
    assert p.returncode == 0, p.stderr  # any attached image stands for it


def test_the_first_photo_after_new_is_not_invented(tmp_path):
    lines = f"/file {MEDIA / 'chelsea.png'}\ndescribe this photo\n/new\nmake the first photo black and white\n/quit\n"
    p = hugginggpt(["chat", "--sandbox"], tmp_path, stdin=lines)
    assert p.returncode == 0, p.stderr
    assert "There is no photo or image in this conversation yet: attach it with /file PATH" in p.stdout
    assert p.stdout.count("image-to-image") == 0  # nothing was planned on an invented photo


def test_generated_files_may_be_referred_to_in_the_same_request():
    check_mentions("Generate an image of a fox, then describe the image", [], [], "slack")
    try:
        check_mentions("describe the recording", [], [], "slack")
    except InputError as e:
        assert e.user_message == "There is no recording in this conversation yet: upload it with your message in this thread."
    else:
        raise AssertionError("a missing recording was not noticed")
