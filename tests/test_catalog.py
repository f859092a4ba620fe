"""Model catalog (paper §3.2 candidates), availability and ``hugginggpt catalog refresh|show``.

Hub traffic goes through the real ``huggingface_hub.HfApi`` to the stand-in Hub on 127.0.0.1.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import argparse
import asyncio
import datetime as dt
import io
import json
import logging
import socket
import time
from pathlib import Path

import pytest

from hugginggpt.catalog import add_parser, main
from pipeline.catalog.refresh import refresh_catalog
from bot.settings import load_settings
from pipeline.catalog import SHIPPED_CATALOG, Availability, Catalog, ModelCard
from hugginggpt.common import exit_status
from bot.errors import InputError
from pipeline.errors import CatalogError
from pipeline.tasks import TASKS
from tests.standins.hub import FIXTURE, HubStandIn, reference_hub_models

REFERENCE = FIXTURE


@pytest.fixture(scope="module")
def reference() -> Catalog:
    return Catalog.load(REFERENCE)


@pytest.fixture
async def hub():
    async with HubStandIn(reference_hub_models(), page_size=7) as server:
        yield server


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def card(model_id: str, providers: tuple[str, ...] | None, task: str = "object-detection") -> ModelCard:
    return ModelCard(id=model_id, task=task, downloads=1, likes=1, description="", providers=providers)


# ---------------------------------------------------------------------------------------------
# Loader


def test_reference_snapshot_loads_every_line_into_24_tasks(reference: Catalog) -> None:
    assert len(reference) == 673
    assert len(reference.tasks()) == 24
    assert reference.snapshot is None
    assert all(c.providers is None for c in reference.cards())  # the old snapshot knows no providers
    assert len(reference.candidates("text-to-video")) == 8


def test_candidates_rank_by_downloads_not_likes(reference: Catalog) -> None:
    ranked = reference.candidates("object-detection")
    # hustvl/yolos-tiny: 266,896 downloads, 33 likes; facebook/detr-resnet-50: 134,611 and 129 likes.
    assert [c.id for c in ranked[:2]] == ["hustvl/yolos-tiny", "facebook/detr-resnet-50"]
    for task in reference.tasks():
        downloads = [c.downloads for c in reference.candidates(task)]
        assert downloads == sorted(downloads, reverse=True)
    likes_first = sorted(ranked, key=lambda c: -c.likes)
    assert likes_first[0].id != ranked[0].id


def test_candidates_are_a_copy_and_accept_aliases(reference: Catalog) -> None:
    first = reference.candidates("image-to-text")
    first.clear()
    assert reference.candidates("image-to-text")
    assert reference.candidates("image-captioning") == reference.candidates("image-to-text")
    assert reference.candidates("no-such-task") == []


def test_descriptions_are_condensed_plain_text(reference: Catalog) -> None:
    for c in reference.cards():
        assert len(c.description) <= 600
        assert "](" not in c.description and "<img" not in c.description and "```" not in c.description
        assert "http://" not in c.description and "https://" not in c.description
    view = reference.candidates("text-to-image")[0].prompt_view()
    assert set(view) == {"id", "downloads", "likes", "description", "tags"}
    assert view["id"] == "runwayml/stable-diffusion-v1-5"
    assert len(view["description"]) <= 300 and view["description"].startswith("Stable Diffusion is")
    assert json.dumps(view)


def test_reference_format_with_string_numbers_and_repr_meta(tmp_path: Path) -> None:
    lines = [
        {
            "id": "acme/detector",
            "task": "object-detection",
            "pipeline_tag": "object-detection",
            "downloads": "1,234",
            "likes": "7",
            "meta": "{'tags': ['vision', 'region:us', 'pytorch'], 'language': 'en', 'ok': True}",
            "description": "---\nlicense: mit\n---\n# Acme detector\n\n<p align='center'><img src='x.png'></p>\n"
            "A **fast** detector trained on [COCO](https://cocodataset.org).\n\n```python\nimport acme\n```\n"
            "| a | b |\n|---|---|\n- finds cats &amp; dogs\n",
        },
        {"id": "acme/other", "task": "object-detection", "downloads": "99", "likes": None, "meta": None, "description": None},
        {"id": "acme/chat", "task": "image-captioning", "downloads": 5, "likes": 1, "meta": "not a dict(", "description": ""},
        {"id": "acme/unknown", "task": "graph-ml", "downloads": 5, "likes": 1},
    ]
    path = tmp_path / "ref.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    cat = Catalog.load(path)
    det = cat.get("acme/detector")
    assert det is not None and det.downloads == 1234 and det.likes == 7
    assert det.tags == ("vision",)
    assert det.description == "A fast detector trained on COCO. finds cats & dogs"
    assert [c.id for c in cat.candidates("object-detection")] == ["acme/detector", "acme/other"]
    assert cat.get("acme/other").likes == 0
    assert cat.get("acme/chat").task == "image-to-text"
    assert cat.get("acme/unknown") is None
    assert cat.tasks() == {"object-detection", "image-to-text"}


def test_our_format_with_header_and_providers(tmp_path: Path) -> None:
    path = tmp_path / "ours.jsonl"
    records = [
        {"_catalog": {"snapshot": "2026-01-02", "source": "https://hub.example", "generated_at": "x"}},
        {"id": "a/served", "task": "text-to-image", "downloads": 10, "likes": 1, "description": "d", "providers": ["fal-ai"], "tags": ["sd"]},
        {"id": "a/none", "task": "text-to-image", "downloads": 10, "likes": 1, "description": "d", "providers": [], "tags": []},
        {"id": "a/unknown", "task": "text-to-image", "downloads": 10, "likes": 5, "description": "d", "providers": None},
    ]
    path.write_text("\n".join(json.dumps(r) for r in records), encoding="utf-8")
    cat = Catalog.load(path)
    assert cat.snapshot == "2026-01-02" and cat.source == "https://hub.example"
    # tie on downloads: likes desc, then id
    assert [c.id for c in cat.candidates("text-to-image")] == ["a/unknown", "a/none", "a/served"]
    assert cat.get("a/served").providers == ("fal-ai",)
    assert cat.get("a/none").providers == ()
    assert cat.get("a/unknown").providers is None


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ('{"id": "a/b", "task": "translation", "downloads": 1}\n\n{"id": "a/c", "task": \n', "line 3"),
        ('{"id": "a/b", "task": "translation", "downloads": "many"}\n', "line 1"),
        ('{"id": "a/b", "task": "translation"}\n{"task": "translation"}\n', "line 2"),
        ('{"id": "a/b", "task": "translation"}\n{"_catalog": {"snapshot": "x"}}\n', "line 2"),
        ('[1, 2]\n', "line 1"),
        ('{"id": "a/b", "task": "translation", "providers": "fal-ai"}\n', "line 1"),
    ],
)
def test_broken_lines_name_the_file_and_line(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CatalogError) as info:
        Catalog.load(path)
    assert str(path) in info.value.user_message and needle in info.value.user_message
    assert exit_status(info.value) == 2


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="does not exist"):
        Catalog.load(tmp_path / "nope.jsonl")
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(CatalogError) as info:
        Catalog.load(binary)
    assert info.value.user_message == f"The model catalog {binary} cannot be read (UnicodeDecodeError)."


def test_shipped_catalog_covers_every_task_that_needs_a_model() -> None:
    assert SHIPPED_CATALOG.stat().st_size < 1_000_000
    cat = Catalog.load()
    assert cat.snapshot and cat.snapshot.startswith("2023-03")
    # tasks younger than the 2023 snapshot are found by `catalog refresh` (no recorded listing of them is shipped)
    needed = {name for name, s in TASKS.items() if not s.local} - {"image-text-to-text", "image-to-video"}
    assert needed <= cat.tasks(), needed - cat.tasks()
    assert "canny-control" not in cat.tasks()
    assert [c.id for c in cat.candidates("canny-text-to-image")] == ["lllyasviel/sd-controlnet-canny"]
    assert {c.id for c in cat.candidates("openpose-control")} == {"lllyasviel/Annotators", "lllyasviel/ControlNet"}
    assert cat.get("lllyasviel/ControlNet", task="seg-control").task == "seg-control"
    assert all(c.providers is None for c in cat.cards())
    assert len(cat.candidates("object-detection")) == 30


# ---------------------------------------------------------------------------------------------
# Availability


async def test_gateway_serves_every_model_without_asking_the_hub() -> None:
    cards = [card("a/x", None), card("b/y", ())]
    av = Availability(provider="hf-inference", base_url="http://gw", endpoints={}, token=None, hub_endpoint=closed_port_url())
    assert await av.filter(cards) == cards


async def test_endpoints_and_known_providers() -> None:
    cards = [card("a/endpoint", ()), card("a/hf", ("hf-inference",)), card("a/fal", ("fal-ai", "replicate")), card("a/none", ())]
    hub = closed_port_url()
    av = Availability(provider="hf-inference", base_url=None, endpoints={"a/endpoint": "http://e"}, token=None, hub_endpoint=hub)
    assert [c.id for c in await av.filter(cards)] == ["a/endpoint", "a/hf"]
    auto = Availability(provider="auto", base_url=None, endpoints={}, token=None, hub_endpoint=hub)
    assert [c.id for c in await auto.filter(cards)] == ["a/hf", "a/fal"]
    nothing = Availability(provider=None, base_url=None, endpoints={"a/endpoint": "http://e"}, token=None, hub_endpoint=hub)
    assert [c.id for c in await nothing.filter(cards)] == ["a/endpoint"]


async def test_unknown_availability_is_looked_up_on_the_hub(hub: HubStandIn, reference: Catalog) -> None:
    top = reference.candidates("object-detection")[:6]
    # stand-in: rank 0 live hf-inference; 1 live fal-ai + staging hf-inference; 2 error; 3 live replicate
    hf = Availability(provider="hf-inference", base_url=None, endpoints={}, token=None, hub_endpoint=hub.url)
    assert [c.id for c in await hf.filter(top)] == [top[0].id]
    fal = Availability(provider="fal-ai", base_url=None, endpoints={}, token=None, hub_endpoint=hub.url)
    assert [c.id for c in await fal.filter(top)] == [top[1].id]
    auto = Availability(provider="auto", base_url=None, endpoints={}, token=None, hub_endpoint=hub.url)
    assert [c.id for c in await auto.filter(top)] == [top[0].id, top[1].id, top[3].id]
    lookups = hub.calls("/api/models/")
    assert len(lookups) == 18
    assert all(r.values("expand") == ["inferenceProviderMapping"] for r in lookups)


async def test_hub_answers_are_cached_for_ttl(hub: HubStandIn, reference: Catalog) -> None:
    top = reference.candidates("image-classification")[:4]
    av = Availability(provider="hf-inference", base_url=None, endpoints={}, token=None, ttl=0.5, hub_endpoint=hub.url)
    first = await av.filter(top)
    assert len(hub.calls("/api/models/")) == 4
    assert await av.filter(top) == first
    assert len(hub.calls("/api/models/")) == 4  # no new Hub request within the TTL
    await asyncio.sleep(0.6)
    assert await av.filter(top) == first
    assert len(hub.calls("/api/models/")) == 8


async def test_lookups_run_concurrently_and_duplicates_are_asked_once(hub: HubStandIn, reference: Catalog) -> None:
    hub.delay = 0.3
    top = reference.candidates("translation")[:6]
    av = Availability(provider="auto", base_url=None, endpoints={}, token=None, hub_endpoint=hub.url)
    start = time.perf_counter()
    served, again = await asyncio.gather(av.filter(top), av.filter(top + top[:2]))
    assert time.perf_counter() - start < 1.0  # six sequential look-ups would take 1.8 s
    assert [c.id for c in served] == [top[0].id, top[1].id, top[3].id]
    assert [c.id for c in again] == [c.id for c in served] + [top[0].id, top[1].id]
    assert len(hub.calls("/api/models/")) == 6


async def test_unreachable_hub_offers_no_unknown_model(caplog: pytest.LogCaptureFixture, reference: Catalog) -> None:
    top = reference.candidates("object-detection")[:3]
    known = card("a/hf", ("hf-inference",))
    av = Availability(provider="hf-inference", base_url=None, endpoints={}, token="hf_secret_token", hub_endpoint=closed_port_url())
    with caplog.at_level(logging.WARNING, logger="pipeline.catalog"):
        assert await av.filter([*top, known]) == [known]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # one warning per outage, not one per model
    assert "cannot be reached" in caplog.text and any(c.id in caplog.text for c in top)
    assert "hf_secret_token" not in caplog.text


async def test_hub_errors_and_missing_models_are_not_offered(hub: HubStandIn) -> None:
    av = Availability(provider="auto", base_url=None, endpoints={}, token=None, hub_endpoint=hub.url)
    assert await av.filter([card("gone/model", None)]) == []
    hub.fail_status = 500
    av2 = Availability(provider="auto", base_url=None, endpoints={}, token=None, hub_endpoint=hub.url)
    assert await av2.filter([card("hustvl/yolos-tiny", None)]) == []


# ---------------------------------------------------------------------------------------------
# Refresh


async def test_refresh_writes_a_catalog_that_loads_and_ranks(hub: HubStandIn, tmp_path: Path) -> None:
    out = tmp_path / "sub" / "catalog.jsonl"
    summary = await refresh_catalog(out, hub_endpoint=hub.url, token=None, per_task=30, provider=None, readmes=2)
    cat = Catalog.load(out)
    assert cat.snapshot == dt.datetime.now(dt.UTC).date().isoformat() == summary.snapshot
    assert cat.source == hub.url
    younger = {"image-text-to-text", "image-to-video", "image-text-to-image", "image-text-to-video", "video-to-video",
               "video-text-to-text", "audio-text-to-text"} & set(TASKS)  # the 2023 Hub fixture has none of them
    assert summary.models == len(cat) and sorted(summary.missing) == sorted(younger)
    needed = {name for name, s in TASKS.items() if not s.local}
    assert cat.tasks() == needed - younger

    ranked = cat.candidates("object-detection")
    assert [c.id for c in ranked[:4]] == ["hustvl/yolos-tiny", "facebook/detr-resnet-50", "google/owlvit-base-patch32", "facebook/detr-resnet-101"]
    assert [c.providers for c in ranked[:4]] == [("hf-inference",), ("fal-ai",), (), ("replicate",)]
    assert len(ranked) == 30
    # descriptions: README excerpt for the top 2, card metadata afterwards
    assert ranked[0].description.startswith("YOLOS model fine-tuned on COCO 2017")
    assert ranked[3].description == "license: apache-2.0; datasets: coco"
    assert "region:us" not in ranked[0].tags and "pytorch" not in ranked[0].tags
    # conversational comes from text-generation models tagged "conversational"
    assert cat.candidates("conversational") and all("conversational" in c.tags for c in cat.candidates("conversational"))
    # ControlNet: condition in the id; the annotator repos for <cond>-control
    assert [c.id for c in cat.candidates("seg-text-to-image")] == ["lllyasviel/sd-controlnet-seg"]
    assert cat.get("lllyasviel/sd-controlnet-canny", task="canny-text-to-image").providers == ("fal-ai",)
    assert {c.id for c in cat.candidates("hed-control")} == {"lllyasviel/Annotators", "lllyasviel/ControlNet"}
    assert cat.get("someone/controlnet-sketchbook") is None
    # the real HfApi paginated through Link headers and asked for the expansions
    listing = hub.calls("/api/models")
    assert any(r.values("cursor") for r in listing)
    tagged = [r for r in listing if r.values("pipeline_tag") == ["object-detection"] and not r.values("cursor")]
    assert tagged and set(tagged[0].values("expand")) >= {"inferenceProviderMapping", "downloads", "likes"}
    assert tagged[0].values("sort") == ["downloads"]


async def test_refresh_for_one_provider_keeps_only_its_live_models(hub: HubStandIn, tmp_path: Path) -> None:
    out = tmp_path / "c.jsonl"
    summary = await refresh_catalog(
        out, hub_endpoint=hub.url, token=None, tasks=["object-detection", "Image Captioning"], provider="hf-inference", readmes=0
    )
    cat = Catalog.load(out)
    assert cat.tasks() == {"object-detection", "image-to-text"}
    assert [c.id for c in cat.candidates("object-detection")] == ["hustvl/yolos-tiny"]
    assert summary.per_task == {"object-detection": 1, "image-to-text": 1}
    av = Availability(provider="hf-inference", base_url=None, endpoints={}, token=None, hub_endpoint=closed_port_url())
    assert await av.filter(cat.candidates("object-detection")) == cat.candidates("object-detection")


async def test_refresh_errors_are_one_sentence(hub: HubStandIn, tmp_path: Path) -> None:
    out = tmp_path / "c.jsonl"
    out.write_text("previous\n")
    start = time.perf_counter()
    with pytest.raises(CatalogError) as info:
        await refresh_catalog(out, hub_endpoint=closed_port_url(), token=None, tasks=["translation"])
    assert time.perf_counter() - start < 5
    assert "cannot be reached" in info.value.user_message and info.value.user_message.count(". ") == 0
    assert out.read_text() == "previous\n"  # nothing half-written

    hub.token = "hf_right"
    with pytest.raises(CatalogError) as info:
        await refresh_catalog(out, hub_endpoint=hub.url, token="hf_wrong_secret", tasks=["translation"])
    assert "refused the token (401)" in info.value.user_message
    assert "hf_wrong_secret" not in info.value.user_message and "hf_wrong_secret" not in str(info.value)

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(CatalogError) as info:
        await refresh_catalog(blocker / "c.jsonl", hub_endpoint=hub.url, token="hf_right", tasks=["translation"], readmes=0)
    assert "cannot be written" in info.value.user_message
    with pytest.raises(CatalogError, match="not a known task"):
        await refresh_catalog(out, hub_endpoint=hub.url, token=None, tasks=["juggling"])


# ---------------------------------------------------------------------------------------------
# Command line


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="hugginggpt")
    add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


async def test_cli_refresh_then_show(hub: HubStandIn, tmp_path: Path) -> None:
    out = tmp_path / "fresh.jsonl"
    settings = load_settings(env={}, overrides={"inference": {"provider": "fal-ai"}, "storage": {"data_dir": str(tmp_path)}})
    stdout = io.StringIO()
    args = parse(["catalog", "refresh", "--out", str(out), "--hub-endpoint", hub.url, "--tasks", "object-detection", "--provider", "all"])
    assert await main(args, settings, stdout=stdout) == 0
    assert "Wrote 3 models for 1 tasks" in stdout.getvalue() and "[catalog] path" in stdout.getvalue()

    # the stand-in maps detr (rank 1) live on fal-ai, but the installed huggingface_hub has no fal-ai
    # helper for object detection, so the provider policy does not count it as served there
    for provider, served in (("fal-ai", []), ("hf-inference", ["hustvl/yolos-tiny"])):
        settings = load_settings(env={}, overrides={"inference": {"provider": provider}, "catalog": {"path": str(out)}})
        stdout = io.StringIO()
        assert await main(parse(["catalog", "show", "object-detection"]), settings, stdout=stdout) == 0
        rows = [line for line in stdout.getvalue().splitlines() if "served:" in line]
        assert len(rows) == 3
        assert "hustvl/yolos-tiny" in rows[0] and "facebook/detr-resnet-50" in rows[1]
        assert [r.split()[1] for r in rows if "served: yes" in r] == served


async def test_cli_show_checks_the_shipped_catalog_on_the_hub(hub: HubStandIn) -> None:
    settings = load_settings(env={}, overrides={"inference": {"provider": "hf-inference"}})
    stdout = io.StringIO()
    args = parse(["catalog", "show", "object-detection", "--limit", "3", "--hub-endpoint", hub.url])
    assert await main(args, settings, stdout=stdout) == 0
    text = stdout.getvalue()
    assert "2023-03" in text
    rows = [line for line in text.splitlines() if "served:" in line]
    assert ["served: yes" in r for r in rows] == [True, False, False]
    assert "providers: hf-inference (Hub now)" in rows[0]
    assert "providers: fal-ai (Hub now)" in rows[1]  # staging on hf-inference does not count

    stdout = io.StringIO()
    assert await main(parse(["catalog", "show", "canny-control"]), settings, stdout=stdout) == 0
    assert "locally" in stdout.getvalue()
    with pytest.raises(InputError, match="not a known task"):
        await main(parse(["catalog", "show", "juggling"]), settings, stdout=stdout)


def test_unreachable_hub_is_said_and_not_waited_for_per_model(tmp_path):
    import os
    import subprocess
    import sys
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_"))}
    env.update({"HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data"), "HF_TOKEN": "hf_test_token"})
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "hugginggpt", "catalog", "show", "image-classification", "--limit", "8",
                        "--hub-endpoint", "http://127.0.0.1:9"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    assert "could not be reached" in p.stdout and "served: no" not in p.stdout and "served: ?" in p.stdout
    assert took < 30  # one failed look-up, not eight timeouts in a row
