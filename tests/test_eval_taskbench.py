"""``hugginggpt eval taskbench`` as an operator runs it: a real process, a controller that answers
known plans over the chat completions wire format, and metric values computed by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hugginggpt.evaluation.taskbench import load_records
from hugginggpt.evaluation.toollist import builtin
from sandbox.faulty_controller import FaultyController

FIXTURES = Path(__file__).parent / "fixtures" / "taskbench"
GOLD = FIXTURES / "gold_huggingface.jsonl"
GOLD_MULTIMEDIA = FIXTURES / "gold_multimedia.jsonl"


def _node(task, *arguments):
    return {"task": task, "arguments": list(arguments)}


def _plan(*tasks):
    return json.dumps({"tasks": [{"task": t, "id": i, "dep": d, "args": a} for i, (t, d, a) in enumerate(tasks)]})


# Six TaskBench-format records (data.json as it ships: one JSON record per line) and what the
# stand-in controller plans for each.
RECORDS = [
    # perfect single
    {"id": "1", "type": "single", "user_request": "Transcribe example.wav for me.",
     "tool_nodes": [_node("Automatic Speech Recognition", "example.wav")], "tool_links": [],
     "tool_steps": ["Step 1: Use Automatic Speech Recognition on example.wav"]},
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


def test_every_gold_sample_record_loads_and_wrong_gold_tools_are_counted(tmp_path):
    tools = builtin("huggingface")
    records = load_records(GOLD, tools)
    assert len(records) == 55 and {r.shape for r in records} == {"single", "chain", "dag"}
    unknown = {n for r in records for n in r.unknown_tools}
    assert "Save File" in unknown and "Translation" not in unknown
    # the fork's renamed keys are read too
    renamed = tmp_path / "data.json"
    renamed.write_text(json.dumps({"id": "x", "user_request": "hi", "task_nodes": [_node("Summarization", "t")], "task_links": []}) + "\n")
    [r] = load_records(renamed, tools)
    assert r.graph.nodes == ("Summarization",)


def _eval(args, tmp_path, controller: FaultyController | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_TOKEN"))}
    env["HUGGINGGPT_STORAGE__DATA_DIR"] = str(tmp_path / "data")
    if controller is not None:
        env.update({"HUGGINGGPT_LLM__BASE_URL": controller.url, "HUGGINGGPT_LLM__API_KEY": "test-key",
                    "HUGGINGGPT_LLM__MAX_RETRIES": "0"})
    return subprocess.run([sys.executable, "-m", "hugginggpt", "eval", "taskbench", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def controller():
    c = FaultyController().start()
    c.plans = {key: list(answers) for key, answers in PLANS.items()}
    yield c
    c.close()


# node P, R, n-F1, macro F1, t-F1, v-F1, e-F1, NED, ROUGE-1/2/L
ALL_ROW = "| all | 6 | 77.78 | 77.78 | 77.78 | 18.84 | 77.78 | 66.67 | 40.00 | 0.3111 | 71.43 | 50.00 | 71.43 |"


@pytest.mark.slow
def test_eval_command_scores_known_plans_as_computed_by_hand(tmp_path, controller):
    data = tmp_path / "data.json"
    data.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    p = _eval(["--data", str(data), "--out", "report.json", "--concurrency", "3"], tmp_path, controller)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert (tmp_path / "report.json.md").read_text().startswith("Tool list: huggingface (the default), 23 tools (built-in)")
    assert report["tools"] == {"name": "huggingface", "source": "built-in", "size": 23, "default": True,
                               "gold_nodes": 1 + 2 + 2 + 1 + 1 + 2, "gold_nodes_outside": 0}
    overall = report["overall"]
    # nodes: tp 1+1+2+1+0+2 = 7, fp 0+0+1+1+0+0 = 2, fn 0+1+0+0+1+0 = 2
    assert (overall["node"]["tp"], overall["node"]["fp"], overall["node"]["fn"]) == (7, 2, 2)
    assert overall["node"]["f1"] == round(7 / 9, 4)
    # macro over all 23 tools: ASR tp2 (F1 1), IC tp2 (1), TTS tp1 fn1 (P1 R1/2 F2/3), Translation
    # tp1 fn1 (2/3), Depth tp1 (1), Summarization fp1 (0), Segmentation fp1 (0), 16 unseen (0)
    assert overall["node_macro"] == {"precision": round(5 / 23, 4), "recall": round(4 / 23, 4),
                                     "f1": round(13 / 3 / 23, 4), "tools": 23}
    # links: (IC, TTS) found in 6 and missed in 2; (ASR, Translation) missed and (ASR, Summarization) wrong in 3
    link = overall["link"]
    assert (link["tp"], link["fp"], link["fn"]) == (1, 1, 2) and link["f1"] == round(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3), 4)
    # t-F1 ("tool-argument name"): 1 tp1; 2 tp1 fn1 (TTS-text); 3 tp2 fp1 (Summarization-text);
    # 4 tp1 fp1 (Segmentation-image); 5 fn1; 6 tp2 -> 7, 2, 2
    names = overall["argument_name"]
    assert (names["tp"], names["fp"], names["fn"]) == (7, 2, 2) and names["f1"] == round(7 / 9, 4)
    # v-F1 ("tool-name-value", image-1 -> example.jpg, <resource>-0 -> the source tool's name):
    # 1 tp1; 2 tp1 fn1; 3 tp1 (ASR-audio-example.wav) fp2 (Summarization-text-ASR, Translation-text-some
    # words) fn1 (Translation-text-ASR); 4 tp1 fp1; 5 fn1; 6 tp2 -> 6, 3, 3
    values = overall["argument_value"]
    assert (values["tp"], values["fp"], values["fn"]) == (6, 3, 3) and values["f1"] == round(6 / 9, 4)
    # edit distance: ratios 1, 2/3 ([IC, TTS] vs [IC]), 4/5 (one insertion in 2 + 3), 2/3, 0 (refused), 1
    assert overall["edit_distance"] == round(1 - (1 + 2 / 3 + 4 / 5 + 2 / 3 + 0 + 1) / 6, 4)
    # ROUGE only on record 1, the one with steps: "automatic speech recognition example wav" in "step 1
    # use automatic speech recognition on example wav": ROUGE-1 F 10/14, ROUGE-2 3 of 4 and 8 bigrams: 6/12
    assert overall["step_requests"] == 1
    assert overall["rouge"] == {"rouge1": round(10 / 14, 4), "rouge2": 0.5, "rougeL": round(10 / 14, 4)}
    single = report["by_shape"]["single"]
    assert single["requests"] == 3 and (single["node"]["tp"], single["node"]["fp"], single["node"]["fn"]) == (2, 1, 1)
    assert report["by_shape"]["chain"]["rouge"] is None
    assert report["published"]["node_f1"] == 0.8154 and report["published"]["link_f1"] == 0.547
    assert report["planning"]["planned_at_once"] == round(4 / 6, 4)
    assert report["planning"]["planned_after_repair"] == round(1 / 6, 4)
    assert report["planning"]["refused"] == round(1 / 6, 4)
    assert report["planning"]["mean_prompt_tokens"] > 0
    rows = {r["id"]: r for r in report["records"]}
    assert rows["5"]["status"] == "refused" and "teleportation" in rows["5"]["problem"]
    assert rows["3"]["predicted"] == ["Automatic Speech Recognition", "Summarization", "Translation"]
    # the table a user reads, in % as TaskBench prints them, the published GPT-4 figures beside ours
    assert ALL_ROW in p.stdout
    assert "| gpt-4 (published) |  |  |  | 81.54 |  | 77.31 | 60.86 | 54.70 |  | 52.42 | 30.38 |  |" in p.stdout
    assert "refused 17%" in p.stdout

    # --resume re-scores from the cache without asking the controller again
    asked = len(controller.requests)
    again = _eval(["--data", str(data), "--resume"], tmp_path, controller)
    assert again.returncode == 0, again.stderr
    assert len(controller.requests) == asked
    assert ALL_ROW in again.stdout


@pytest.mark.slow
def test_eval_sandbox_prints_the_floor_on_the_gold_sample(tmp_path):
    p = _eval(["--sandbox", "--data", str(GOLD), "--limit", "20"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert "| all | 20 |" in p.stdout and "| single |" in p.stdout
    assert "Save File" not in p.stdout or "not scored" in p.stdout
    assert "ROUGE: n/a" in p.stdout  # the gold sample has no steps


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


@pytest.mark.slow
def test_tools_choices_through_the_command(tmp_path):
    # the multimedia gold records scored against the default list: most nodes are outside it
    default = _eval(["--sandbox", "--data", str(GOLD_MULTIMEDIA), "--limit", "6", "--out", "mm.json"], tmp_path)
    assert default.returncode == 0, default.stderr
    assert "Did you mean --tools multimedia?" in default.stderr
    assert json.loads((tmp_path / "mm.json").read_text())["tools"]["name"] == "huggingface"
    # ...and against the list they belong to: no warning, the report says which list, and the
    # leaderboard's multimedia figures
    chosen = _eval(["--sandbox", "--data", str(GOLD_MULTIMEDIA), "--limit", "6", "--tools", "multimedia",
                    "--out", "mm.json"], tmp_path)
    assert chosen.returncode == 0, chosen.stderr
    assert "Did you mean" not in chosen.stderr
    report = json.loads((tmp_path / "mm.json").read_text())
    assert report["tools"] == {"name": "multimedia", "source": "built-in", "size": 40, "default": False,
                               "gold_nodes": 6, "gold_nodes_outside": 0}
    assert report["published"]["node_f1"] == 0.909 and report["overall"]["node_macro"]["tools"] == 40
    assert chosen.stdout.startswith("Tool list: multimedia, 40 tools (built-in); 0 of 6 gold nodes are outside it.")
    assert "| gpt-4 (published) |  |  |  | 90.90 |  | 87.06 | 72.31 | 69.27 |" in chosen.stdout
    # a tool_desc.json file: a copy of the Hugging Face list gets the published figures too
    copy = tmp_path / "tool_desc.json"
    copy.write_text((FIXTURES / "huggingface_tool_desc.json").read_text())
    as_file = _eval(["--sandbox", "--data", str(GOLD), "--limit", "3", "--tools", str(copy)], tmp_path)
    assert as_file.returncode == 0, as_file.stderr
    assert f"Tool list: {copy}, 23 tools (file)" in as_file.stdout and "| gpt-4 (published) |  |  |  | 81.54 |" in as_file.stdout
    # a list of our own: no published figures to compare with
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({"nodes": [{"id": "Translation", "output-type": ["text"]}]}))
    own = _eval(["--sandbox", "--data", str(GOLD), "--limit", "3", "--tools", str(mine), "--out", "own.json"], tmp_path)
    assert own.returncode == 0, own.stderr
    assert json.loads((tmp_path / "own.json").read_text())["published"] is None and "(published)" not in own.stdout


@pytest.mark.slow
def test_bad_tools_values_are_one_sentence(tmp_path):
    typo = _eval(["--sandbox", "--data", str(GOLD), "--tools", "hugingface"], tmp_path)
    assert typo.returncode == 2 and "'hugingface' is neither huggingface nor multimedia" in typo.stderr
    missing = _eval(["--sandbox", "--data", str(GOLD), "--tools", "nowhere/tool_desc.json"], tmp_path)
    assert missing.returncode == 3 and "The tool list nowhere/tool_desc.json does not exist" in missing.stderr
    wrong = tmp_path / "tools.json"
    wrong.write_text(json.dumps([{"id": "Translation"}]))
    bad = _eval(["--sandbox", "--data", str(GOLD), "--tools", str(wrong)], tmp_path)
    assert bad.returncode == 3 and "is not TaskBench's tool_desc.json" in bad.stderr
    for p in (typo, missing, bad):  # the sentence is the last line (after argparse's usage for the typo)
        assert "Traceback" not in p.stderr and "tool" in p.stderr.strip().splitlines()[-1]
    assert len(missing.stderr.strip().splitlines()) == len(bad.stderr.strip().splitlines()) == 1
