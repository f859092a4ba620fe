"""Plans as real controllers write them, end to end: the stand-in controller answers the first plan
with a quirk; what normalisation can read runs without a repair round (the record's notes say
how it was read), what it cannot goes to the repair round with the fact to fix, and the fixed plan
runs. Real openai and huggingface_hub clients over HTTP against the sandbox stand-ins, real media."""

from __future__ import annotations

import json

import pytest

from bot.service import Service
from bot.settings import load_settings
from pipeline.types import Done
from tests.conftest import media_file
from bot.incoming import Message


@pytest.fixture
async def service(sandbox, tmp_path):
    s = await Service.create(load_settings(env={}, overrides=sandbox.overrides(tmp_path / "data")))
    yield s
    await s.close()


async def run(service, text, files):
    events = [e async for e in service.handle(Message(text, list(files)))]
    assert isinstance(events[-1], Done)
    return events[-1].record


def answer(tasks):
    return {"content": json.dumps({"tasks": tasks})}


def planning_requests(sandbox):
    return [r for r in sandbox.controller.requests if r.stage == "task-planning"]


async def test_each_readable_quirk_runs_without_a_repair_round(service, sandbox):
    sandbox.controller.script.append(answer([
        {"task": "Image Classification", "id": 0, "dep": [-1], "args": ["<node-0>"]},
        {"task": "Object Detection", "id": 1, "dep": [-1], "args": {"image_path": "'photos/chelsea.jpg'"}},
        {"task": "Image-to-Text", "id": 2, "dep": [-1], "arguments": [{"name": "image", "value": "<user-input>"}]},
    ]))
    record = await run(service, "What is in this photo? Classify it, find the objects and caption it.",
                       [media_file("chelsea.png")])
    assert record.status == "ok", record.error
    assert [(t.task, t.args) for t in record.tasks] == [
        ("image-classification", {"image": "image-1"}), ("object-detection", {"image": "image-1"}),
        ("image-to-text", {"image": "image-1"})]
    assert all(r.status == "ok" for r in record.results.values())
    assert len(planning_requests(sandbox)) == 1
    notes = record.to_json()["notes"]
    assert "read task 0's own output <node-0> as image-1, the only image of the conversation" in notes
    assert "read task 1's argument 'image_path' as 'image'" in notes
    assert "read \"'photos/chelsea.jpg'\" as image-1 (chelsea.png)" in notes
    assert "read '<user-input>' as image-1 (chelsea.png)" in notes


@pytest.mark.parametrize("quirk", [
    {"image": "<user-input>"},  # which of the two photos?
    ["<node-0>"],  # its own output, with two photos
    {"image": "a photo of a cat"},  # a description, not a file
])
async def test_an_ambiguous_quirk_is_repaired_from_the_files_the_repair_round_names(service, sandbox, quirk):
    sandbox.controller.script += [
        answer([{"task": "image-to-text", "id": 0, "dep": [-1], "args": quirk}]),
        answer([{"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": "image-2"}}]),
    ]
    record = await run(service, "Caption my second photo.", [media_file("chelsea.png"), media_file("coffee.png")])
    assert [(t.task, t.args) for t in record.tasks] == [("image-to-text", {"image": "image-2"})]
    assert record.results[0].status == "ok"
    # the first photo, attached but read by no task, is said (pipeline.coverage); the controller chose
    # so although a task could read it: the run is ok
    said = "image-1 (chelsea.png) was not used: the plan had no task for it, even after the controller was asked to add one."
    assert record.status == "ok" and record.left_out == [] and said in record.notes
    first, repair = planning_requests(sandbox)
    problem = repair.body["messages"][-1]["content"]
    assert "<problem>" in problem and "task 0" in problem.lower()
    assert "the images of this conversation are image-1 (chelsea.png), image-2 (coffee.png)" in problem


async def test_a_plan_still_wrong_after_repair_is_refused_naming_the_first_problem(service, sandbox):
    wrong = answer([{"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": "<user-input>"}}])
    sandbox.controller.script += [wrong, wrong]
    record = await run(service, "Caption my photo.", [media_file("chelsea.png"), media_file("coffee.png")])
    assert record.status == "error" and record.tasks == []
    assert "valid plan" in record.error
    assert "Argument \"image\" of task 0 is '<user-input>', which is not an image of this conversation" in record.error
    assert sandbox.inference.records == []  # nothing ran
