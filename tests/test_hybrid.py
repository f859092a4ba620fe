"""Hybrid inference (HuggingGPT §3.3): the team's expert servers first, Inference Providers after.

Real runs of the bot (``hugginggpt run --sandbox`` as a subprocess, and the service in process on
the sandbox's stand-ins) against a stand-in expert server that speaks the expert server contract
(``tests/standins/expert_server.py``); checked from what each stand-in received and from what the
user sees (``--json``, notes, answers)."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bot.incoming import ConversationKey, Message, Requester
from bot.service import Service
from bot.settings import load_settings
from tests.conftest import MEDIA_DIR, media_file
from tests.standins.expert_server import ExpertServerStandIn, model

DEPTH = "Intel/dpt-large"
VIT = "google/vit-base-patch16-224"
RESNET = "microsoft/resnet-50"
MODELS = [
    model(DEPTH, "depth-estimation"),
    model(VIT, "image-classification", state="on_disk"),
    model("hed-control", "hed-control", library="controlnet_aux"),
    model("stabilityai/stable-diffusion-xl-base-1.0", "text-to-image", state="refused",
          reason="It needs 6.9 GB and the budget is 4 GB.", library="diffusers"),
]


@pytest.fixture
def experts():
    with ExpertServerStandIn(MODELS) as es:
        yield es


def dead_url() -> str:
    """A loopback URL where nothing listens (connections are refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


async def open_service(sandbox, tmp_path, **inference):
    overrides = sandbox.overrides(tmp_path / "data")
    overrides["inference"].update(inference)
    return await Service.create(load_settings(env={}, overrides=overrides))


async def run(service, text, *files) -> dict:
    key = ConversationKey("test", "w", "c", text[:20])
    events = [e async for e in service.handle(Message(text, [media_file(f) for f in files], key=key, who=Requester("terminal", "u1")))]
    return events[-1].record.to_json()


def provider_models(sandbox) -> list[str]:
    return [r.model for r in sandbox.inference.records]


# ---------------------------------------------------------------------------------------------
# `hugginggpt run --sandbox` with a configured expert server


def small_catalog(path: Path) -> Path:
    """A catalog in which no provider model serves depth estimation or hed-control."""
    rows = [
        {"id": RESNET, "task": "image-classification", "downloads": 5000, "likes": 10,
         "description": "Image classification on ImageNet.", "providers": None, "tags": []},
        {"id": "facebook/detr-resnet-50", "task": "object-detection", "downloads": 4000, "likes": 10,
         "description": "Object detection.", "providers": None, "tags": []},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def hugginggpt_run(tmp_path: Path, text: str, experts_url: str | None) -> subprocess.CompletedProcess:
    config = tmp_path / "hugginggpt.toml"
    lines = [f'[catalog]\npath = "{small_catalog(tmp_path / "catalog.jsonl")}"']
    if experts_url:
        lines.append(f'[inference]\nexperts_url = "{experts_url}"')
    config.write_text("\n".join(lines) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_TOKEN"))}
    env["HUGGINGGPT_STORAGE__DATA_DIR"] = str(tmp_path / "data")
    return subprocess.run(
        [sys.executable, "-m", "hugginggpt", "--config", str(config), "run", "--sandbox", "--json", text,
         "--file", str(MEDIA_DIR / "chelsea.png")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )


def test_a_task_no_provider_serves_runs_on_the_expert_server(tmp_path, experts):
    without = hugginggpt_run(tmp_path, "Estimate the depth of this photo", None)
    assert "Traceback" not in without.stderr, without.stderr
    assert "depth-estimation" not in [t["task"] for t in json.loads(without.stdout)["tasks"]]  # silently gone

    p = hugginggpt_run(tmp_path, "Estimate the depth of this photo", experts.url)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    [task] = doc["tasks"]
    assert task["task"] == "depth-estimation"
    sel, res = doc["selections"][str(task["id"])], doc["results"][str(task["id"])]
    assert (sel["model"], sel["runner"], sel["where"]) == (DEPTH, "hub", f"local {experts.url}")
    assert res["status"] == "ok" and res["where"] == f"local {experts.url}"
    assert experts.posted() == [DEPTH]
    assert all(r.authorization is None for r in experts.requests)
    # the depth map is the one the server computed from the real photo's pixels
    made = np.asarray(Image.open(res["output"]["files"][0]["path"]).convert("L"), dtype=int)
    grey = np.asarray(Image.open(MEDIA_DIR / "chelsea.png").convert("L"), dtype=int)
    assert made.shape == grey.shape and np.abs(made - (255 - grey)).max() <= 1


# ---------------------------------------------------------------------------------------------
# The service in process, on the sandbox's stand-ins


async def test_local_first_and_a_controlnet_annotator_addressed_by_its_task(sandbox, tmp_path, experts):
    service = await open_service(sandbox, tmp_path, experts_url=[experts.url])
    try:
        doc = await run(service, "Extract the soft edges of this photo", "chelsea.png")
        depth = await run(service, "Estimate the depth of this photo", "chelsea.png")
    finally:
        await service.close()
    [sel] = doc["selections"].values()
    assert (sel["model"], sel["where"]) == ("hed-control", f"local {experts.url}")
    assert sel["candidates"][0] == "hed-control"  # local candidates come first
    [sel] = depth["selections"].values()
    assert sel["candidates"][0] == DEPTH and sel["where"] == f"local {experts.url}"
    assert set(experts.posted()) == {"hed-control", DEPTH}
    assert not {"hed-control", DEPTH} & set(provider_models(sandbox))
    assert doc["status"] == depth["status"] == "ok"


async def test_the_controller_sees_where_each_candidate_runs(sandbox, tmp_path, experts):
    service = await open_service(sandbox, tmp_path, experts_url=[experts.url])
    try:
        await run(service, "Estimate the depth of this photo", "chelsea.png")
    finally:
        await service.close()
    [call] = [c for c in sandbox.controller.requests if c.stage == "model-selection"]
    user = call.body["messages"][-1]["content"]
    shown = json.loads(user.split("<candidates>")[1].split("</candidates>")[0])
    assert shown[0]["id"] == DEPTH and "expert server" in shown[0]["runs_on"]
    assert all("Inference Providers" in c["runs_on"] or "gateway" in c["runs_on"] for c in shown[1:])


async def test_a_server_that_is_down_hands_over_to_the_providers(sandbox, tmp_path):
    down = dead_url()
    service = await open_service(sandbox, tmp_path, experts_url=[down])
    try:
        doc = await run(service, "Estimate the depth of this photo", "chelsea.png")
    finally:
        await service.close()
    assert doc["status"] == "ok"
    [res] = doc["results"].values()
    assert res["where"] == f"gateway {sandbox.inference_url}"
    assert res["model"] in provider_models(sandbox)
    assert f"The expert server {down} could not be reached, so its models are not offered." in doc["notes"]


async def test_a_model_the_server_lacks_runs_on_the_provider_and_a_failing_provider_goes_local(sandbox, tmp_path, experts):
    experts.failures[DEPTH] = 404  # listed, but gone when called
    sandbox.inference.gone.add(RESNET)  # the controller's pick for classification fails on the provider
    service = await open_service(sandbox, tmp_path, experts_url=[experts.url])
    try:
        depth = await run(service, "Estimate the depth of this photo", "chelsea.png")
        label = await run(service, "Classify this photo", "chelsea.png")
    finally:
        await service.close()
    [res] = depth["results"].values()
    assert (res["status"], res["model"], res["where"]) == ("ok", DEPTH, f"gateway {sandbox.inference_url}")
    assert experts.posted()[0] == DEPTH and DEPTH in provider_models(sandbox)

    [sel] = label["selections"].values()
    [res] = label["results"].values()
    assert sel["model"] == RESNET and sel["where"].startswith("gateway ")
    assert (res["status"], res["model"], res["where"]) == ("ok", VIT, f"local {experts.url}")
    assert res["output"]["text"].startswith("[expert]")
    assert experts.posted()[-1] == VIT


async def test_the_next_server_listing_the_model_serves_it_when_the_first_fails(sandbox, tmp_path, experts):
    with ExpertServerStandIn(MODELS) as second:
        experts.failures[DEPTH] = 500
        service = await open_service(sandbox, tmp_path, experts_url=[experts.url, second.url])
        try:
            doc = await run(service, "Estimate the depth of this photo", "chelsea.png")
        finally:
            await service.close()
        [res] = doc["results"].values()
        assert (res["status"], res["where"]) == ("ok", f"local {second.url}")
        assert experts.posted()[0] == DEPTH and second.posted() == [DEPTH]
        assert DEPTH not in provider_models(sandbox)


async def test_local_mode_never_calls_a_provider(sandbox, tmp_path, experts):
    service = await open_service(sandbox, tmp_path, experts_url=[experts.url], mode="local")
    try:
        doc = await run(service, "Classify this photo and estimate its depth", "chelsea.png")
        detect = await run(service, "Detect the objects in this photo", "chelsea.png")
    finally:
        await service.close()
    assert sorted(t["task"] for t in doc["tasks"]) == ["depth-estimation", "image-classification"]
    assert {r["where"] for r in doc["results"].values()} == {f"local {experts.url}"}
    assert "object-detection" not in [t["task"] for t in detect["tasks"]]  # no server lists a detector
    assert sandbox.inference.records == []


async def test_local_mode_with_the_server_down_says_so(sandbox, tmp_path):
    down = dead_url()
    service = await open_service(sandbox, tmp_path, experts_url=[down], mode="local")
    try:
        doc = await run(service, "Estimate the depth of this photo", "chelsea.png")
    finally:
        await service.close()
    assert f"The expert server {down} could not be reached, so its models are not offered." in doc["notes"]
    assert doc["tasks"] == [] and sandbox.inference.records == []


async def test_providers_mode_never_calls_the_server(sandbox, tmp_path, experts):
    service = await open_service(sandbox, tmp_path, experts_url=[experts.url], mode="providers")
    try:
        doc = await run(service, "Estimate the depth of this photo", "chelsea.png")
    finally:
        await service.close()
    [res] = doc["results"].values()
    assert res["status"] == "ok" and res["where"] == f"gateway {sandbox.inference_url}"
    assert experts.requests == []


async def test_the_models_listing_is_cached_briefly(sandbox, tmp_path, experts):
    import asyncio

    service = await open_service(sandbox, tmp_path, experts_url=[experts.url], experts_ttl=1.0)
    try:
        await run(service, "Estimate the depth of this photo", "chelsea.png")
        await run(service, "Extract the soft edges of this photo", "chelsea.png")
        assert experts.listing_calls == 1  # one GET /models for both runs, within the TTL
        await asyncio.sleep(1.1)
        await run(service, "Estimate the depth of this photo", "chelsea.png")
        assert experts.listing_calls == 2
    finally:
        await service.close()
    assert experts.posted() == [DEPTH, "hed-control", DEPTH]


async def test_the_hugging_face_token_never_reaches_an_expert_server(sandbox, tmp_path, experts):
    service = await open_service(sandbox, tmp_path, experts_url=[experts.url], token="hf_test_secret_token")
    try:
        doc = await run(service, "Estimate the depth of this photo", "chelsea.png")
    finally:
        await service.close()
    assert doc["status"] == "ok" and experts.posted() == [DEPTH]
    assert [r.authorization for r in experts.requests] == [None, None]


# ---------------------------------------------------------------------------------------------
# catalog show, settings


async def test_catalog_show_says_where_each_model_runs(experts):
    import argparse

    from hugginggpt.catalog import add_parser, main

    parser = argparse.ArgumentParser(prog="hugginggpt")
    add_parser(parser.add_subparsers(dest="command"))
    gateway = dead_url()
    settings = load_settings(env={}, overrides={"inference": {"experts_url": experts.url, "base_url": gateway}})
    out = io.StringIO()
    assert await main(parser.parse_args(["catalog", "show", "depth-estimation", "--limit", "3"]), settings, stdout=out) == 0
    text = out.getvalue()
    assert f"{DEPTH}  loaded, 1 MB  where: local {experts.url} (cpu)" in text
    [row] = [line for line in text.splitlines() if "served:" in line and DEPTH in line]
    assert f"where: local {experts.url}, then gateway {gateway}" in row
    out = io.StringIO()
    assert await main(parser.parse_args(["catalog", "show", "text-to-image", "--limit", "1"]), settings, stdout=out) == 0
    assert "refused: It needs 6.9 GB and the budget is 4 GB." in out.getvalue()


@pytest.mark.parametrize("env, expected", [
    ({"HUGGINGGPT_INFERENCE__MODE": "local"}, "[inference] mode from HUGGINGGPT_INFERENCE__MODE is invalid"),
    ({"HUGGINGGPT_INFERENCE__MODE": "remote"}, "'providers', 'local' or 'hybrid'"),
    ({"HUGGINGGPT_INFERENCE__EXPERTS_URL": "gpu1:8081"}, "[inference] experts_url from HUGGINGGPT_INFERENCE__EXPERTS_URL"),
])
def test_settings_errors_are_one_line_naming_the_key(env, expected):
    from bot.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        load_settings(env=env)
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_settings_take_one_url_or_a_list():
    assert load_settings(env={}).inference.mode == "hybrid"
    one = load_settings(env={"HUGGINGGPT_INFERENCE__EXPERTS_URL": "http://gpu1:8081/"}).inference
    assert one.experts_url == ["http://gpu1:8081"]
    many = load_settings(env={"HUGGINGGPT_INFERENCE__EXPERTS_URL": '["http://a:1", "http://b:2"]'}).inference
    assert many.experts_url == ["http://a:1", "http://b:2"]


async def test_local_mode_keeps_a_failing_model_off_the_providers_and_names_the_server(sandbox, tmp_path, experts):
    experts.failures[DEPTH] = 404
    service = await open_service(sandbox, tmp_path, experts_url=[experts.url], mode="local")
    try:
        doc = await run(service, "Estimate the depth of this photo", "chelsea.png")
    finally:
        await service.close()
    [res] = doc["results"].values()
    assert res["status"] == "failed"
    assert res["error"] == (f"The model {DEPTH} is not available (HTTP 404) on the expert "
                            f"server {experts.url}.")
    assert sandbox.inference.records == [] and experts.posted() == [DEPTH]


async def test_a_server_gone_since_its_listing_hands_over_at_once(sandbox, tmp_path, caplog):
    es = ExpertServerStandIn(MODELS).start()
    service = await open_service(sandbox, tmp_path, experts_url=[es.url], experts_ttl=60.0)
    try:
        first = await run(service, "Estimate the depth of this photo", "chelsea.png")
        es.close()  # still listed (the answer is cached), but nothing listens any more
        caplog.clear()
        second = await run(service, "Estimate the depth of this photo", "chelsea.png")
    finally:
        await service.close()
        es.close()
    assert [r["where"] for r in first["results"].values()] == [f"local {es.url}"]
    [res] = second["results"].values()
    assert (res["status"], res["model"], res["where"]) == ("ok", DEPTH, f"gateway {sandbox.inference_url}")
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]  # a refused connection is not retried
    assert any("trying its next route" in r.getMessage() for r in caplog.records)


async def test_local_mode_runs_without_a_token_and_never_asks_the_hub(tmp_path, experts):
    """A real ``hugginggpt run`` off the sandbox: its own controller, no Hugging Face token, the
    Hub (``HF_ENDPOINT``) a stand-in that records every request."""
    import asyncio

    from sandbox.controller import ControllerStandIn
    from tests.standins.hub import HubStandIn, reference_hub_models

    controller = ControllerStandIn()
    controller_url = await controller.start()
    try:
        async with HubStandIn(reference_hub_models()) as hub:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_"))}
            env.update({
                "HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data"), "HUGGINGGPT_LLM__BASE_URL": controller_url,
                "HUGGINGGPT_LLM__API_KEY": "sk-test", "HUGGINGGPT_LLM__MODEL": "sandbox-controller",
                "HUGGINGGPT_INFERENCE__MODE": "local", "HUGGINGGPT_INFERENCE__EXPERTS_URL": experts.url,
                "HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_TELEMETRY": "1",
            })
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "hugginggpt", "run", "--json", "Estimate the depth of this photo",
                "--file", str(MEDIA_DIR / "chelsea.png"), cwd=tmp_path, env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )
            out, err = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        await controller.close()
    assert proc.returncode == 0, err.decode()
    doc = json.loads(out)
    assert [(r["status"], r["where"]) for r in doc["results"].values()] == [("ok", f"local {experts.url}")]
    assert experts.posted() == [DEPTH] and hub.requests == []


async def test_detection_json_and_controlnet_generation_come_through_in_the_wire_format(sandbox, tmp_path):
    drawn_by = "lllyasviel/sd-controlnet-canny"
    models = [model("facebook/detr-resnet-50", "object-detection"), model(drawn_by, "canny-text-to-image",
                                                                           library="diffusers")]
    with ExpertServerStandIn(models) as es:
        service = await open_service(sandbox, tmp_path, experts_url=[es.url])
        try:
            detect = await run(service, "Detect the objects in this photo", "chelsea.png")
            draw = await run(service, "Draw a red sports car from the edges of this photo", "chelsea.png")
        finally:
            await service.close()
    [res] = detect["results"].values()
    assert res["where"] == f"local {es.url}"
    [box] = res["output"]["data"]["objects"]
    assert box["label"] == "[expert] object" and box["box"] == [112, 75, 338, 225]  # a quarter in, 451x300
    steps = {t["task"]: draw["results"][str(t["id"])] for t in draw["tasks"]}
    assert steps["canny-control"]["where"] == "in-process"
    assert steps["canny-text-to-image"]["where"] == f"local {es.url}"
    assert es.parameters[-1].get("prompt", "").startswith("a red sports car")
    image = Image.open(steps["canny-text-to-image"]["output"]["files"][0]["path"])
    assert image.size == (451, 300)
    assert es.posted() == ["facebook/detr-resnet-50", drawn_by]
