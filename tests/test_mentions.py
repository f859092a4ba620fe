"""A request that clearly relies on a file that is not there gets a sentence before any LLM call,
and a request a person can perfectly well make without a file is planned: as a user types it, in a
real process, and over real TaskBench requests with hand-checked verdicts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.mentions import check_mentions, missing_file
from bot.errors import InputError
from pipeline.types import Resource

MEDIA = Path(__file__).parent / "fixtures" / "media"
VERDICTS = Path(__file__).parent / "fixtures" / "taskbench" / "mention_verdicts.jsonl"
SAMPLE = [json.loads(line) for line in VERDICTS.read_text(encoding="utf-8").splitlines()]


def hugginggpt(args, tmp_path, stdin=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_TOKEN"))}
    env["HUGGINGGPT_STORAGE__DATA_DIR"] = str(tmp_path / "data")
    return subprocess.run([sys.executable, "-m", "hugginggpt", *args], cwd=tmp_path, env=env, input=stdin,
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
    check_mentions("describe the recording", [], [], "slack")  # a bare "the": planned, the answer says what is missing
    with pytest.raises(InputError) as e:
        check_mentions("describe this recording", [], [], "slack")
    assert e.value.user_message == "There is no recording in this conversation yet: upload it with your message in this thread."


@pytest.mark.parametrize("record", SAMPLE, ids=[f"{r['domain']}-{r['id'] or n}" for n, r in enumerate(SAMPLE)])
def test_real_requests_without_files_get_their_checked_verdict(record):
    sentence = missing_file(record["request"], [], [], None)
    assert (sentence is not None) == (record["verdict"] == "refuse"), (record["note"], sentence)


def test_the_sample_holds_both_verdicts_and_the_reported_false_refusals():
    verdicts = [r["verdict"] for r in SAMPLE]
    assert verdicts.count("refuse") >= 15 and verdicts.count("plan") >= 40
    assert sum(r["note"].startswith("refused before") for r in SAMPLE) >= 30


def test_a_named_file_is_fine_once_a_file_of_its_kind_is_there():
    photo = Resource(id="image-1", kind="image", path=Path("/x/a.png"), mime="image/png", size=10, name="cat.png")
    assert missing_file("identify the objects in example.jpg", [photo], [], None) is None
    assert missing_file("identify the objects in example.jpg", [], ["image"], None) is None
    assert missing_file("transcribe example.wav", [photo], [], "discord") == (
        "You mention example.wav, but no such file is attached: attach it to your message (or to /ask's file option).")


def test_output_names_and_described_inputs_are_told_apart():
    assert missing_file("Read 'Good morning' aloud and save it as greeting.wav", [], [], None) is None
    assert missing_file("Combine the two tracks into a single audio file called mix.wav", [], [], None) is None
    assert missing_file("I have a meeting recording saved as meeting.wav; transcribe it", [], [], None) is not None
    assert missing_file("Apply reverb to the audio file named 'voice.wav'", [], [], None) is not None
    assert missing_file("Download https://example.com/cat.jpg and describe the photo", [], [], None) is None


def test_a_request_that_produces_the_file_is_planned_in_a_real_process(tmp_path):
    text = ("Please convert this text to speech: 'Welcome to our weekly team meeting.' "
            "and save the generated audio as 'example.wav'.")
    p = hugginggpt(["run", "--sandbox", "--json", text], tmp_path)
    assert p.returncode == 0, p.stderr
    record = json.loads(p.stdout)
    assert [t["task"] for t in record["tasks"]] == ["text-to-speech"]
    assert [r["status"] for r in record["results"].values()] == ["ok"] and len(record["files"]) == 1, record


def test_a_video_brings_its_sound_and_frames():
    video = Resource(id="video-1", kind="video", path=Path("/x/a.mp4"), mime="video/mp4", size=10, name="talk.mp4")
    assert missing_file("transcribe this recording", [video], [], None) is None
    assert missing_file("caption this photo", [], ["video"], None) is None
    assert missing_file("transcribe this recording", [], [], None) == (
        "There is no recording in this conversation yet: attach it with --file PATH.")
