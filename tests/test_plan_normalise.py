"""Plan normalisation (pipeline.plan_normalise): each rule reads one form real controllers write,
only where the reading is unambiguous; a valid plan is left as it is; normalising twice changes
nothing more; what stays ambiguous goes to the repair round with the fact to fix."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.plan_normalise import MAX_REFERENCE_CHARS, normalise_plan
from pipeline.planning import PlanInvalid, read_plan, validate_plan
from pipeline.tasks import TASKS
from pipeline.types import Resource

ALL = set(TASKS)
IMG = Resource("image-1", "image", Path("/m/a.png"), "image/png", 1, name="example.png")
AUD = Resource("audio-1", "audio", Path("/m/b.wav"), "audio/wav", 1, name="example.wav")
DOC = Resource("text-1", "text", Path("/m/c.txt"), "text/plain", 1, name="notes.txt")
IMG2 = Resource("image-2", "image", Path("/m/d.png"), "image/png", 1, name="other.png")
RES = [IMG, AUD, DOC]


def read(records, resources=RES):
    got = read_plan(records, available=ALL, resources=resources)
    return [t.to_json() for t in got.tasks], [(n.rule, n.text) for n in got.notes]


def one(task, args, dep=(-1,)):
    return [{"task": task, "id": 0, "dep": list(dep), "args": args}]


@pytest.mark.parametrize("name, tag", [
    ("Image Classification", "image-classification"), ("Text-to-Speech", "text-to-speech"),
    ("Sentiment Analysis", "text-classification"), ("Text Classification", "text-classification"),
    ("Text-to-Text", "text2text-generation"), ("Text Summarizer", "summarization"), ("Audio-to-Text",
                                                                                     "automatic-speech-recognition"),
])
def test_task_names_of_taskbench_and_near_names_map_to_pipeline_tags(name, tag):
    kind = next(iter(TASKS[tag].required.values()))
    value = {"image": "image-1", "audio": "audio-1", "text": "hello"}[kind]
    tasks, notes = read(one(name, {next(iter(TASKS[tag].required)): value}))
    assert tasks[0]["task"] == tag and notes == [("task-name", f"read task 0's {name!r} as {tag}")]


@pytest.mark.parametrize("value", ["'example.jpg'", '"example.png"', "image/example.jpg", "./example.png",
                                   "images/inputs/example.png", "<file-0>", "<user-input>", '"image"', "example.jpg",
                                   "`example.png`", "[example.png]", "the input image", "IMAGE-1 "])
def test_decorated_file_references_become_the_resource(value):
    tasks, notes = read(one("object-detection", {"image": value}))
    assert tasks[0]["args"] == {"image": "image-1"}
    assert [r for r, _ in notes] == (["file-reference"] if value.strip().lower() != "image-1" else [])


def test_a_file_reference_note_says_what_was_read():
    _, notes = read(one("object-detection", {"image": "'example.jpg'"}))
    assert notes == [("file-reference", "read \"'example.jpg'\" as image-1 (example.png)")]


@pytest.mark.parametrize("value", ["http://169.254.169.254/example.png", "/etc/example.png", "../../example.png",
                                   "~/example.png", "C:\\x\\example.png", "a cat on a mat", "<output_of_Image_Segmentation>",
                                   "<audio>", "example.wav"])
def test_what_is_no_plain_reference_to_this_kind_is_never_rewritten(value):
    before = one("object-detection", {"image": value})
    assert normalise_plan(before, resources=RES).records == before
    with pytest.raises(PlanInvalid):
        read(before)


def test_the_reference_length_bound_keeps_a_long_path_from_being_read_as_a_name():
    near = "d/" * ((MAX_REFERENCE_CHARS - 11) // 2) + "example.png"
    assert len(near) <= MAX_REFERENCE_CHARS and read(one("object-detection", {"image": near}))[0][0]["args"]["image"] == "image-1"
    far = "d/" * (MAX_REFERENCE_CHARS // 2) + "example.png"
    with pytest.raises(PlanInvalid, match="not an image of this conversation"):
        read(one("object-detection", {"image": far}))


def test_same_stem_and_kind_wins_over_the_only_one_and_ambiguity_is_left_for_repair():
    both = [IMG, IMG2, AUD]
    tasks, _ = read(one("object-detection", {"image": "'other.jpg'"}), both)
    assert tasks[0]["args"]["image"] == "image-2"
    with pytest.raises(PlanInvalid) as e:
        read(one("object-detection", {"image": "<user-input>"}), both)
    assert e.value.reason == "unknown-file"
    assert "the images of this conversation are image-1 (example.png), image-2 (other.png)" in e.value.problem


def test_a_text_argument_is_read_as_a_text_file_only_when_it_is_a_decorated_name_of_one():
    tasks, notes = read(one("summarization", {"text": "'notes.txt'"}))
    assert tasks[0]["args"] == {"text": "text-1"} and notes[0][0] == "file-reference"
    for literal in ("notes", "'hello there'", "Summarise notes.txt please", "notes.txt"):
        tasks, notes = read(one("summarization", {"text": literal}))
        assert notes == [] and tasks[0]["args"]["text"] in (literal, "text-1")


def test_a_self_reference_without_dependencies_is_the_only_file_of_its_kind():
    tasks, notes = read(one("image-classification", {"image": "<node-0>"}, dep=[0]))
    assert tasks == [{"task": "image-classification", "id": 0, "dep": [-1], "args": {"image": "image-1"}}]
    assert notes == [("self-reference", "read task 0's own output <node-0> as image-1, the only image of the conversation")]


def test_a_self_reference_that_is_ambiguous_goes_to_repair_with_the_files_named():
    with pytest.raises(PlanInvalid) as e:
        read(one("image-classification", {"image": "<resource>-0"}), [IMG, IMG2])
    assert e.value.reason == "self-reference"
    assert 'Task 0 uses its own output <resource>-0 as "image"' in e.value.problem
    assert "image-1 (example.png), image-2 (other.png)" in e.value.problem
    plan = [{"task": "text-to-image", "id": 0, "dep": [-1], "args": {"text": "a cat"}},
            {"task": "image-classification", "id": 1, "dep": [0], "args": {"image": "<node-1>"}}]
    assert normalise_plan(plan, resources=RES).notes == ()  # it has a dependency: not the user's file


@pytest.mark.parametrize("args, expected", [
    (["example.jpg", "What is in it?"], {"image": "image-1", "text": "What is in it?"}),
    (["What is in it?", "'example.png'"], {"image": "image-1", "text": "What is in it?"}),
    ([{"name": "image", "value": "image-1"}, {"name": "text", "value": "Why?"}], {"image": "image-1", "text": "Why?"}),
])
def test_arguments_by_position_or_as_a_list_map_to_the_task_kinds(args, expected):
    tasks, notes = read(one("visual-question-answering", args))
    assert tasks[0]["args"] == expected and notes[0][0] == "argument-list"


def test_a_question_by_position_is_the_text_of_question_answering():
    tasks, _ = read(one("Question Answering", ["notes.txt", "What is the cause?"]))
    assert tasks[0]["args"] == {"text": "What is the cause?", "context": "text-1"}


def test_a_positional_list_that_does_not_fit_is_refused_with_the_task_arguments():
    with pytest.raises(PlanInvalid) as e:
        read(one("object-detection", ["example.png", "example.wav"]))
    assert e.value.reason == "bad-arguments" and 'it takes "image"' in e.value.problem


@pytest.mark.parametrize("key, value, target", [
    ("image_path", "example.png", "image"), ("input", "example.wav", "audio"), ("audio_file", "audio-1", "audio"),
])
def test_an_argument_under_another_key_moves_to_the_one_argument_of_its_kind(key, value, target):
    task = {"image": "object-detection", "audio": "automatic-speech-recognition"}[target]
    tasks, notes = read(one(task, {key: value}))
    assert list(tasks[0]["args"]) == [target] and ("argument-key", f"read task 0's argument {key!r} as {target!r}") in notes


def test_question_and_passage_keys_of_question_answering():
    tasks, _ = read(one("question-answering", {"question": "Who?", "passage": "Alice ran."}))
    assert tasks[0]["args"] == {"text": "Who?", "context": "Alice ran."}


def test_an_unknown_key_that_fits_two_arguments_is_left_for_repair():
    with pytest.raises(PlanInvalid, match='takes no "language" argument'):
        read(one("translation", {"text": "hello", "language": "German"}))


def test_an_unknown_task_names_the_closest_served_ones():
    with pytest.raises(PlanInvalid) as e:
        read(one("image-clasification", {"image": "image-1"}))
    assert e.value.reason == "unknown-task" and "image-classification" in e.value.problem


def test_an_empty_plan_stays_empty():
    assert read([]) == ([], [])


# ---------------------------------------------------------------------------------------------
# Properties

_KINDS_OF = {k: tuple(n for n, s in TASKS.items() if set(s.required.values()) <= {k, "text"} and not s.optional)
             for k in ("image", "audio", "text")}
_TEXT = st.text(st.sampled_from("abc xyz?.,!'/-_0123456789"), min_size=1, max_size=30).filter(str.strip)


@st.composite
def valid_plans(draw):
    """Plans the validator takes as written: canonical names, ids or file names, placeholders to
    earlier tasks producing the kind, free text."""
    tasks = []
    for i in range(draw(st.integers(0, 5))):
        name = draw(st.sampled_from(sorted(n for ns in _KINDS_OF.values() for n in ns)))
        args = {}
        for key, kind in TASKS[name].required.items():
            makers = [t["id"] for t in tasks if kind in TASKS[t["task"]].outputs]
            options = [st.just(f"<resource>-{m}") for m in makers]
            if kind == "text":
                options.append(_TEXT)
            else:
                res = next(r for r in RES if r.kind == kind)
                options += [st.just(res.id), st.just(res.name), st.just(res.id.upper())]
            args[draw(st.sampled_from([key, key.upper()]))] = draw(st.one_of(options))
        tasks.append({"task": name, "id": i, "dep": [-1], "args": args})
    return tasks


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_plans())
def test_a_plan_that_validated_before_is_left_unchanged(plan):
    before = validate_plan(copy.deepcopy(plan), available=ALL, resources=RES)
    normalised = normalise_plan(plan, resources=RES)
    assert normalised.records == plan and normalised.notes == ()
    assert read_plan(plan, available=ALL, resources=RES).tasks == before


_QUIRKS = [
    lambda v: f"'{v}'", lambda v: f"image/{v}", lambda v: f"<{v}>", lambda v: v.replace(".png", ".jpg"),
    lambda v: "<user-input>", lambda v: f'"{v}"',
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_plans(), st.data())
def test_normalising_twice_changes_nothing_more(plan, data):
    quirky = json.loads(json.dumps(plan))
    for t in quirky:
        if data.draw(st.booleans()):
            t["task"] = t["task"].replace("-", " ").title()
        for key, value in t["args"].items():
            if value in ("example.png", "image-1") and data.draw(st.booleans()):
                t["args"][key] = data.draw(st.sampled_from(_QUIRKS))("example.png")
        if data.draw(st.booleans()):
            t["args"] = list(t["args"].values())
    once = normalise_plan(quirky, resources=RES)
    twice = normalise_plan(once.records, resources=RES)
    assert twice.records == once.records and twice.notes == ()
    assert quirky != plan or once.notes == ()


def test_the_controller_records_are_not_changed_and_deep_nesting_is_refused_as_a_sentence():
    records = [{"task": "Object Detection", "id": 0, "dep": [-1], "args": {"image_path": "'example.png'"}},
               {"task": "summarization", "id": 1, "args": {"text": [[[["x"]]] * 3] * 2}}]
    before = json.loads(json.dumps(records))
    normalise_plan(records, resources=RES)
    assert records == before
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(PlanInvalid, match='Argument "text" of task 0 must be a string'):
        read(one("summarization", {"text": deep}))
