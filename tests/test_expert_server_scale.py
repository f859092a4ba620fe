"""The expert server past one process: two plain servers behind a real nginx (they are stateless:
any of them answers any model), and the same app on a local Ray Serve instance with one deployment
per model."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

import httpx2
import pytest

pytest.importorskip("torch")

from huggingface_hub import AsyncInferenceClient  # noqa: E402

from benchmarks.harness import tinymodels  # noqa: E402
from benchmarks.harness.realparts import Missing, NginxServer, free_port  # noqa: E402
from tests.test_expert_server import MEDIA, Server  # noqa: E402

REPOS = {"tiny/vit-classifier": (tinymodels.vit, "image-classification"),
         "tiny/bert-sentiment": (tinymodels.bert("BertForSequenceClassification"), None)}


@pytest.fixture(scope="module")
def small_cache(tmp_path_factory):
    cache = tmp_path_factory.mktemp("hf-cache-small")
    tinymodels.build_cache(cache, REPOS)
    return cache


def _nginx(root, upstreams):
    try:
        return NginxServer(root, upstreams).start()
    except Missing as e:
        if os.environ.get("HUGGINGGPT_REQUIRE_REAL_PARTS"):
            raise
        pytest.skip(str(e))


@pytest.mark.slow
async def test_two_servers_behind_nginx_answer_every_request(small_cache, tmp_path):
    servers = [Server(small_cache, "", tmp_path / f"server{i}.log", wait=False) for i in range(2)]
    for s in servers:  # both start at once
        s.wait_ready()
    # nginx's worker (user nobody) buffers request bodies under its root: a directory it can enter
    root = Path(tempfile.mkdtemp(prefix="experts-nginx-"))
    lb = _nginx(root, [f"127.0.0.1:{s.port}" for s in servers])
    try:
        async with AsyncInferenceClient(timeout=60) as client:
            for _ in range(6):
                out = await client.image_classification(MEDIA / "chelsea.png", model=f"{lb.url}/models/tiny/vit-classifier")
                assert out and out[0].label in ("cat", "dog", "rocket", "coffee")
            loads = [s.models()["tiny/vit-classifier"]["loads"] for s in servers]
            assert loads == [1, 1]  # round robin: both served, each loaded the model once
            servers[0].stop()  # one replica goes away: nginx skips it
            for _ in range(3):
                out = await client.text_classification("the cat is happy", model=f"{lb.url}/models/tiny/bert-sentiment")
                assert {x.label for x in out} == {"negative", "positive"}
    finally:
        lb.stop()
        shutil.rmtree(root, ignore_errors=True)
        for s in servers:
            s.stop()


@pytest.mark.ray
def test_ray_serve_one_deployment_per_model(small_cache, tmp_path):
    ray = pytest.importorskip("ray")
    from ray import serve

    from expert_server.config import ServerConfig
    from expert_server.ray_serve import build_app

    port = free_port()
    env = {"HF_HUB_CACHE": str(small_cache), "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    ray.init(num_cpus=4, include_dashboard=False, runtime_env={"env_vars": env}, logging_level="ERROR",
             configure_logging=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        app = build_app(ServerConfig(device="cpu", memory_budget=100_000_000, api_key="ray-key-123456"),
                        {"tiny/vit-classifier": {"num_replicas": 1, "ray_actor_options": {"num_cpus": 0.5}}})
        serve.run(app, route_prefix="/")
        url = f"http://127.0.0.1:{port}"
        key = {"Authorization": "Bearer ray-key-123456"}
        assert httpx2.get(f"{url}/models", timeout=60).status_code == 401  # the ingress checks as a plain server does
        assert httpx2.get(f"{url}/models", headers={**key, "Host": "evil.example"}, timeout=60).status_code == 421
        assert httpx2.get(f"{url}/healthz", timeout=60).status_code == 200
        listed = {m["id"]: m for m in httpx2.get(f"{url}/models", headers=key, timeout=60).json()["models"]}
        assert listed["tiny/vit-classifier"]["task"] == "image-classification"
        assert listed["tiny/bert-sentiment"]["task"] == "text-classification"
        async def calls():
            async with AsyncInferenceClient(timeout=120, token="ray-key-123456") as client:
                a = await client.image_classification(MEDIA / "chelsea.png", model=f"{url}/models/tiny/vit-classifier")
                b = await client.text_classification("the cat", model=f"{url}/models/tiny/bert-sentiment")
                return a, b
        a, b = asyncio.run(calls())
        assert a[0].label in ("cat", "dog", "rocket", "coffee") and {x.label for x in b} == {"negative", "positive"}
        r = httpx2.post(f"{url}/models/tiny/vit-classifier", content=b"not an image",
                        headers={**key, "Content-Type": "image/png"}, timeout=60)
        assert r.status_code == 400 and r.json()["error"].startswith("Field 'inputs'")
    finally:
        serve.shutdown()
        ray.shutdown()
