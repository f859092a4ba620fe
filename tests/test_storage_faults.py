"""Storage faults under a running ``hugginggpt serve``: a full disk (a small tmpfs the test mounts)
and a database corrupted under the server answer 503 ``storage_unavailable`` with a sentence on
every endpoint, streamed or not, with one log line and no traceback; ``/readyz`` says what is wrong
without paths; freeing the disk recovers."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import subprocess
from pathlib import Path

import aiohttp
import openai
import pytest

from benchmarks.harness.http_server import KEY, Served, image_message

BODY = {"model": "hugginggpt", "messages": [{"role": "user", "content": "Say hello"}]}


@contextlib.contextmanager
def small_disk(where: Path, size: str = "8m"):
    """A tmpfs of ``size`` mounted at ``where`` (root only; the test is skipped otherwise)."""
    where.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    """Write a file until the disk is full; returns it (delete it to free the disk)."""
    filler = disk / "filler"
    with open(filler, "wb") as f:
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 65536)
                f.flush()
    return filler


def tracebacks(caplog) -> list[str]:
    """Log records of the server with a traceback: ours, uvicorn's, and asyncio's "never
    retrieved" reports of the server's tasks (a test client's leftovers do not count)."""
    return [r.getMessage() for r in caplog.records
            if (r.exc_info or "Traceback" in r.getMessage() or "never retrieved" in r.getMessage())
            and "httpx" not in r.getMessage()]


async def test_full_disk_is_503_everywhere_then_recovers(sandbox, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    with small_disk(tmp_path / "disk") as disk:
        served = await Served(sandbox, disk / "data", {"api_keys": [KEY], "ready_min_free_bytes": 1 << 20}).start()
        try:
            filler = fill(disk)
            client = served.client()
            with pytest.raises(openai.APIStatusError) as e:  # an upload, stored before the run
                await client.chat.completions.create(model="hugginggpt", messages=[
                    image_message("Detect the objects in this photo", "chelsea.png")])
            assert e.value.status_code == 503 and e.value.body["code"] == "storage_unavailable"
            assert "storage is full" in e.value.body["message"] and str(disk) not in e.value.body["message"]
            with pytest.raises(openai.APIError) as e:  # refused before the stream starts, or inside it
                stream = await client.chat.completions.create(model="hugginggpt", stream=True, messages=[
                    image_message("Detect the objects in this photo", "chelsea.png")])
                async for _ in stream:
                    pass
            assert "storage is full" in str(e.value)
            async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEY}"}) as http:
                async with http.post(served.url + "/hugginggpt", json={"messages": [{"role": "user", "content": [
                        {"type": "text", "text": "Detect the objects"}]}]}) as r:
                    assert r.status in (200, 503)  # a text-only turn may still fit in SQLite's free pages
                async with http.get(served.url + "/readyz") as r:
                    body = await r.json()
                    assert r.status == 503 and "MiB free" in " ".join(body["problems"])
                    assert str(disk) not in await r.text()
            assert tracebacks(caplog) == []
            filler.unlink()  # the operator frees space
            async with aiohttp.ClientSession() as http:
                async with http.get(served.url + "/readyz") as r:
                    assert r.status == 200, await r.text()
            reply = await client.chat.completions.create(model="hugginggpt", messages=[
                image_message("Detect the objects in this photo", "chelsea.png")])
            assert "/v1/files/" in reply.choices[0].message.content
            await client.close()  # inside the test's event loop (else its connections close after it, as errors)
        finally:
            await served.close()


async def test_database_corrupted_under_the_server_is_not_ready(sandbox, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    served = await Served(sandbox, tmp_path / "data", {"api_keys": [KEY]}).start()
    try:
        async with served.client() as client:
            await client.chat.completions.create(**BODY)  # some turns stored
        db = tmp_path / "data" / "conversations.sqlite3"
        with contextlib.closing(sqlite3.connect(db)) as conn:  # the pages into the file, as SQLite does by itself
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = db.stat().st_size
        with open(db, "r+b") as f:  # another program scribbles over every page but the header
            f.seek(100)
            f.write(os.urandom(size - 100))
        async with aiohttp.ClientSession() as http:
            async with http.get(served.url + "/readyz") as r:
                text = await r.text()
                assert r.status == 503 and "conversation" in text and str(tmp_path) not in text
        async with served.client() as client:
            with pytest.raises(openai.APIStatusError) as e:
                await client.chat.completions.create(**BODY)
        assert e.value.status_code == 503 and e.value.body["code"] == "storage_unavailable"
        assert str(tmp_path) not in e.value.body["message"]
        assert tracebacks(caplog) == []
    finally:
        await served.close()


async def test_aborted_upload_is_one_log_line(sandbox, tmp_path, caplog):
    import asyncio

    caplog.set_level(logging.INFO)
    served = await Served(sandbox, tmp_path / "data", {"api_keys": [KEY]}).start()
    try:
        host, port = served.url.removeprefix("http://").split(":")
        for _ in range(3):
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write((f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {KEY}\r\n"
                          "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n").encode()
                         + b'{"model": "hugginggpt", "messages": [' + b" " * 50_000)
            await writer.drain()
            writer.close()  # the client goes away mid-upload
            await writer.wait_closed()
        await asyncio.sleep(0.5)
        lines = [r for r in caplog.records if "incomplete_body" in r.getMessage() or r.levelno >= logging.ERROR]
        assert len(lines) == 3 and all("/v1/chat/completions -> 400 incomplete_body" in r.getMessage() for r in lines)
        assert tracebacks(caplog) == []
        assert sandbox.controller.requests == []
    finally:
        await served.close()


def test_bots_show_a_storage_failure_without_the_servers_paths(tmp_path):
    from adapters.progress import Progress
    from adapters.progress import record_error, user_sentence
    from bot.errors import StorageError
    from pipeline.types import Done, RunRecord

    db = tmp_path / "data" / "conversations.sqlite3"
    full = StorageError(f"The conversation store {db} cannot be written while saving a turn: the disk is full.")
    assert user_sentence(full) == "The server's storage is full; try again later (the operator has been told)."
    record = RunRecord(request="hi", status="error", error=full.user_message, failure=full)
    assert str(tmp_path) not in (record_error(record) or "")
    progress = Progress()
    progress.apply(Done(record))
    assert progress.error == user_sentence(full)  # what Discord's and Slack's status messages show
