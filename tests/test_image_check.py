"""A vision controller checks the generated images against the request (``[planning]
check_images``): the images reach it as image parts of the re-planning round, scaled, and what it
found is said to the user. Run through ``hugginggpt run --sandbox`` (the real ``openai`` client
against the stand-in controller, which reads only the ``data:`` image parts it is sent)."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys

from PIL import Image

from pipeline.replanning import CHECK_SIDE, image_parts
from pipeline.types import Resource


def _run(tmp_path, *env_extra: tuple[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_"))}
    env.update({"HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data"), **dict(env_extra)})
    p = subprocess.run([sys.executable, "-m", "hugginggpt", "run", "Draw a picture of a red apple", "--sandbox", "--json"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_a_vision_controller_sees_the_generated_image_and_says_what_it_found(tmp_path):
    doc = _run(tmp_path, ("HUGGINGGPT_PLANNING__CHECK_IMAGES", "true"))
    assert doc["rounds"][1] == {"round": 2, "tasks": [], "reason": "Checking the generated images against the request.",
                                "outcome": "answer"}
    # the stand-in describes the pixels it was sent: the image part reached it (a caption or a path would not)
    assert doc["notes"] == ["Checked the generated images against your request: [sandbox vision] image-1: a 512x512 "
                            "image, mostly red, evenly lit"]
    assert doc["status"] == "ok"


def test_without_check_images_a_run_that_produced_everything_asks_the_controller_no_more(tmp_path):
    doc = _run(tmp_path)
    assert [r["round"] for r in doc["rounds"]] == [1] and doc["notes"] == []


async def test_images_are_shown_scaled_to_the_check_side_and_an_unreadable_one_is_left_out(tmp_path):
    big = tmp_path / "big.png"
    Image.new("RGB", (3000, 1500), (200, 30, 30)).save(big)
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    files = [Resource("image-1", "image", big, "image/png", big.stat().st_size, origin="task:0"),
             Resource("image-2", "image", broken, "image/png", 20, origin="task:0")]
    parts = await image_parts(files, max_pixels=10_000_000)
    assert [p["type"] for p in parts] == ["text", "image_url"] and parts[0]["text"] == "image-1:"
    url = parts[1]["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")
    with Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))) as shown:
        assert shown.size == (CHECK_SIDE, CHECK_SIDE // 2)
    # an image over the pixel limit is not decoded to be shown
    assert await image_parts(files[:1], max_pixels=1_000_000) == []
