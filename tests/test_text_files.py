"""Text files (.txt, .md, .csv, .json) as text resources: accepted when they are text, refused with
one sentence when they are not, passed whole to the text arguments of a plan (issue 15)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.errors import InputError
from bot.mentions import check_mentions
from bot.uploads import inspect_upload
from tests.conftest import upload_limits
from pipeline.execution import resolve_args
from pipeline.planning import PlanInvalid, validate_plan
from pipeline.tasks import TASKS
from pipeline.types import Resource, Task

TEXT = Path(__file__).parent / "fixtures" / "text"
ALICE = (TEXT / "alice.txt").read_text(encoding="utf-8")


def hugginggpt(args, tmp_path, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_"))}
    env["HUGGINGGPT_STORAGE__DATA_DIR"] = str(tmp_path / "data")
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "hugginggpt", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.slow
def test_a_text_file_is_summarised_from_its_content(tmp_path):
    p = hugginggpt(["run", "--sandbox", "--json", "Summarize this document", "--file", str(TEXT / "alice.txt")], tmp_path)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["tasks"] == [{"task": "summarization", "id": 0, "dep": [-1], "args": {"text": "text-1"}}]
    # the stand-in summarises what it was sent: the file's words, not the request's
    assert "Alice was beginning to get very tired" in doc["results"]["0"]["output"]["text"]


@pytest.mark.slow
def test_text_file_refusals_are_one_sentence(tmp_path):
    binary = tmp_path / "notes.txt"
    binary.write_bytes(bytes(range(256)) * 8)
    latin = tmp_path / "café.txt"
    latin.write_bytes("Le café est prêt.".encode("latin-1"))
    big = tmp_path / "big.md"
    big.write_text("word " * 1000)
    for path, needle in ((binary, "is a binary file, not text"), (latin, "is not UTF-8 text"),
                         (big, "more than the limit of 2 KiB for text files")):
        p = hugginggpt(["run", "--sandbox", "summarize it", "--file", str(path)], tmp_path,
                       {"HUGGINGGPT_STORAGE__MAX_TEXT_FILE_BYTES": "2048"})
        assert p.returncode == 3, (path, p.stderr)
        assert needle in p.stderr and "Traceback" not in p.stderr


async def test_what_counts_as_a_text_file():
    async def inspect(data, name, mime=None):
        return await inspect_upload(data, name, mime, max_bytes=10_000_000, **upload_limits())

    info = await inspect((TEXT / "planets.csv").read_bytes(), "planets.csv", "text/csv")
    assert (info.kind, info.mime) == ("text", "text/csv") and "7 lines" in info.description
    utf16 = await inspect("Grüße aus Köln".encode("utf-16"), "gruss.txt")  # its BOM looks like an MP3 frame
    assert utf16.kind == "text" and utf16.characters == len("Grüße aus Köln")
    assert (await inspect(b'{"a": [1, 2]}', "d.json")).mime == "application/json"
    assert (await inspect(b'{"a": [1, 2', "d.json")).mime == "text/plain"  # not JSON, still text
    with pytest.raises(InputError) as html:
        await inspect(b"<!doctype html><html><body>hi</body></html>", "page.txt")
    assert "is an HTML page" in html.value.user_message
    with pytest.raises(InputError) as mislabelled:
        await inspect(b"just words", "photo.png")
    assert "labelled as image" in mislabelled.value.user_message


DOC = Resource("text-1", "text", TEXT / "alice.txt", "text/plain", len(ALICE.encode()), name="alice.txt")
IMG = Resource("image-1", "image", Path("/data/a.png"), "image/png", 10, name="a.png")


def test_plans_pass_a_text_file_by_id_or_name_into_text_arguments_only():
    raw = [
        {"task": "summarization", "id": 0, "dep": [-1], "args": {"text": "alice.txt"}},
        {"task": "question-answering", "id": 1, "dep": [-1], "args": {"text": "Who ran by?", "context": "text-1"}},
    ]
    tasks = validate_plan(raw, available=set(TASKS), resources=[DOC, IMG])
    assert tasks[0].args == {"text": "text-1"} and tasks[1].args["context"] == "text-1"
    with pytest.raises(PlanInvalid, match="text-1, which is text, not image"):
        validate_plan([{"task": "image-classification", "id": 0, "dep": [-1], "args": {"image": "text-1"}}],
                      available=set(TASKS), resources=[DOC, IMG])
    # words that merely contain the id stay words
    [t] = validate_plan([{"task": "summarization", "id": 0, "dep": [-1], "args": {"text": "see text-1 please"}}],
                        available=set(TASKS), resources=[DOC])
    assert t.args["text"] == "see text-1 please"


async def test_a_text_argument_naming_a_text_file_gets_its_content():
    task = Task(0, "question-answering", (), {"text": "Who ran by?", "context": "text-1"})
    args = await resolve_args(task, {}, {"text-1": DOC})
    assert args == {"text": "Who ran by?", "context": ALICE}


async def test_a_long_text_file_is_read_up_to_the_text_limit_and_says_so(tmp_path):
    long = tmp_path / "long.txt"
    long.write_text("word " * 10_000)  # 50,000 characters
    info = await inspect_upload(long.read_bytes(), "long.txt", None, max_bytes=10_000_000, **upload_limits())
    assert "50,000 characters" in info.description and "tasks read its first 20,000 characters" in info.description
    doc = Resource("text-1", "text", long, "text/plain", long.stat().st_size, name="long.txt")
    args = await resolve_args(Task(0, "summarization", (), {"text": "text-1"}), {}, {"text-1": doc})
    assert args["text"] == ("word " * 4000)[:20_000]


def test_a_named_or_referred_text_file_that_is_not_there_is_said():
    with pytest.raises(InputError, match="You mention example.txt, but no such file is attached"):
        check_mentions("Summarize the text in example.txt", [], [], None)
    with pytest.raises(InputError, match="no document or text file in this conversation"):
        check_mentions("translate this document into German", [], [], "discord")
    check_mentions("translate the document into German", [], [], "discord")  # a bare "the": planned
    check_mentions("Summarize the text in example.txt", [], ["text"], None)  # attached with the message


def test_this_document_binds_to_an_attached_image_when_no_text_file_is_there():
    scanned = "I have this document which was scanned and saved as an image 'example.jpg'. What is its title?"
    check_mentions(scanned, [], ["image"], None)  # the scanned page is the document: planned
    with pytest.raises(InputError, match="no document or text file in this conversation"):
        check_mentions(scanned.replace("an image 'example.jpg'", "a recording"), [], ["audio"], None)


async def test_a_text_file_is_read_off_the_event_loop(tmp_path):
    """A text file on a slow disk (here a pipe whose writer waits 1 s) does not stall the event loop,
    so every other conversation goes on while it is read."""
    import asyncio
    import threading
    import time

    slow = tmp_path / "slow.txt"
    os.mkfifo(slow)
    doc = Resource("text-1", "text", slow, "text/plain", 5, name="slow.txt")

    def writer() -> None:
        time.sleep(1.0)
        with open(slow, "w", encoding="utf-8") as f:
            f.write("hello")

    thread = threading.Thread(target=writer)
    thread.start()
    reading = asyncio.create_task(resolve_args(Task(0, "summarization", (), {"text": "text-1"}), {}, {"text-1": doc}))
    began = time.perf_counter()
    await asyncio.sleep(0.05)  # the loop's other work, while the file is read
    woke = time.perf_counter() - began
    args = await reading
    thread.join()
    assert args == {"text": "hello"}
    assert woke < 0.5  # read on the loop, this timer would wait for the whole read (1 s)
