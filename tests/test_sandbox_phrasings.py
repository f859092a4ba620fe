"""The offline try-out meets other people's wording.

Requests written the way other people write them, with real photos, speech and video attached,
through the real command line (``python -m hugginggpt run --sandbox --json``): the planned task
names and the exit status are what a user sees. What the stand-in cannot plan ends with one
sentence saying it is the offline stand-in and what a real controller model would do, exit
status 5 ("plan"), because the product treats a controller that answers in prose instead of a plan
as a planning failure (the last test, with a real controller client and no sandbox rule).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.backends import build_controller
from bot.settings import Settings
from pipeline.errors import PlanError
from pipeline.llm import Controller, Usage
from pipeline.planning import MAX_SAID, plan_stream
from pipeline.types import Request
from sandbox.controller import ControllerStandIn


def controller_at(base_url: str) -> Controller:
    """The product's controller client, as the settings build it, pointed at a stand-in, no retries."""
    return build_controller(Settings(llm={"base_url": base_url, "api_key": "k", "model": "m", "max_retries": 0}))

ROOT = Path(__file__).resolve().parent.parent
MEDIA = ROOT / "tests" / "fixtures" / "media"
STAND_IN = "The offline stand-in controller (--sandbox)"


def run_sandbox(tmp_path: Path, text: str, *files: str) -> tuple[int, dict]:
    """``hugginggpt run --sandbox --json TEXT --file ...`` in a fresh data directory: exit status
    and the printed record."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_TOKEN"))}
    env.update({"HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(ROOT)})
    args = [sys.executable, "-m", "hugginggpt", "run", "--sandbox", "--json", text]
    for name in files:
        args += ["--file", str(MEDIA / name)]
    p = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, json.loads(p.stdout)


def planned(record: dict) -> list[str]:
    return [t["task"] for t in record["tasks"]]


@pytest.mark.parametrize(
    "text, files, expected",
    [
        # is something in the picture: a question about it (visual question answering)
        ("Any sign of a capuchin monkey in this shot?", ["chelsea.png"], ["visual-question-answering"]),
        ("check if there's a mug on the table", ["coffee.png"], ["visual-question-answering"]),
        ("Does the astronaut hold a flag", ["astronaut.png"], ["visual-question-answering"]),
        ("Can you tell if the mug is full?", ["coffee.png"], ["visual-question-answering"]),  # sent with it
        # how many: object detection boxes and counts them
        ("Give me the number of cups you can find in coffee.png", ["coffee.png"], ["object-detection"]),
        ("count up the cats, please", ["chelsea.png"], ["object-detection"]),
        # removal and other edits: image-to-image with the words as the instruction
        ("Please erase the rocket from this picture", ["rocket.jpg"], ["image-to-image"]),
        ("get rid of the saucer", ["coffee.png"], ["image-to-image"]),
        ("Swap the cat for a tiger", ["chelsea.png"], ["image-to-image"]),
        ("put a party hat on the astronaut", ["astronaut.png"], ["image-to-image"]),
        # what happens in a video: the question to a video VLM (the shipped catalog has one, served
        # by the stand-in), not to one frame; without one, video classification (tests/test_new_tasks.py)
        ("Which sport is the person in the clip doing?", ["rocket_zoom.mp4"], ["video-text-to-text"]),
        ("is the action in this footage a rocket launch or a high jump", ["rocket_zoom.mp4"], ["video-text-to-text"]),
        ("Tell me what is going on in the video", ["rocket_zoom.mp4"], ["video-text-to-text"]),
        ("Is anybody climbing in this video?", ["rocket_zoom.mp4"], ["video-text-to-text"]),
        # several files named in one request: a task each
        ("Write a caption for each of these pictures", ["chelsea.png", "coffee.png"], ["image-to-text", "image-to-text"]),
        ("How many objects are in rocket.jpg and in astronaut.png?", ["rocket.jpg", "astronaut.png"],
         ["object-detection", "object-detection"]),
        ("Transcribe both recordings", ["speech_weather.wav", "speech_cat_request.wav"],
         ["automatic-speech-recognition", "automatic-speech-recognition"]),
        # no file and no model task: the controller writes or answers it itself
        ("Create an HTML page that tells a story about a lighthouse keeper", [], ["text-generation"]),
        ("draft a short thank-you note for my neighbour", [], ["text-generation"]),
        ("Why is the sky blue?", [], ["conversational"]),
    ],
)
def test_other_peoples_wording_gets_the_task(tmp_path, text, files, expected):
    status, record = run_sandbox(tmp_path, text, *files)
    assert planned(record) == expected, record.get("error")
    assert status == 0 and record["status"] == "ok", record.get("error")
    for kind in ("image", "audio"):
        used = [t["args"][kind] for t in record["tasks"] if kind in t["args"]]
        assert len(set(used)) == len(used)  # one task per file, never the same file twice


@pytest.mark.parametrize(
    "text, files",
    [
        ("Splice these two recordings together", ["speech_weather.wav", "speech_cat_request.wav"]),
        ("Make a collage out of these", ["chelsea.png", "coffee.png"]),
        ("Transcribe the recording for me", []),  # no recording in the conversation
    ],
)
def test_what_the_stand_in_cannot_plan_is_declined_with_exit_5(tmp_path, text, files):
    status, record = run_sandbox(tmp_path, text, *files)
    assert status == 5 and record["status"] == "error"
    assert record["tasks"] == [] and record["results"] == {}  # nothing ran
    assert STAND_IN in record["error"] and "a real controller model would plan it" in record["error"]
    assert text in record["error"]


def test_small_talk_is_still_answered_directly(tmp_path):
    status, record = run_sandbox(tmp_path, "Thanks, that was great!", "chelsea.png")
    assert status == 0 and record["status"] == "ok" and record["tasks"] == [] and record["response"]


async def plan_with_prose(said: str) -> tuple[PlanError, ControllerStandIn]:
    """Plan "Book me a flight" with a controller that answers ``said`` (words, no plan) twice: the
    planning error, and the stand-in with the requests it got."""
    async with ControllerStandIn(script=[{"content": said}, {"content": said}]) as ctl:
        controller = controller_at(ctl.base_url)
        try:
            with pytest.raises(PlanError) as caught:
                async for _ in plan_stream(controller, Request("Book me a flight"), {"text-generation"}, Usage()):
                    pass
        finally:
            await controller.aclose()
    return caught.value, ctl


async def test_a_controller_that_answers_in_prose_is_a_planning_failure_quoting_it():
    error, ctl = await plan_with_prose("I'm sorry, but I can't help with   that request.")
    assert len(ctl.requests) == 2  # one repair round, then the failure
    assert "“I'm sorry, but I can't help with that request.”" in error.user_message


async def test_a_long_prose_answer_is_quoted_only_up_to_the_bound():
    said = "I would rather not plan this. " * 400  # 12,000 characters of prose, twice
    error, ctl = await plan_with_prose(said)
    message = error.user_message
    assert message.endswith("…”") and len(message) <= MAX_SAID + 100
    problem = ctl.requests[1].body["messages"][-1]["content"]  # the repair round quotes it cut too
    assert "I would rather not plan this." in problem and len(problem) < len(said)
