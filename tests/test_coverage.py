"""Nothing silently dropped (issue 32, :mod:`pipeline.coverage`): every file a user attaches is
used by some task or the answer says which was not and why; "this PDF" binds to the PDF; a video
read through frames says which frames were looked at; a step that could not run is said with its
sentence; an answer says where a result really ran after a fallback; a run in which nothing ran
never exits 0. Each test runs the real program (``python -m hugginggpt run``) as a user would, on
the real photos, video and PDFs, against the sandbox or a scripted controller, and checks what
the user sees: the answer, the exit status, the ``--json`` notes."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from benchmarks.harness.crafted_files import WORDS, text_page_pdf
from sandbox.faulty_controller import FaultyController
from tests.test_hybrid import dead_url

MEDIA = Path(__file__).parent / "fixtures" / "media"


def hugginggpt(tmp_path: Path, *argv: str, env: dict[str, str] | None = None, config: str = "") -> tuple[subprocess.CompletedProcess, dict]:
    """``hugginggpt [--config] run --json ARGV`` in a real process; the process and its document."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_"))}
    base["HUGGINGGPT_STORAGE__DATA_DIR"] = str(tmp_path / "data")
    base.update(env or {})
    cfg = tmp_path / "hugginggpt.toml"
    cfg.write_text(config)
    p = subprocess.run([sys.executable, "-m", "hugginggpt", "--config", str(cfg), "run", "--json", *argv],
                       cwd=tmp_path, env=base, capture_output=True, text=True, timeout=180)
    assert "Traceback" not in p.stderr + p.stdout, p.stderr
    return p, json.loads(p.stdout)


@pytest.fixture
def controller():
    c = FaultyController().start()
    yield c
    c.close()


def scripted(controller: FaultyController) -> dict[str, str]:
    return {"HUGGINGGPT_LLM__BASE_URL": controller.url, "HUGGINGGPT_LLM__API_KEY": "sk-coverage-test-0123456789",
            "HUGGINGGPT_LLM__MAX_RETRIES": "0", "HUGGINGGPT_INFERENCE__BASE_URL": f"http://127.0.0.1:{controller.port}",
            "HUGGINGGPT_INFERENCE__SELECTION": "top", "HUGGINGGPT_PLANNING__MAX_REPLANS": "0"}


def canny(*images: str) -> str:
    """A plan of canny edge maps (computed in-process: no model, so only coverage decides the status)."""
    return json.dumps({"tasks": [{"task": "canny-control", "id": n, "dep": [-1], "args": {"image": i}}
                                 for n, i in enumerate(images)]})




# ---------------------------------------------------------------------------------------------
# 1. every attached file is used, or the answer says which was not and why


def test_a_plan_leaving_a_photo_unused_gets_one_repair_round_and_the_answer_names_the_photo(tmp_path, controller):
    files = ["--file", str(MEDIA / "chelsea.png"), "--file", str(MEDIA / "coffee.png")]
    controller.plans = {"edges of both": [canny("image-1"), canny("image-1")]}  # the repair round changes nothing
    p, doc = hugginggpt(tmp_path, "Draw the edges of both photos", *files, env=scripted(controller))
    # the controller chose not to use it although a task could read it: said, and the run is ok
    assert p.returncode == 0, p.stderr
    assert doc["status"] == "ok" and doc["results"]["0"]["status"] == "ok"
    said = "image-2 (coffee.png) was not used: the plan had no task for it"
    assert said in doc["response"] and any(said in n for n in doc["notes"])
    first, repair = [json.dumps(r["body"]["messages"]) for r in controller.requests if r["stage"] == "task-planning"]
    assert "The plan uses no task for image-2 (coffee.png)" in repair and "The plan uses no task" not in first

    controller.requests.clear()
    controller.plans = {"edges of both photos!": [canny("image-1"), canny("image-1", "image-2")]}  # the repair adds it
    p, doc = hugginggpt(tmp_path, "Draw the edges of both photos!", *files, env=scripted(controller))
    assert p.returncode == 0, p.stderr
    assert doc["status"] == "ok" and [t["args"]["image"] for t in doc["tasks"]] == ["image-1", "image-2"]
    assert "was not used" not in doc["response"]


