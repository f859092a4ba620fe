"""Discord sharding (issue 11) with real processes: two ``hugginggpt discord --sandbox`` processes,
one per shard (``--shard-ids 0 --shard-count 2`` and ``--shard-ids 1 --shard-count 2``), on one
shared store, against the stand-in Discord (which routes a guild's events to shard
``(guild_id >> 22) % 2`` only, like Discord).

Assertions are about what a user sees: one "thinking" deferral, one thread, one progress message
per request, the pictures (decoded with PIL). Which process acted is read from each process's
own log on stderr (``-v``).

The store is a parameter (:class:`SharedStore`): the SQLite data dir that all processes share
today, and PostgreSQL (``[storage] database_url``) on the session's throwaway server.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from sandbox.discord_messages import StoredMessage
from sandbox.discord_server import StandinDiscord

ROOT = Path(__file__).resolve().parents[1]
MEDIA = Path(__file__).parent / "fixtures" / "media"
SHARDS = 2
SETTLE = 0.7
"""Seconds to wait after an answer for a duplicate one (both processes get a replay at once)."""


@dataclass
class SharedStore:
    """Where every bot process of a test keeps its state: a data dir (logs, media and, without
    ``database_url``, the SQLite database) and optionally a PostgreSQL ``database_url``."""

    data_dir: Path
    database_url: str | None = None

    def env(self) -> dict[str, str]:
        """The environment variables that point a process at this store."""
        out = {"HUGGINGGPT_STORAGE__DATA_DIR": str(self.data_dir)}
        if self.database_url:
            out["HUGGINGGPT_STORAGE__DATABASE_URL"] = self.database_url
        return out


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> SharedStore:
    if request.param == "postgresql":
        return SharedStore(tmp_path / "data", request.getfixturevalue("postgres_url"))
    return SharedStore(tmp_path / "data")


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_", "DISCORD_", "SLACK_", "DATABASE_URL"))}
    env.update({"PYTHONPATH": str(ROOT), "HF_HUB_DISABLE_TELEMETRY": "1", **extra})
    return env


class BotProcess:
    """One ``hugginggpt -v discord --sandbox --shard-ids I --shard-count N`` process (in its own
    process group) whose stderr, the log with ``-v``, goes to a file."""

    def __init__(self, d: StandinDiscord, store: SharedStore, workdir: Path, shard: int, count: int = SHARDS,
                 backends: dict[str, str] | None = None) -> None:
        self.d, self.store, self.shard, self.count = d, store, shard, count
        self.backends = backends  # HUGGINGGPT_* variables of a sandbox in the test process, instead of --sandbox
        self.workdir = workdir / f"shard-{shard}"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc: asyncio.subprocess.Process | None = None
        self.logs: list[Path] = []

    async def start(self) -> "BotProcess":
        log_path = self.workdir / f"stderr-{len(self.logs)}.log"
        self.logs.append(log_path)
        with log_path.open("wb") as err:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "hugginggpt", "-v", "discord", *([] if self.backends else ["--sandbox"]),
                "--grace", "0", "--shard-ids", str(self.shard), "--shard-count", str(self.count),
                cwd=self.workdir, stdout=asyncio.subprocess.DEVNULL, stderr=err, start_new_session=True,
                env=_env({"DISCORD_BOT_TOKEN": self.d.token, "HUGGINGGPT_DISCORD__API_BASE_URL": self.d.api_base,
                          "HUGGINGGPT_DISCORD__GATEWAY_URL": self.d.gateway_url, **(self.backends or {}),
                          **self.store.env()}))
        return self

    @property
    def log(self) -> str:
        """Everything this process (all its starts) logged so far."""
        return "".join(p.read_text(errors="replace") for p in self.logs if p.exists())

    async def ready(self, timeout: float = 40) -> None:
        """Wait until the current start logged that its shard is ready."""
        assert self.proc is not None
        needle = f"ready (process {self.proc.pid}): shard {self.shard} of {self.count}"
        deadline = time.monotonic() + timeout
        while needle not in self.logs[-1].read_text(errors="replace"):
            if self.proc.returncode is not None or time.monotonic() > deadline:
                raise AssertionError(f"shard {self.shard} did not start (exit {self.proc.returncode}):\n{self.log[-3000:]}")
            await asyncio.sleep(0.1)

    async def stop(self) -> int | None:
        """SIGTERM the process group, as a service manager does; SIGKILL after 15 s."""
        if self.proc is None or self.proc.returncode is not None:
            return None if self.proc is None else self.proc.returncode
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.proc.wait(), 15)
        except asyncio.TimeoutError:
            self.kill()
            return await self.proc.wait()

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)


@contextlib.asynccontextmanager
async def two_shards(store: SharedStore, tmp_path: Path) -> AsyncIterator[tuple[StandinDiscord, list[BotProcess],
                                                                               list[tuple[int, int]]]]:
    """The stand-in Discord with one guild on each of 2 shards, and a ready bot process per shard.
    Yields ``(discord, [process of shard 0, of shard 1], [(guild id, channel id) of shard 0, of 1])``;
    the processes are killed (process groups) whatever happens."""
    async with StandinDiscord(MEDIA) as d:
        d.shard_count = SHARDS
        guilds = [d.add_guild(shard=i, shard_count=SHARDS) for i in range(SHARDS)]
        procs = [BotProcess(d, store, tmp_path, i) for i in range(SHARDS)]
        try:
            await asyncio.gather(*(p.start() for p in procs))
            await asyncio.gather(*(p.ready() for p in procs))
            yield d, procs, guilds
        finally:
            await asyncio.gather(*(p.stop() for p in procs))
            for p in procs:
                p.kill()


# ------------------------------------------------------------------------------------------------
# what a user sees


def _runs(d: StandinDiscord, thread_id: int) -> list[StoredMessage]:
    """The progress messages of the runs in a thread (one per request answered)."""
    return [m for m in d.bot_messages(thread_id) if m.text.startswith("🧭")]


def _ended(m: StoredMessage) -> bool:
    return "🏁 Finished" in m.text or "⚠️" in m.text or "⏹️ Stopped" in m.text


async def _thread_of(d: StandinDiscord, iid: int) -> int:
    def find() -> int | None:
        return next((int(m.payload["thread"]["id"]) for m in d.interaction_messages(iid) if "thread" in m.payload), None)
    return await d.wait_for(find, 30)


async def _answered(d: StandinDiscord, thread_id: int, runs: int) -> list[StoredMessage]:
    """Wait until ``runs`` runs ended in the thread and their files are posted; then a moment more,
    so that a second (duplicate) answer would have shown up too. Returns the bot's messages."""
    await d.wait_for(lambda: len([m for m in _runs(d, thread_id) if _ended(m)]) >= runs
                     and len([m for m in d.bot_messages(thread_id) if m.files]) >= runs, 40)
    await asyncio.sleep(SETTLE)
    return d.bot_messages(thread_id)


