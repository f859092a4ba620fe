"""``hugginggpt eval plans FILE [--json]``: recorded plans through normalisation and validation,
nothing run; counted as accepted as is, normalised (by rule), sent to repair (and repaired), refused
(by reason). The fixture holds hand-written plans with the quirks real controllers write."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.errors import InputError
from hugginggpt.evaluation.plans import evaluate, load_plans
from pipeline.tasks import TASKS

PLANS = Path(__file__).parent / "fixtures" / "plans" / "quirky_plans.jsonl"


def cli(tmp_path, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_"))}
    env["HUGGINGGPT_STORAGE__DATA_DIR"] = str(tmp_path / "data")
    return subprocess.run([sys.executable, "-m", "hugginggpt", "eval", "plans", *map(str, args)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def test_eval_plans_json_counts_every_plan_and_refuses_only_what_cannot_be_known(tmp_path):
    p = cli(tmp_path, PLANS, "--json")
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    lines = [json.loads(x) for x in PLANS.read_text().splitlines() if x.strip()]
    assert report["total"] == len(lines) >= 50
    assert report["accepted_as_is"] + report["normalised"] + report["repaired"] + report["refused"] == report["total"]
    assert report["to_repair"] == report["repaired"] + sum(1 for v in report["plans"] if v["outcome"] == "refused"
                                                           and v["to_repair"])
    outcome = {v["id"]: v for v in report["plans"]}
    refused = sorted(i for i, v in outcome.items() if v["outcome"] == "refused")
    assert refused == sorted(x["id"] for x in lines if x["id"].startswith("ref-"))
    assert set(report["refused_reasons"]) <= {"unknown-task", "unknown-file", "not-a-plan"}
    assert all(outcome[x["id"]]["outcome"] == "repaired" for x in lines if x["id"].startswith("rep-"))
    for rule in ("task-name", "argument-list", "argument-key", "self-reference", "file-reference"):
        assert report["rules"][rule] >= 5
    assert outcome["as-4"]["outcome"] == "as_is"  # the empty plan: answered directly
    assert "read task 0's own output <node-0> as image-1, the only image of the conversation" in outcome["self-1"]["notes"]
    assert "read \"'example.jpg'\" as image-1 (example.jpg)" in outcome["file-1"]["notes"]
    assert "read 'example.jpg' as image-1 (example.png)" in outcome["file-6"]["notes"]


def test_eval_plans_prints_the_counts_for_a_terminal(tmp_path):
    p = cli(tmp_path, PLANS)
    assert p.returncode == 0, p.stderr
    for label in ("accepted as is:", "accepted after normalisation:", "sent to repair:", "repaired:", "refused:"):
        assert label in p.stdout
    assert "self-reference" in p.stdout and "unknown-task" in p.stdout


@pytest.mark.parametrize("content, sentence", [
    ("not json\n", "Line 1 is not JSON"),
    ('{"id": 1}\n', "Line 1 is not a recorded plan"),
    ("\n\n", "holds no recorded plans"),
])
def test_a_file_that_is_not_recorded_plans_is_one_sentence(tmp_path, content, sentence):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    p = cli(tmp_path, bad)
    assert p.returncode == 3 and sentence in p.stderr and "Traceback" not in p.stderr
    p = cli(tmp_path, tmp_path / "missing.jsonl")
    assert p.returncode == 3 and "does not exist" in p.stderr and "Traceback" not in p.stderr


def test_the_attached_files_are_the_named_ones_or_those_the_line_lists():
    [named, listed] = load_plans(
        json.dumps({"id": "a", "user_request": "Caption example.jpg and other.jpg", "result": {"task_nodes": []}}) + "\n"
        + json.dumps({"id": "b", "user_request": "Caption example.jpg", "files": ["example.png"],
                      "result": {"task_nodes": [{"task": "Image-to-Text", "arguments": ["example.jpg"]}]}}))
    assert [(r.id, r.name) for r in named.resources] == [("image-1", "example.jpg"), ("image-2", "other.jpg")]
    assert [(r.id, r.name) for r in listed.resources] == [("image-1", "example.png")]
    assert evaluate(listed, frozenset(TASKS)).outcome == "normalised"


def test_a_plan_sent_to_repair_without_a_recorded_answer_is_refused_with_its_reason():
    [case] = load_plans(json.dumps({"id": "x", "user_request": "Caption example.jpg and other.jpg",
                                    "result": {"task_nodes": [{"task": "Image-to-Text", "arguments": ["<user-input>"]}]}}))
    verdict = evaluate(case, frozenset(TASKS))
    assert (verdict.outcome, verdict.first, verdict.reason) == ("refused", "unknown-file", "unknown-file")
    assert "image-1 (example.jpg), image-2 (other.jpg)" in verdict.problem
    with pytest.raises(InputError):
        load_plans("[1, 2]\n")
