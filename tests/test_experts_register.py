"""``hugginggpt experts launch`` registers the server it started with every running bot sharing
its store (SQLite and PostgreSQL): the launch (a real subprocess, huggingface_hub's ``HfApi``
inside) runs against the Jobs stand-in (:mod:`sandbox.hf_jobs`), whose job starts a real
``hugginggpt experts serve`` process behind its proxy with the job's secret key; a real
:class:`bot.service.Service` on the sandbox's stand-ins, started before the launch, routes to it
without a restart, and no longer once the launch stopped it. The key is never shown nor logged."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from benchmarks.harness import tinymodels
from benchmarks.harness.realparts import free_port
from bot.incoming import ConversationKey, Message, Requester
from bot.service import Service
from bot.settings import load_settings
from bot.store.sql import experts
from pipeline.catalog.servers import ExpertServers
from sandbox.hf_jobs import JobsApi
from tests.conftest import media_file
from tests.standins.expert_server import ExpertServerStandIn, model

VIT = "my-team/vit-pets"


@pytest.fixture(scope="module")
def vit_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("vit") / "vit-pets"
    tinymodels.vit(folder, labels=("cat", "dog", "rocket", "coffee"))
    return folder


@pytest.fixture(params=["sqlite", "postgres"])
def storage(request, tmp_path) -> dict:
    """``[storage]`` of the bot and of the launch: the same data directory, and on PostgreSQL the same database."""
    out = {"data_dir": str(tmp_path / "data")}
    if request.param == "postgres":
        out["database_url"] = request.getfixturevalue("postgres_url")
    return out


def container(tmp_path: Path, folder: Path):
    """What the stand-in's job runs: a real expert server serving the tiny checkpoint, its
    ``api_key`` the job's secret (as ``hugginggpt experts serve`` reads it in the job)."""
    (tmp_path / "experts.toml").write_text(f'[local_models]\n"{VIT}" = "{folder}"\n')

    async def start(secrets: dict[str, str]):
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "HF_"))}
        env.update(HF_HUB_CACHE=str(tmp_path / "empty-cache"), HF_HUB_OFFLINE="1",
                   HUGGINGGPT_EXPERTS_API_KEY=secrets["HUGGINGGPT_EXPERTS_API_KEY"],
                   HUGGINGGPT_STORAGE__DATA_DIR=str(tmp_path / "job-data"))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "hugginggpt", "experts", "serve", "--config", "experts.toml", "--port", str(port),
            "--device", "cpu", cwd=tmp_path, env=env, stdout=asyncio.subprocess.DEVNULL,
            stderr=(tmp_path / "server.log").open("wb"))

        async def stop() -> None:
            if proc.returncode is None:
                proc.terminate()
                await proc.wait()
        return f"http://127.0.0.1:{port}", stop
    return start


async def start_launch(api: JobsApi, storage: dict, *options: str):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "HF_"))}
    env.update(HF_ENDPOINT=api.url, HF_HUB_DISABLE_TELEMETRY="1", HF_TOKEN=api.token,
               HUGGINGGPT_STORAGE__DATA_DIR=storage["data_dir"])
    if "database_url" in storage:
        env["HUGGINGGPT_STORAGE__DATABASE_URL"] = storage["database_url"]
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "hugginggpt", "-v", "experts", "launch", "--image", "registry.example/experts:1",
        "--flavor", "a10g-small", "--poll", "0.2", "--idle-minutes", "10", "--max-minutes", "10", *options, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def read_until(stream: asyncio.StreamReader, wanted: str, timeout: float) -> str:
    seen = ""
    end = time.monotonic() + timeout
    while wanted not in seen:
        line = await asyncio.wait_for(stream.readline(), max(0.1, end - time.monotonic()))
        if not line:
            break
        seen += line.decode()
    return seen


async def classify(service: Service, n: int) -> dict:
    key = ConversationKey("test", "w", "c", f"t{n}")
    message = Message("Classify this photo", [media_file("chelsea.png")], key=key, who=Requester("terminal", "u1"))
    events = [e async for e in service.handle(message)]
    return events[-1].record.to_json()


@pytest.mark.slow
async def test_a_launched_server_is_registered_used_without_restart_and_dropped_when_stopped(
        sandbox, tmp_path, vit_folder, storage, caplog):
    caplog.set_level(logging.DEBUG)
    overrides = sandbox.overrides(storage["data_dir"])
    overrides["storage"] = dict(storage)
    overrides["inference"].update(experts_ttl=0.5, selection="top")
    service = await Service.create(load_settings(env={}, overrides=overrides))
    try:
        before = await classify(service, 0)
        async with JobsApi(container=container(tmp_path, vit_folder)) as api:
            launch = await start_launch(api, storage)
            said = await read_until(launch.stdout, "registered with the bot", 240)
            [job] = api.jobs.values()
            url = f"{api.url}/proxy/{job.id}/8081"
            assert f"The expert server answers at {url} and is registered with the bot until this command " \
                   "stops it" in said, said + (tmp_path / "server.log").read_text()[-2000:]
            during = await classify(service, 1)
            launch.send_signal(signal.SIGINT)
            out, err = await asyncio.wait_for(launch.communicate(), 60)
            assert launch.returncode == 0, err.decode()
            await asyncio.sleep(0.6)  # the registry's read is reused for experts_ttl seconds
            after = await classify(service, 2)
        key = job.spec["secrets"]["HUGGINGGPT_EXPERTS_API_KEY"]
    finally:
        await service.close()
    [sel] = before["selections"].values()
    assert sel["where"].startswith("gateway ")  # nothing registered yet: the sandbox's gateway
    [sel] = during["selections"].values()
    assert (sel["model"], sel["where"]) == (VIT, f"local {url}") and during["status"] == "ok"
    [res] = during["results"].values()
    assert res["where"] == f"local {url}" and res["status"] == "ok"
    [sel] = after["selections"].values()
    assert sel["model"] != VIT and sel["where"].startswith("gateway ")
    shown = said + out.decode() + err.decode()
    assert f"Stopped on request. Job {job.id} is cancelled." in shown and api.cancelled == [job.id]
    logged = caplog.text + (Path(storage["data_dir"]) / "logs" / "hugginggpt.log").read_text()  # the launch's log file
    assert key not in shown and key not in logged  # the secret is neither shown nor logged
    assert "Traceback" not in shown


