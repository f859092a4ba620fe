"""The expert server's reading of a Hugging Face cache and of its settings, without running models:
task inference from cards and architectures, the ``main`` ref, weight sizes, sizes in settings,
presets, and the ``hugginggpt experts`` command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest

from expert_server.cache import infer_task, scan, weights_size
from expert_server.config import load_config, parse_size
from expert_server.download import preset_models
from benchmarks.harness.realparts import free_port
from benchmarks.harness.tinymodels import write_repo

ROOT = Path(__file__).resolve().parents[1]


def _repo(tmp: Path, cache: Path, repo_id: str, files: dict[str, object], tag: str | None = None) -> Path:
    folder = tmp / repo_id.replace("/", "--")
    folder.mkdir(parents=True)
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    return write_repo(cache, repo_id, folder, tag)


def test_tasks_come_from_the_card_else_the_architecture(tmp_path):
    cache = tmp_path / "hub"
    _repo(tmp_path, cache, "a/card", {"config.json": {"architectures": ["BertForMaskedLM"]}}, "text-classification")
    _repo(tmp_path, cache, "a/asr", {"config.json": {"architectures": ["WhisperForConditionalGeneration"]}})
    _repo(tmp_path, cache, "a/kws", {"config.json": {"architectures": ["Wav2Vec2ForSequenceClassification"],
                                                      "model_type": "wav2vec2"}})
    _repo(tmp_path, cache, "a/sd", {"model_index.json": {"_class_name": "StableDiffusionPipeline"}})
    _repo(tmp_path, cache, "lllyasviel/control_v11p_sd15_openpose", {"config.json": {"_class_name": "ControlNetModel"}})
    _repo(tmp_path, cache, "a/st", {"config.json": {"architectures": ["BertModel"]}, "modules.json": []})
    _repo(tmp_path, cache, "a/unknown", {"config.json": {"architectures": ["SomethingNew"]}})
    found = scan(cache, {"a/unknown": "image-classification"})
    assert {k: v.task for k, v in found.items()} == {
        "a/card": "text-classification", "a/asr": "automatic-speech-recognition", "a/kws": "audio-classification",
        "a/sd": "text-to-image", "lllyasviel/control_v11p_sd15_openpose": "openpose-text-to-image",
        "a/st": "sentence-similarity", "a/unknown": "image-classification"}
    assert found["a/sd"].library == "diffusers" and found["a/card"].library == "transformers"
    assert infer_task("x/y", found["a/card"].path)[0] == "fill-mask"  # what the card overrides


def test_weights_are_counted_once_and_the_main_ref_is_served(tmp_path):
    cache = tmp_path / "hub"
    snap = _repo(tmp_path, cache, "a/m", {"config.json": {"architectures": ["ViTForImageClassification"]},
                                          "model.safetensors": b"x" * 1000, "pytorch_model.bin": b"y" * 5000,
                                          "unet/diffusion_pytorch_model.safetensors": b"z" * 300,
                                          "unet/diffusion_pytorch_model.fp16.safetensors": b"h" * 150})
    assert weights_size(snap) == 1300
    assert snap.is_symlink() is False and (snap / "model.safetensors").is_symlink()
    assert scan(cache)["a/m"].path == snap


def test_sizes_and_settings():
    assert parse_size("4GB") == 4 * 10**9 and parse_size("512MiB") == 512 * 2**20 and parse_size("1.5g") == 1_500_000_000
    assert parse_size(1234) == 1234 and parse_size("") is None
    with pytest.raises(ValueError, match="is not a size"):
        parse_size("lots")
    cfg = load_config(None, memory_budget=parse_size("2GB"), port=9000)
    assert cfg.memory_budget == 2 * 10**9 and cfg.port == 9000 and cfg.default_deadline == 120


def test_presets_grow_and_cover_controlnet():
    minimal, standard, full = (preset_models(p) for p in ("minimal", "standard", "full"))
    assert set(minimal) < set(standard) < set(full)
    assert "lllyasviel/Annotators" in standard and sum("controlnet" in m for m in standard) == 8
    with pytest.raises(ValueError, match="unknown preset"):
        preset_models("huge")


def _cli(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hugginggpt", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_experts_download_says_which_models_failed(tmp_path):
    p = _cli("experts", "download", "nobody/not-cached", env={"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path),
                                                               "HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data")})
    assert p.returncode == 6 and "failed  nobody/not-cached" in p.stderr and "Traceback" not in p.stderr
    p = _cli("experts", "download", env={"HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data")})
    assert p.returncode == 2 and "--preset" in p.stderr


def test_experts_serve_starts_from_the_bot_command_line(tmp_path):
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "empty"),
           "HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data")}
    proc = subprocess.Popen([sys.executable, "-m", "hugginggpt", "experts", "serve", "--port", str(port), "--device", "cpu",
                             "--memory-budget", "1GB"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                r = httpx2.get(f"http://127.0.0.1:{port}/models", timeout=1)
                if r.status_code == 200:
                    break
            except httpx2.HTTPError:
                time.sleep(0.2)
        doc = r.json()
        assert doc["memory_budget_bytes"] == 10**9 and doc["device"] == "cpu"
        assert [m["id"] for m in doc["models"]] == ["canny-control"]  # OpenCV needs no checkpoint
        r = httpx2.post(f"http://127.0.0.1:{port}/models/google/vit-base-patch16-224", content=b"x", timeout=5)
        assert r.status_code == 404 and "not served here" in r.json()["error"]
    finally:
        proc.terminate()
        proc.wait(10)
