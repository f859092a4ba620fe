"""``hugginggpt eval taskbench`` as an operator runs it: a real process, a controller that answers
known plans over the chat completions wire format, and metric values computed by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.evaluation.metrics import Counts
from bot.evaluation.taskbench import TOOL_OUTPUT, gold_graph, load_records, tool_types
from tests.standins.faulty_controller import FaultyController

FIXTURES = Path(__file__).parent / "fixtures" / "taskbench"
GOLD = FIXTURES / "gold_huggingface.jsonl"


def _node(task, *arguments):
    return {"task": task, "arguments": list(arguments)}


def _plan(*tasks):
    return json.dumps({"tasks": [{"task": t, "id": i, "dep": d, "args": a} for i, (t, d, a) in enumerate(tasks)]})


# Six TaskBench-format records (data.json as it ships: one JSON record per line) and what the
# stand-in controller plans for each.
RECORDS = [
    # perfect single
    {"id": "1", "type": "single", "user_request": "Transcribe example.wav for me.",
     "tool_nodes": [_node("Automatic Speech Recognition", "example.wav")], "tool_links": []},
    # a node missing from the plan
    {"id": "2", "type": "chain", "user_request": "Classify example.jpg and read the label aloud.",
     "tool_nodes": [_node("Image Classification", "example.jpg"), _node("Text-to-Speech", "<node-0>")],
     "tool_links": [{"source": "Image Classification", "target": "Text-to-Speech"}]},
    # a wrong edge: the plan feeds the transcript to a summary, not to the translation
    {"id": "3", "type": "chain", "user_request": "Transcribe example.wav and translate it to French.",
     "tool_nodes": [_node("Automatic Speech Recognition", "example.wav"), _node("Translation", "<node-0>")],
     "tool_links": [{"source": "Automatic Speech Recognition", "target": "Translation"}]},
    # an extra node (planned after one repair round)
    {"id": "4", "type": "single", "user_request": "Estimate the depth of example.jpg.",
     "tool_nodes": [_node("Depth Estimation", "example.jpg")], "tool_links": []},
    # refused: invalid even after the repair round
    {"id": "5", "type": "single", "user_request": "Translate 'Guten Morgen' into English.",
     "tool_nodes": [_node("Translation", "Guten Morgen")], "tool_links": []},
    # perfect chain
    {"id": "6", "type": "chain", "user_request": "Name what example.png shows, then speak it.",
     "tool_nodes": [_node("Image Classification", "example.png"), _node("Text-to-Speech", "<node-0>")],
     "tool_links": [{"source": "Image Classification", "target": "Text-to-Speech"}]},
]
INVALID = _plan(("teleportation", [-1], {"text": "x"}))
PLANS = {
    "Transcribe example.wav for me.": [_plan(("automatic-speech-recognition", [-1], {"audio": "audio-1"}))],
    "Classify example.jpg": [_plan(("image-classification", [-1], {"image": "image-1"}))],
    "translate it to French": [_plan(
        ("automatic-speech-recognition", [-1], {"audio": "audio-1"}),
        ("summarization", [0], {"text": "<resource>-0"}),
        ("translation", [-1], {"text": "some words", "tgt_lang": "French"}),
    )],
    "depth of example.jpg": [INVALID, _plan(
        ("depth-estimation", [-1], {"image": "image-1"}), ("image-segmentation", [-1], {"image": "image-1"}),
    )],
    "Guten Morgen": [INVALID],
    "Name what example.png shows": [_plan(
        ("image-classification", [-1], {"image": "image-1"}), ("text-to-speech", [0], {"text": "<resource>-0"}),
    )],
}


def test_counts_by_hand():
    c = Counts()
    c.add({"a", "b"}, {"a", "c", "c"})  # sets: tp a, fp c, fn b
    c.add(set(), set())
    c.add({"d"}, set())  # a refused plan: every gold item missed
    assert (c.tp, c.fp, c.fn) == (1, 1, 2)
    assert c.precision == pytest.approx(1 / 2) and c.recall == pytest.approx(1 / 3)
    assert c.f1 == pytest.approx(2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3))
    assert Counts().f1 == 0.0


def test_gold_graph_takes_links_and_argument_kinds_from_node_references():
    g = gold_graph(
        [_node("Image Classification", "example.jpg"), _node("Text-to-Speech", "<node-0>"), _node("Translation", "<node-2>")],
        TOOL_OUTPUT,
    )
    assert g.links == (("Image Classification", "Text-to-Speech"),)  # a self-reference is no link
    assert g.arguments == ("Image Classification-image", "Text-to-Speech-text")


def test_every_gold_sample_record_loads_and_wrong_gold_tools_are_counted(tmp_path):
    tools, outputs = tool_types(GOLD)
    records = load_records(GOLD, tools, outputs)
    assert len(records) == 55 and {r.shape for r in records} == {"single", "chain", "dag"}
    unknown = {n for r in records for n in r.unknown_tools}
    assert "Save File" in unknown and "Translation" not in unknown
    # the fork's renamed keys are read too
    renamed = tmp_path / "data.json"
    renamed.write_text(json.dumps({"id": "x", "user_request": "hi", "task_nodes": [_node("Summarization", "t")], "task_links": []}) + "\n")
    [r] = load_records(renamed, tools, outputs)
    assert r.graph.nodes == ("Summarization",)


def _eval(args, tmp_path, controller: FaultyController | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_TOKEN"))}
    env["HUGGINGGPT_STORAGE__DATA_DIR"] = str(tmp_path / "data")
    if controller is not None:
        env.update({"HUGGINGGPT_LLM__BASE_URL": controller.url, "HUGGINGGPT_LLM__API_KEY": "test-key",
                    "HUGGINGGPT_LLM__MAX_RETRIES": "0"})
    return subprocess.run([sys.executable, "-m", "bot.cli", "eval", "taskbench", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def controller():
    c = FaultyController().start()
    c.plans = {key: list(answers) for key, answers in PLANS.items()}
    yield c
    c.close()


@pytest.mark.slow
def test_eval_command_scores_known_plans_as_computed_by_hand(tmp_path, controller):
    data = tmp_path / "data.json"
    data.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    p = _eval(["--data", str(data), "--out", "report.json", "--concurrency", "3"], tmp_path, controller)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert (tmp_path / "report.json.md").read_text().startswith("| graphs |")
    # nodes: tp 1+1+2+1+0+2 = 7, fp 0+0+1+1+0+0 = 2, fn 0+1+0+0+1+0 = 2
    assert (report["overall"]["node"]["tp"], report["overall"]["node"]["fp"], report["overall"]["node"]["fn"]) == (7, 2, 2)
    assert report["overall"]["node"]["f1"] == round(7 / 9, 4)
    # links: (IC, TTS) found in 6 and missed in 2; (ASR, Translation) missed and (ASR, Summarization) wrong in 3
    link = report["overall"]["link"]
    assert (link["tp"], link["fp"], link["fn"]) == (1, 1, 2) and link["f1"] == round(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3), 4)
    assert report["overall"]["argument"]["f1"] == round(7 / 9, 4)
    single = report["by_shape"]["single"]
    assert single["requests"] == 3 and (single["node"]["tp"], single["node"]["fp"], single["node"]["fn"]) == (2, 1, 1)
    assert report["planning"]["planned_at_once"] == round(4 / 6, 4)
    assert report["planning"]["planned_after_repair"] == round(1 / 6, 4)
    assert report["planning"]["refused"] == round(1 / 6, 4)
    assert report["planning"]["mean_prompt_tokens"] > 0
    rows = {r["id"]: r for r in report["records"]}
    assert rows["5"]["status"] == "refused" and "teleportation" in rows["5"]["problem"]
    assert rows["3"]["predicted"] == ["Automatic Speech Recognition", "Summarization", "Translation"]
    # the table a user reads
    assert "| all | 6 | 0.778 | 0.778 | 0.778 | 0.400 | 0.778 |" in p.stdout
    assert "refused 17%" in p.stdout

    # --resume re-scores from the cache without asking the controller again
    asked = len(controller.requests)
    again = _eval(["--data", str(data), "--resume"], tmp_path, controller)
    assert again.returncode == 0, again.stderr
    assert len(controller.requests) == asked
    assert "| all | 6 | 0.778 | 0.778 | 0.778 | 0.400 | 0.778 |" in again.stdout


@pytest.mark.slow
def test_eval_sandbox_prints_the_floor_on_the_gold_sample(tmp_path):
    p = _eval(["--sandbox", "--data", str(GOLD), "--limit", "20"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert "| all | 20 |" in p.stdout and "| single |" in p.stdout
    assert "Save File" not in p.stdout or "not scored" in p.stdout


@pytest.mark.slow
def test_eval_refuses_bad_input_with_one_sentence(tmp_path, controller):
    not_json = tmp_path / "data.json"
    not_json.write_text('{"id": "1", "user_request": "hi", "tool_nodes": []}\nnot json\n')
    p = _eval(["--data", str(not_json)], tmp_path, controller)
    assert p.returncode == 3 and "Line 2 of" in p.stderr and "Traceback" not in p.stderr
    missing = _eval(["--data", "nowhere.json"], tmp_path, controller)
    assert missing.returncode == 3 and "does not exist" in missing.stderr
    nothing = _eval(["--data", str(GOLD), "--resume"], tmp_path, controller)
    assert nothing.returncode == 3 and "nothing to resume" in nothing.stderr
    limit = _eval(["--data", str(GOLD), "--limit", "0"], tmp_path, controller)
    assert limit.returncode == 2 and "must be 1 or more" in limit.stderr


@pytest.mark.slow
def test_eval_stops_when_the_controller_is_down(tmp_path, controller):
    controller.status = 503
    p = _eval(["--data", str(GOLD), "--limit", "12", "--concurrency", "1"], tmp_path, controller)
    assert p.returncode == 4, p.stderr
    assert "failed with HTTP 503" in p.stderr and "--resume" in p.stderr
    assert "Traceback" not in p.stderr