async def test_an_expired_or_removed_record_is_not_asked(new_store, caplog):
    caplog.set_level(logging.DEBUG)
    store = new_store()
    await store.open()
    with ExpertServerStandIn([model("google/vit-base-patch16-224", "image-classification")]) as live, \
            ExpertServerStandIn([model("microsoft/resnet-50", "image-classification")]) as old:
        servers = ExpertServers([], ttl=0, timeout=3, registry=store.live_experts)
        try:
            await experts.register(store.database, live.url, "live-key-0123456789", "job-live", time.time() + 600)
            await experts.register(store.database, old.url, "old-key-0123456789", "job-old", time.time() + 0.5)
            assert [x.url for x in await servers.listings()] == [old.url, live.url]  # newest first
            await asyncio.sleep(0.6)  # the second record expires (its launch died: nobody removed it)
            listed = await servers.models_for("image-classification")
            assert list(listed) == ["google/vit-base-patch16-224"] and servers.keys == {live.url: "live-key-0123456789"}
            asked = len(old.requests)
            assert await experts.unregister(store.database, live.url, "job-other") is False  # another launch's record stays
            assert await experts.unregister(store.database, live.url, "job-live") is True
            assert await servers.listings() == [] and servers.keys == {} and len(old.requests) == asked
            assert [r.authorization for r in live.requests] == ["Bearer live-key-0123456789"] * len(live.requests)
        finally:
            await servers.aclose()
            await store.close()
    assert "live-key" not in caplog.text and "old-key" not in caplog.text
    assert f"expert server {live.url} is no longer registered" in caplog.text


async def test_a_registered_url_that_is_not_an_http_base_url_is_left_out(new_store, caplog):
    store = new_store()
    await store.open()
    servers = ExpertServers([], ttl=0, timeout=3, registry=store.live_experts)
    try:
        for url in ("file:///etc/passwd", "http://host/models?x=1", "http://" + "a" * 3000):
            await experts.register(store.database, url, "k", "job", time.time() + 600)
        assert await servers.listings() == [] and servers.urls == []
    finally:
        await servers.aclose()
        await store.close()
    assert "is not an http(s) base URL; it is left out" in caplog.text


async def test_catalog_show_coverage_and_doctor_see_a_registered_server_and_never_its_key(tmp_path):
    import argparse
    import io

    from bot.store.sql.experts import database_of
    from hugginggpt.catalog import add_parser, main
    from hugginggpt.doctor import check_experts
    from tests.test_hybrid import DEPTH, dead_url

    settings = load_settings(env={}, overrides={"inference": {"base_url": dead_url()},
                                                "storage": {"data_dir": str(tmp_path / "data")}})
    parser = argparse.ArgumentParser(prog="hugginggpt")
    add_parser(parser.add_subparsers(dest="command"))
    key = "registered-key-5f1e2d3c4b"
    with ExpertServerStandIn([model(DEPTH, "depth-estimation")]) as es:
        out = io.StringIO()
        assert await main(parser.parse_args(["catalog", "show", "depth-estimation"]), settings, stdout=out) == 0
        assert es.url not in out.getvalue()  # nothing registered (and no store created to say so)
        assert not (tmp_path / "data" / "conversations.sqlite3").exists()
        database = database_of(settings.storage)
        await database.open()
        await experts.register(database, es.url, key, "job-1", time.time() + 600)
        await database.close()
        show, coverage = io.StringIO(), io.StringIO()
        assert await main(parser.parse_args(["catalog", "show", "depth-estimation"]), settings, stdout=show) == 0
        assert await main(parser.parse_args(["catalog", "show", "--coverage"]), settings, stdout=coverage) == 0
        check = await check_experts(settings.inference, 5, settings.storage)
        sent = {r.authorization for r in es.requests}
    assert f"{DEPTH}  loaded, 1 MB  where: local {es.url} (cpu)" in show.getvalue()
    [row] = [line for line in coverage.getvalue().splitlines() if line.startswith("depth-estimation ")]
    assert f"expert server: {DEPTH} on local {es.url}" in row
    assert (check.status, check.message) == ("ok", f"1 models at {es.url}.")
    assert sent == {f"Bearer {key}"}
    assert key not in show.getvalue() + coverage.getvalue() + check.message


async def test_at_most_the_newest_registered_servers_are_read(new_store):
    store = new_store()
    await store.open()
    try:
        for n in range(experts.MAX_REGISTERED + 8):
            await experts.register(store.database, f"http://127.0.0.1:{20000 + n}", "k", f"job-{n}", time.time() + 600)
        read = await store.live_experts()
    finally:
        await store.close()
    assert len(read) == experts.MAX_REGISTERED
    assert {r.url for r in read} == {f"http://127.0.0.1:{20000 + n}" for n in range(8, experts.MAX_REGISTERED + 8)}