# ---------------------------------------------------------------------------------------------
# 2. "this PDF" binds to the PDF the user attached


def scan_pdf() -> bytes:
    """A PDF that is only a picture (the cat photo), as a scanner writes it: no text layer."""
    buf = io.BytesIO()
    Image.open(MEDIA / "chelsea.png").convert("RGB").save(buf, "PDF", resolution=72)
    return buf.getvalue()


def test_this_pdf_is_the_attached_pdf_never_the_words(tmp_path, controller):
    report, scan = tmp_path / "report.pdf", tmp_path / "scan.pdf"
    report.write_bytes(text_page_pdf())
    scan.write_bytes(scan_pdf())
    controller.plan = json.dumps({"tasks": [{"task": "summarization", "id": 0, "dep": [-1], "args": {"text": "this PDF"}}]})
    p, doc = hugginggpt(tmp_path, "Summarize this PDF", "--file", str(report), env=scripted(controller))
    assert p.returncode == 0, p.stderr
    assert [t["args"] for t in doc["tasks"]] == [{"text": "text-1"}]
    assert "read 'this PDF' as text-1 (report.txt)" in doc["notes"]
    [summarised] = [json.dumps(r["body"]) for r in controller.requests if r["stage"] == "controller-task"]
    assert WORDS in summarised and "this PDF" not in summarised  # the PDF's words were summarised

    controller.requests.clear()
    p, doc = hugginggpt(tmp_path, "Summarize this PDF", "--file", str(scan), env=scripted(controller))
    assert p.returncode == 5, p.stderr  # the page is an image: never "summarised" as the words 'this PDF'
    assert "which names the user's file, not its text: the file is image-1 (image: scan-page1.png)" in doc["error"]
    assert not [r for r in controller.requests if r["stage"] == "controller-task"]


def test_both_photos_is_one_task_for_each_photo(tmp_path, controller):
    controller.plan = json.dumps({"tasks": [{"task": "canny-control", "id": 0, "dep": [-1], "args": {"image": "both photos"}}]})
    p, doc = hugginggpt(tmp_path, "Draw the edges of both photos", "--file", str(MEDIA / "chelsea.png"),
                        "--file", str(MEDIA / "coffee.png"), env=scripted(controller))
    assert p.returncode == 0, p.stderr
    assert [(t["id"], t["args"]["image"]) for t in doc["tasks"]] == [(0, "image-1"), (1, "image-2")]
    assert "read 'both photos' as image-1, image-2: one task each" in doc["notes"]
    assert len([r for r in controller.requests if r["stage"] == "task-planning"]) == 1  # no repair round needed


# ---------------------------------------------------------------------------------------------
# 3. a video read through frames says which frames were looked at, and offers the others


def test_a_video_read_through_one_frame_says_which_and_offers_the_others(tmp_path, controller):
    controller.plan = canny("image-2")  # the middle one of the video's three frames
    p, doc = hugginggpt(tmp_path, "Draw the edges of what is in this video", "--file", str(MEDIA / "rocket_zoom.mp4"),
                        env=scripted(controller))
    assert p.returncode == 0, p.stderr  # the video is used, through its frame
    said = ("Of video-1 I looked only at image-2 (frame of video-1 at 1.0 s, 320x400 pixels); not at image-1 (frame of "
            "video-1 at 0.4 s, 320x400 pixels), image-3 (frame of video-1 at 1.7 s, 320x400 pixels): ask about image-1 "
            "or image-3 to have them looked at too.")
    assert said in doc["notes"] and said in doc["response"]


# ---------------------------------------------------------------------------------------------
# 4. a step that could not run fails with a sentence, on every front end


