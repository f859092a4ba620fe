"""``hugginggpt run`` as a person and a script use it: on a terminal the run is drawn live and the
answer rendered (Markdown, images inline where the terminal can); redirected, stdout holds only the
answer and stderr the progress. Limits are said as limits: a request over
``[planning] max_request_chars`` and an image over ``[inference] max_image_pixels`` each end as
one sentence naming the setting, exit status 3. Real subprocesses, the sandbox, real photos."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pexpect
from PIL import Image, ImageChops, ImageStat

from bot.settings import PlanningSettings
from pipeline.planning import MAX_TEXT_ARG
from tests.test_chat_terminal import screen_text

MEDIA = Path(__file__).parent / "fixtures" / "media"
ROOT = Path(__file__).resolve().parent.parent
CAT = "Generate an image of a cat on a red sofa, then tell me what breed it might be"


def _env(tmp_path, extra=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_TOKEN", "KITTY_", "TERM_PROGRAM", "TMUX", "STY"))}
    env.update({"HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(ROOT), "TERM": "xterm-256color"})
    env.update(extra or {})
    return env


def hugginggpt(args, tmp_path, env_extra=None, stdin=None):
    return subprocess.run([sys.executable, "-m", "hugginggpt", *args], cwd=tmp_path, env=_env(tmp_path, env_extra),
                          capture_output=True, text=True, timeout=180, input=stdin)


def test_redirected_run_writes_only_the_answer_to_the_file_and_progress_to_stderr(tmp_path):
    cmd = f"{sys.executable} -m hugginggpt run --sandbox '{CAT}' > answer.md 2> progress.txt"
    p = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=_env(tmp_path), timeout=180)
    assert p.returncode == 0
    answer = (tmp_path / "answer.md").read_text()
    progress = (tmp_path / "progress.txt").read_text()
    assert answer.startswith("*(Sandbox stand-in controller") and "**How I did it**" in answer
    for line in ("Plan: 2 tasks", "running on", "[1] image-classification  image='<resource>-0'"):
        assert line not in answer and line in progress
    assert "Files:" in answer and answer.rstrip().endswith(".jpg")  # the answer's files travel with it
    assert "\x1b[" not in answer  # no colours in a file


def test_run_on_a_terminal_draws_the_tasks_and_renders_the_answer(tmp_path):
    run = pexpect.spawn(sys.executable, ["-m", "hugginggpt", "run", "--sandbox", CAT], cwd=str(tmp_path),
                        env=_env(tmp_path), encoding="utf-8", timeout=120, dimensions=(40, 160))
    run.expect(pexpect.EOF)
    run.close()
    assert run.exitstatus == 0
    shown = screen_text(run.before)
    assert "[0] text-to-image  done by runwayml/stable-diffusion-v1-5" in shown
    assert "How I did it" in shown and "**How I did it**" not in shown  # Markdown, not its markup
    assert "Done in " in shown and "\x1b_G" not in run.before  # a plain xterm gets the path only
    assert ".jpg" in shown


def test_a_kitty_terminal_gets_the_generated_image_inline(tmp_path):
    run = pexpect.spawn(sys.executable, ["-m", "hugginggpt", "run", "--sandbox", "Generate an image of a red boat"],
                        cwd=str(tmp_path), env=_env(tmp_path, {"KITTY_WINDOW_ID": "1", "TERM": "xterm-kitty"}),
                        encoding="utf-8", timeout=120, dimensions=(40, 160))
    run.expect(pexpect.EOF)
    run.close()
    assert run.exitstatus == 0
    out = run.before
    path = re.search(r"image-1 \(image, [^\n]*\): (\S+\.(?:jpg|png))", screen_text(out)).group(1)
    payload = "".join(re.findall(r"\x1b_G[^;]*;([^\x1b]*)\x1b\\", out))
    drawn = Image.open(io.BytesIO(base64.b64decode(payload)))
    expected = Image.open(path).convert("RGB")
    expected.thumbnail((480, 320))  # scaled to fit, the generated image itself
    assert drawn.format == "PNG" and drawn.size == expected.size == (320, 320)
    assert max(ImageStat.Stat(ImageChops.difference(drawn.convert("RGB"), expected)).mean) < 8


def test_a_request_over_the_length_limit_is_one_sentence_exit_3(tmp_path):
    long = ("Please summarise this log line for me and tell me what went wrong. " * 2000)[:125_000]
    p = hugginggpt(["run", "--sandbox", long], tmp_path)
    assert p.returncode == 3, p.stderr
    assert p.stderr.strip() == (
        "Error: Your request is 125,000 characters long, over the limit of 20,000 characters "
        "([planning] max_request_chars); please shorten it or attach the text as a file."
    )
    assert p.stdout == ""
    p = hugginggpt(["run", "--sandbox", "--json", long], tmp_path)
    doc = json.loads(p.stdout)
    assert p.returncode == 3 and doc["exit_status"] == 3 and "[planning] max_request_chars" in doc["error"]
    # the setting lowers the limit; it cannot go past what a planned task's argument may carry
    p = hugginggpt(["run", "--sandbox", long[:4_999] + "."], tmp_path, {"HUGGINGGPT_PLANNING__MAX_REQUEST_CHARS": "1000"})
    assert p.returncode == 3 and "5,000 characters long, over the limit of 1,000 characters" in p.stderr
    p = hugginggpt(["run", "--sandbox", "hello"], tmp_path, {"HUGGINGGPT_PLANNING__MAX_REQUEST_CHARS": "40000"})
    assert p.returncode == 2 and "[planning] max_request_chars from HUGGINGGPT_PLANNING__MAX_REQUEST_CHARS" in p.stderr
    assert PlanningSettings.model_fields["max_request_chars"].metadata[-1].le == MAX_TEXT_ARG
    # the chat says the same sentence and goes on
    p = hugginggpt(["chat", "--sandbox"], tmp_path, stdin=long + "\nhello\n/quit\n")
    assert p.returncode == 0
    assert "Error: Your request is 125,000 characters long" in p.stdout and "Sandbox stand-in" in p.stdout


def test_an_image_over_the_pixel_limit_is_one_sentence_naming_the_setting(tmp_path):
    p = hugginggpt(["run", "--sandbox", "describe this photo", "--file", str(MEDIA / "chelsea.png")], tmp_path,
                   {"HUGGINGGPT_INFERENCE__MAX_IMAGE_PIXELS": "100000"})
    assert p.returncode == 3, p.stderr
    # the progress line said at start (files are checked once the pipeline is loaded), then the one sentence
    assert p.stderr.strip().splitlines() == [
        "Starting: loading the planner and the model clients…",
        "Error: The image chelsea.png has too many pixels (451x300) to process safely; the limit is 0.1 million "
        "pixels ([inference] max_image_pixels).",
    ]
