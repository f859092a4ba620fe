"""The reference implementation's endpoints (``/hugginggpt``, ``/tasks``, ``/results``) and the
``hugginggpt serve`` command itself."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import time

import aiohttp
import pytest
from PIL import Image

from benchmarks.harness.http_server import KEY, Served, image_message

AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
async def served(sandbox, tmp_path):
    s = await Served(sandbox, tmp_path / "data", {"api_keys": [KEY]}).start()
    yield s
    await s.close()


async def post(served, path: str, body: dict) -> tuple[int, object]:
    async with aiohttp.ClientSession(headers=AUTH) as http:
        async with http.post(served.url + path, json=body) as r:
            return r.status, await r.json()


async def test_hugginggpt_answers_with_the_message(served):
    status, body = await post(served, "/hugginggpt", {"messages": [
        {"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi, how can I help?"},
        image_message("Detect the objects in this photo", "chelsea.png")], "api_key": "ignored"})
    assert status == 200 and set(body) == {"message"}
    [url] = re.findall(r"\((http://[^)]+/v1/files/[^)]+)\)", body["message"])
    async with aiohttp.ClientSession() as http:
        async with http.get(url) as r:
            assert r.status == 200 and Image.open(io.BytesIO(await r.read())).size == (451, 300)


async def test_tasks_returns_the_plan_in_the_papers_shape(served, sandbox):
    status, body = await post(served, "/tasks", {"messages": [{"role": "user", "content": "Generate an image of a cat on a red sofa"}]})
    assert status == 200 and isinstance(body, list)
    [task] = body
    assert set(task) == {"task", "id", "dep", "args"}
    assert task["task"] == "text-to-image" and task["dep"] == [-1] and "cat" in task["args"]["text"]
    assert not [r for r in sandbox.controller.requests if r.stage == "response-generation"]  # planning only


async def test_results_returns_each_tasks_result_and_model(served):
    status, body = await post(served, "/results", {"messages": [image_message("Detect the objects in this photo", "chelsea.png")]})
    assert status == 200
    [(tid, result)] = body.items()
    assert tid == "0" and set(result) == {"task", "inference result", "choose model result"}
    assert result["task"]["task"] == "object-detection"
    assert set(result["choose model result"]) == {"id", "reason"} and result["choose model result"]["id"]
    assert "/v1/files/" in result["inference result"]["generated image"]


async def test_reference_endpoints_need_the_key(served):
    async with aiohttp.ClientSession() as http:
        for path in ("/hugginggpt", "/tasks", "/results"):
            async with http.post(served.url + path, json={"messages": [{"role": "user", "content": "hi"}]}) as r:
                assert r.status == 401 and (await r.json())["error"]["code"] == "invalid_api_key"


def test_serve_command_answers_and_stops_on_sigterm(tmp_path):
    env = {**os.environ, "HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "hugginggpt", "serve", "--sandbox", "--port", "0"], cwd=tmp_path,
                            env={**env, "PYTHONPATH": os.getcwd()}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        m = re.search(r"(http://127\.0\.0\.1:\d+)/v1", line)
        assert m, line + proc.stderr.read()
        import urllib.request

        with urllib.request.urlopen(m.group(1) + "/healthz", timeout=10) as r:
            assert r.status == 200
        log = (tmp_path / "data" / "logs" / "hugginggpt.log").read_text()
        assert "WITHOUT API keys" in log
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_serve_refuses_a_public_address_without_keys(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hugginggpt", "serve", "--host", "0.0.0.0", "--port", "0"], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": os.getcwd(), "OPENAI_API_KEY": "x", "HF_TOKEN": "x",
                               "HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data")},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "needs API keys" in proc.stderr and "Traceback" not in proc.stderr