def _image(m: StoredMessage) -> Image.Image:
    im = Image.open(io.BytesIO(m.files[0].data))
    im.load()
    return im


def _is_grayscale(im: Image.Image) -> bool:
    px = im.convert("RGB").resize((64, 64)).tobytes()
    return all(abs(px[i] - px[i + 1]) <= 8 and abs(px[i + 1] - px[i + 2]) <= 8 for i in range(0, len(px), 3))


def _callbacks(d: StandinDiscord, iid: int) -> int:
    """How many times a process answered the interaction's callback (a user sees the first)."""
    return sum(1 for c in d.calls if c.method == "POST" and c.path.startswith(f"/api/v10/interactions/{iid}/"))


async def _ask(d: StandinDiscord, prompt: str, channel_id: int) -> tuple[int, int]:
    """``/ask`` in a channel, answered in a new thread; returns (interaction id, thread id)."""
    iid = int((await d.interact(prompt, channel_id=channel_id))["id"])
    thread_id = await _thread_of(d, iid)
    await _answered(d, thread_id, 1)
    return iid, thread_id


# ------------------------------------------------------------------------------------------------
# tests


async def test_two_shard_processes_answer_each_event_once_and_threads_survive_a_restart(store, tmp_path):
    async with two_shards(store, tmp_path) as (d, procs, guilds):
        # 1. a request in each guild is answered once, by the process of the guild's shard
        asked = await asyncio.gather(*(_ask(d, f"Generate an image of a cat, please ({i})", guilds[i][1])
                                       for i in range(SHARDS)))
        for shard, (iid, thread_id) in enumerate(asked):
            assert d.deliveries[iid] == [(shard, SHARDS)]  # Discord sent it to that shard's session only
            assert _callbacks(d, iid) == 1 and len(_runs(d, thread_id)) == 1
            assert len([t for t in d.threads() if d.guild_of(int(t["id"])) == guilds[shard][0]]) == 1
            assert f"took interaction {iid} in guild {guilds[shard][0]} on shard {shard} of 2" in procs[shard].log
            assert str(iid) not in procs[1 - shard].log

        # 2. a shard handover: both processes get guild 0's events; the same follow-up reaches both
        _, thread_id = asked[0]
        generated = _image(next(m for m in d.bot_messages(thread_id) if m.files))
        await d.hand_over(guilds[0][0])
        message = await d.send_message("now make it black and white", channel_id=thread_id, everywhere=True)
        msgs = await _answered(d, thread_id, 2)
        await d.send_message("", channel_id=thread_id, payload=message, everywhere=True)  # and once more
        await asyncio.sleep(SETTLE)
        assert len(_runs(d, thread_id)) == 2 and d.bot_messages(thread_id) == msgs
        pictures = [_image(m) for m in msgs if m.files]
        assert len(pictures) == 2 and _is_grayscale(pictures[1]) and pictures[1].size == generated.size
        mid = message["id"]
        took = [p for p in procs if f"took message {mid}" in p.log]
        assert len(took) == 1, [p.log[-2000:] for p in procs]
        assert f"message {mid} already taken by another process" in procs[1 - procs.index(took[0])].log

        # 3. the same /ask reaching both processes is answered once too
        await d.hand_over(guilds[1][0])
        payload = d.interaction_payload("Generate an image of a dog", channel_id=guilds[1][1])
        await d.send_interaction(payload, everywhere=True)
        again = int(payload["id"])
        dog_thread = await _thread_of(d, again)
        await _answered(d, dog_thread, 1)
        assert sorted(d.deliveries[again]) == [(0, 2), (1, 2)]
        assert _callbacks(d, again) == 1 and len(_runs(d, dog_thread)) == 1
        assert sum(f"took interaction {again}" in p.log for p in procs) == 1

        # 4. shard 1's process restarts; a follow-up in its guild's thread continues the conversation
        _, thread_id = asked[1]
        first = d.bot_messages(thread_id)
        generated = _image(next(m for m in first if m.files))
        assert not _is_grayscale(generated)
        assert await procs[1].stop() == 0
        await procs[1].start()
        await procs[1].ready()
        assert d.sessions_of((1, SHARDS)) == 2 and d.sessions_of((0, SHARDS)) == 1
        message = await d.send_message("now make it black and white", channel_id=thread_id)
        msgs = await _answered(d, thread_id, 2)
        later = [m for m in msgs if m.id > first[-1].id]
        edited = _image(next(m for m in later if m.files))  # the first turn's picture, in gray
        assert _is_grayscale(edited) and edited.size == generated.size
        assert len(_runs(d, thread_id)) == 2
        assert f"took message {message['id']}" in procs[1].logs[-1].read_text()
        assert message["id"] not in procs[0].log


