"""docs/experts.md, "Your own or a fine-tuned checkpoint", done as the page says: a tiny checkpoint
saved into a folder (``save_pretrained``), named in the server's ``[local_models]``, served by
``hugginggpt experts serve --config experts.toml`` with an empty Hugging Face cache, and called."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from PIL import Image

from benchmarks.harness import tinymodels
from benchmarks.harness.realparts import free_port, wait_ready

ROOT = Path(__file__).resolve().parents[1]
LABELS = ("cat", "dog", "rocket", "coffee")


def _serve(tmp_path: Path, config: str, port: int) -> subprocess.Popen[bytes]:
    (tmp_path / "experts.toml").write_text(config)
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "empty-cache"), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-m", "hugginggpt", "experts", "serve", "--config", "experts.toml",
                             "--port", str(port), "--device", "cpu"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.mark.slow
def test_a_checkpoint_folder_named_in_local_models_is_served_and_answers(tmp_path):
    folder = tmp_path / "vit-pets"
    tinymodels.vit(folder, labels=LABELS)  # what save_pretrained writes: config.json, weights, processor
    port = free_port()
    proc = _serve(tmp_path, f'[local_models]\n"my-team/vit-pets" = "{folder}"\n', port)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, 180, lambda: proc.stdout.read().decode() if proc.poll() is not None else "")
        listed = {m["id"]: m for m in httpx2.get(f"{url}/models", timeout=10).json()["models"]}
        assert set(listed) >= {"my-team/vit-pets"} and listed["my-team/vit-pets"]["task"] == "image-classification"
        photo = io.BytesIO()
        Image.open(ROOT / "tests" / "fixtures" / "media" / "chelsea.png").convert("RGB").save(photo, "JPEG")
        r = httpx2.post(f"{url}/models/my-team/vit-pets", content=photo.getvalue(), timeout=120)
        assert r.status_code == 200, r.text
        assert {x["label"] for x in r.json()} <= set(LABELS) and r.json()
        # a request names a model id, never a path
        assert httpx2.post(f"{url}/models/{folder}", content=photo.getvalue(), timeout=30).status_code == 404
    finally:
        proc.terminate()
        proc.wait(20)


@pytest.mark.parametrize("folder,said", [
    ("{tmp}/missing", "the folder {tmp}/missing of my-team/vit-pets does not exist"),
    ("{tmp}", "the folder {tmp} of my-team/vit-pets holds no checkpoint (no config.json or model_index.json)"),
    ("vit-pets", "the folder of my-team/vit-pets must be an absolute path, not 'vit-pets'"),
])
def test_a_local_model_folder_that_cannot_be_served_stops_the_start_with_one_sentence(tmp_path, folder, said):
    folder, said = folder.format(tmp=tmp_path), said.format(tmp=tmp_path)
    proc = _serve(tmp_path, f'[local_models]\n"my-team/vit-pets" = "{folder}"\n', free_port())
    out, _ = proc.communicate(timeout=120)
    lines = out.decode().strip().splitlines()
    assert proc.returncode == 2 and lines[-1].startswith("Error: ") and said in lines[-1], out.decode()
    assert "Traceback" not in out.decode()
