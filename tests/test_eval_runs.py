"""``hugginggpt eval runs``: requests with files through all four stages, and the report a user
reads (passing and success rate, tasks ok, re-plans, LLM calls, latency; JSON and Markdown)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.errors import InputError
from bot.incoming import Message
from hugginggpt.evaluation.runs import RunResult, build_report, load_cases, markdown, run_all
from bot.service import Service
from bot.settings import load_settings
from pipeline.catalog.models import Catalog

MEDIA = Path(__file__).parent / "fixtures" / "media"
RUNS = Path(__file__).parent / "fixtures" / "runs" / "requests.jsonl"


def _write(path: Path, *records: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_requests_name_their_files_by_path_by_renamed_path_or_in_the_text(tmp_path):
    (tmp_path / "cat.png").write_bytes((MEDIA / "chelsea.png").read_bytes())
    (tmp_path / "example.wav").write_bytes(b"RIFF")
    cases = load_cases(_write(tmp_path / "r.jsonl",
                              {"id": "a", "request": "describe it", "files": ["cat.png"]},
                              {"id": "b", "request": "what is in example.jpg?", "files": [{"path": "cat.png", "name": "example.jpg"}]},
                              {"id": "c", "user_request": "Transcribe 'example.wav' please."}))
    assert [(c.id, [(p.name, n) for p, n in c.files]) for c in cases] == [
        ("a", [("cat.png", "cat.png")]), ("b", [("cat.png", "example.jpg")]), ("c", [("example.wav", "example.wav")])]
    with pytest.raises(InputError, match="Line 1 of .* names missing.png, which is not a file"):
        load_cases(_write(tmp_path / "bad.jsonl", {"request": "x", "files": ["missing.png"]}))
    with pytest.raises(InputError, match='Line 2 of .* has no "request" text'):
        load_cases(_write(tmp_path / "bad2.jsonl", {"request": "x", "files": []}, {"id": 3}))
    assert len(load_cases(RUNS)) == 24  # the shipped set: every file it names exists


def test_the_report_counts_by_hand():
    results = [
        RunResult("1", "ok", True, True, tasks=2, tasks_ok=2, llm_calls=3, latency_s=1.0),
        RunResult("2", "partial", True, False, tasks=3, tasks_ok=1, replans=1, llm_calls=5, latency_s=3.0),
        RunResult("3", "ok", True, True, tasks=2, tasks_ok=1, replans=1, llm_calls=4, latency_s=2.0),
        RunResult("4", "refused", False, False, latency_s=0.0, error="That file is not an image | really."),
    ]
    report = build_report(results, {"benchmark": "runs"})
    assert report["passing_rate"] == 0.75 and report["success_rate"] == 0.5
    assert (report["tasks"], report["tasks_ok"], report["replans"], report["runs_replanned"]) == (7, 4, 2, 2)
    assert report["llm_calls"] == {"mean": 3.0, "mean_all_ok": 3.0}  # all-ok without a re-plan: only run 1
    assert report["latency_s"] == {"mean": 1.5, "median": 2.0, "p90": 3.0}
    table = markdown(report)
    assert "| 4 | 75.0% | 50.0% | 4/7 | 2 (2) | 3.00 | 3.00 | 1.50 s | 2.00 s | 3.00 s |" in table
    assert "| 4 | refused | 0/0 | 0 | 0 | 0.00 s | That file is not an image \\| really. |" in table


async def test_a_failing_expert_shows_up_as_a_replan_and_the_task_planned_instead(sandbox, tmp_path):
    sandbox.inference.gone.update(m.id for m in Catalog.load(None).candidates("image-to-text"))
    overrides = sandbox.overrides(tmp_path / "data")
    overrides["inference"].update(max_candidates_tried=2, selection="top")  # no model-selection call
    service = await Service.create(load_settings(env={}, overrides=overrides))
    cases = load_cases(_write(tmp_path / "r.jsonl",
                              {"id": "caption", "request": "Describe this photo", "files": [str(MEDIA / "chelsea.png")]},
                              {"id": "hello", "request": "Hello!"}))
    try:
        results = await run_all(lambda text, files: service.handle(Message(text, files)), cases, concurrency=2)
    finally:
        await service.close()
    caption, hello = results
    # the caption failed on every model; the sandbox's re-plan classifies the photo instead
    assert (caption.status, caption.passed, caption.success, caption.tasks, caption.tasks_ok, caption.replans) == (
        "ok", True, True, 2, 1, 1)
    assert caption.llm_calls == 3  # planning, re-planning, the answer
    assert (hello.status, hello.tasks, hello.replans, hello.llm_calls) == ("ok", 0, 0, 2)


@pytest.mark.slow
def test_eval_runs_writes_json_and_markdown(tmp_path):
    requests = _write(tmp_path / "r.jsonl",
                      {"id": "photo", "request": "What objects are in example.jpg?",
                       "files": [{"path": str(MEDIA / "chelsea.png"), "name": "example.jpg"}]},
                      {"id": "text", "request": "Translate 'good morning' into French."})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_"))}
    env["HUGGINGGPT_STORAGE__DATA_DIR"] = str(tmp_path / "data")
    out = tmp_path / "report.json"
    p = subprocess.run([sys.executable, "-m", "hugginggpt", "eval", "runs", "--sandbox", "--requests", str(requests),
                        "--out", str(out)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    report = json.loads(out.read_text())
    assert report["requests"] == 2 and report["passing_rate"] == 1.0 and report["max_replans"] == 1
    assert [r["id"] for r in report["runs"]] == ["photo", "text"]
    assert all(r["llm_calls"] >= 2 and r["latency_s"] > 0 for r in report["runs"])
    assert report["runs"][0]["tasks"] >= 1 and report["runs"][0]["tasks_ok"] == report["runs"][0]["tasks"]
    assert p.stdout.startswith("| requests | passing rate |") and "| photo | ok |" in p.stdout
    assert (tmp_path / "report.json.md").read_text().strip() == p.stdout.strip()
    assert "[1/2]" in p.stderr and "[2/2]" in p.stderr


def test_the_sandbox_replans_a_neighbouring_task_and_what_was_skipped_reusing_what_finished():
    from sandbox.replanning import replan

    plan = [{"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": "image-1"}},
            {"task": "text-to-speech", "id": 1, "dep": [0], "args": {"text": "<resource>-0"}},
            {"task": "object-detection", "id": 2, "dep": [-1], "args": {"image": "image-1"}},
            {"task": "translation", "id": 3, "dep": [2], "args": {"text": "<resource>-2"}}]
    results = {"0": {"status": "failed"}, "1": {"status": "skipped"}, "2": {"status": "ok"}, "3": {"status": "ok"}}
    served = ["image-classification", "text-to-speech", "object-detection", "translation"]
    assert replan(plan, results, served, 4) == [
        {"task": "image-classification", "id": 4, "dep": [-1], "args": {"image": "image-1"}},
        {"task": "text-to-speech", "id": 5, "dep": [4], "args": {"text": "<resource>-4"}}]
    assert replan(plan, results, ["text-to-speech"], 4) == []  # nothing neighbouring is served: answer