async def test_a_killed_shard_process_leaves_its_thread_told_by_the_other(store, tmp_path):
    """kill -9 of the process running a request: within the lease (4 s here) the other process
    marks the turn interrupted and says so in the thread; the other guild's thread is untouched."""
    from sandbox import Sandbox

    async with Sandbox() as sandbox, StandinDiscord(MEDIA) as d:
        sandbox.inference.latency["text-to-image"] = 60.0
        backends = {f"HUGGINGGPT_{section.upper()}__{key.upper()}": "" if value is None else str(value)
                    for section, values in sandbox.overrides().items() for key, value in values.items()}
        backends["HUGGINGGPT_STORAGE__LEASE_SECONDS"] = "4"
        d.shard_count = SHARDS
        guilds = [d.add_guild(shard=i, shard_count=SHARDS) for i in range(SHARDS)]
        procs = [BotProcess(d, store, tmp_path, i, backends=backends) for i in range(SHARDS)]
        try:
            await asyncio.gather(*(p.start() for p in procs))
            await asyncio.gather(*(p.ready() for p in procs))
            iid = int((await d.interact("Generate an image of a cat", channel_id=guilds[1][1]))["id"])
            thread_id = await _thread_of(d, iid)
            deadline = time.monotonic() + 20
            # the run is in flight on shard 1's process: its progress message is up and its turn began
            # (the planner was asked; the progress message alone can precede the turn's start)
            while not (_runs(d, thread_id) and sandbox.controller.calls("task-planning")):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            procs[1].kill()
            deadline = time.monotonic() + 30
            while not [m for m in d.bot_messages(thread_id) if "stopped unexpectedly" in (m.content or "")]:
                assert time.monotonic() < deadline, procs[0].log[-3000:]
                await asyncio.sleep(0.1)
            assert "marked 1 turn(s) of gone processes as interrupted" in procs[0].log
            assert not [t for t in d.threads() if d.guild_of(int(t["id"])) == guilds[0][0]]  # nothing else touched
        finally:
            await asyncio.gather(*(p.stop() for p in procs))
            for p in procs:
                p.kill()