def test_an_mcp_server_that_does_not_start_is_said_and_the_run_is_partial(tmp_path, controller):
    # the controller, offered no tool of the server, answers by itself (an empty plan)
    config = f'[mcp.servers.files]\ncommand = "{tmp_path / "no-such-server"}"\nconnect_timeout = 5\n'
    p, doc = hugginggpt(tmp_path, "List the files in my project folder", env=scripted(controller), config=config)
    assert p.returncode == 6, p.stderr
    said = "The MCP server files could not be started or reached, so its tools are not offered."
    assert said in doc["notes"] and "Nothing was run for this request: " + said in doc["response"]
    assert doc["status"] == "partial" and doc["tasks"] == []


def test_a_task_no_backend_serves_in_local_mode_fails_with_a_sentence(tmp_path, controller):
    down = dead_url()
    controller.plan = json.dumps({"tasks": [{"task": "depth-estimation", "id": 0, "dep": [-1], "args": {"image": "image-1"}}]})
    config = f'[inference]\nmode = "local"\nexperts_url = "{down}"\n'
    p, doc = hugginggpt(tmp_path, "Estimate the depth of this photo", "--file", str(MEDIA / "chelsea.png"),
                        env=scripted(controller), config=config)
    assert p.returncode == 6, p.stderr
    assert doc["status"] == "partial" and doc["results"]["0"]["status"] == "failed"
    said = "Task 0 (depth-estimation) failed: No model that can run depth-estimation is available right now"
    assert said in doc["response"] and any(n.startswith(said) for n in doc["notes"])
    assert f"the expert server {down} could not be reached" in doc["results"]["0"]["error"]


# ---------------------------------------------------------------------------------------------
# 5. where a result really ran after a fallback, in the answer's text


def test_the_answer_names_where_a_result_ran_after_the_expert_server_failed(tmp_path):
    from tests.standins.expert_server import ExpertServerStandIn, model

    depth = "Intel/dpt-large"
    with ExpertServerStandIn([model(depth, "depth-estimation")]) as experts:
        experts.failures[depth] = 404  # listed, gone when called: the provider runs it
        config = f'[inference]\nexperts_url = "{experts.url}"\n'
        p, doc = hugginggpt(tmp_path, "--sandbox", "Estimate the depth of this photo", "--file",
                            str(MEDIA / "chelsea.png"), config=config)
    assert p.returncode == 0, p.stderr
    [res] = doc["results"].values()
    assert res["status"] == "ok" and res["where"].startswith("gateway ")
    said = f"Task 0 (depth-estimation): tried {depth} on the expert server {experts.url}, it failed; ran on {res['where']}."
    assert said in doc["response"] and said in doc["notes"]


# ---------------------------------------------------------------------------------------------
# 6. a run in which nothing ran and nothing was answered never exits 0


def test_local_mode_with_the_expert_server_down_never_exits_0(tmp_path, controller):
    # the controller sees only the tasks it serves itself and canny edges: it answers by itself
    down = dead_url()
    config = f'[inference]\nmode = "local"\nexperts_url = "{down}"\n'
    p, doc = hugginggpt(tmp_path, "Describe this photo", "--file", str(MEDIA / "chelsea.png"),
                        env=scripted(controller), config=config)
    assert p.returncode == 6, p.stderr
    said = (f"image-1 (chelsea.png) was not used: the plan had no task for it, even after the controller was asked "
            f"to add one (The expert server {down} could not be reached, so its models are not offered).")
    assert doc["tasks"] == [] and said in doc["response"] and said in doc["notes"]

    p, doc = hugginggpt(tmp_path, "Generate a picture of a lighthouse", env=scripted(controller), config=config)
    assert p.returncode == 6, p.stderr
    said = f"Nothing was run for this request: The expert server {down} could not be reached, so its models are not offered."
    assert doc["tasks"] == [] and said in doc["notes"] and said in doc["response"]