BAD_OPTIONS = [
    (["--shard-ids", "0-3"], "--shard-ids needs --shard-count"),
    (["--shard-ids", "0-8", "--shard-count", "8"], "Shard 8 is outside 0-7"),
    (["--shard-ids", "3-1", "--shard-count", "8"], "'3-1' is not one"),
    (["--shard-ids", "0,,2", "--shard-count", "8"], "--shard-ids takes ids and ranges such as 0-3 or 0,2,5"),
    (["--shard-count", "0"], "--shard-count must be a whole number of at least 1"),
]


async def _discord_command(args: list[str], workdir: Path) -> tuple[int, str]:
    workdir.mkdir(parents=True)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "hugginggpt", "discord", *args, cwd=workdir, start_new_session=True,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        env=_env({"DISCORD_BOT_TOKEN": "MTIz.fake.token-value", "HUGGINGGPT_STORAGE__DATA_DIR": str(workdir / "data"),
                  "HUGGINGGPT_DISCORD__API_BASE_URL": "http://127.0.0.1:9/api/v10"}))
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    return proc.returncode or 0, err.decode()


async def test_bad_shard_options_are_one_sentence_and_exit_2(tmp_path: Path) -> None:
    import argparse

    from hugginggpt import discord as discord_cmd
    from hugginggpt.common import exit_status
    from bot.errors import ConfigError
    from bot.settings import load_settings

    # as a real process: exit 2, one sentence on stderr, and a line in the operator's log
    args, sentence = BAD_OPTIONS[0]
    code, err = await _discord_command(args, tmp_path / "process")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("Error: ") and sentence in lines[0], err
    assert sentence in (tmp_path / "process" / "data" / "logs" / "hugginggpt.log").read_text()
    # every other bad value, through the command's own entry point (before any connection is tried)
    parser = argparse.ArgumentParser()
    discord_cmd.add_parser(parser.add_subparsers(dest="command"))
    settings = load_settings(env={}, overrides={"storage": {"data_dir": str(tmp_path / "data")},
                                                "discord": {"token": "MTIz.fake.token-value",
                                                            "api_base_url": "http://127.0.0.1:9/api/v10"}})
    for args, sentence in BAD_OPTIONS[1:]:
        with pytest.raises(ConfigError) as caught:
            await discord_cmd.main(parser.parse_args(["discord", *args]), settings)
        said = caught.value.user_message
        assert sentence in said and "\n" not in said and said.endswith(".") and exit_status(caught.value) == 2, said
    assert not (tmp_path / "data").exists()  # refused before the store was opened
