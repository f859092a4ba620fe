"""Several ``hugginggpt slack --mode http`` processes on one store, as an operator runs them behind
a load balancer; used by tests/test_slack_replicas.py and benchmarks/bench_scale.py (the replicas are the product
itself, so this is a harness, not a stand-in).

Each replica is a real subprocess (``python -m hugginggpt -v slack --mode http``) in its own process
group, pointed at the stand-in Slack (``--api-url``) and at backends given as settings (the
sandbox stand-ins running in the caller's process, so one latency knob serves every replica). The
store is a parameter: ``{"data_dir": ...}`` for a shared SQLite data dir, plus
``{"database_url": ...}`` for PostgreSQL; each key becomes ``HUGGINGGPT_STORAGE__KEY``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks.harness.realparts import free_port
from sandbox.slack_api import SlackStandIn, signed_headers

ROOT = Path(__file__).resolve().parents[2]
SECRET = "replicas-signing-secret"
CHANNEL = "C0REPLICAS"


def replica_env(settings: dict[str, dict[str, Any]], slack: SlackStandIn) -> dict[str, str]:
    """The environment of a replica: ``settings`` (section -> key -> value; ``None`` becomes an
    empty value, i.e. unset) as ``HUGGINGGPT_SECTION__KEY`` variables, the stand-in's credentials,
    and nothing of the caller's own configuration."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_TOKEN", "SLACK_", "DATABASE_URL", "DISCORD_"))}
    env["PYTHONPATH"] = str(ROOT)
    for section, values in settings.items():
        for key, value in values.items():
            env[f"HUGGINGGPT_{section.upper()}__{key.upper()}"] = "" if value is None else str(value)
    env["SLACK_BOT_TOKEN"] = slack.bot_token
    env["SLACK_SIGNING_SECRET"] = SECRET
    return env


class Replica:
    """One ``hugginggpt slack --mode http`` process.

    Attributes:
        index: 0-based number; port: its HTTP port; url: ``http://127.0.0.1:port``;
        log: the file its stdout and stderr (``-v`` log lines) go to; proc: the process.
    """

    def __init__(self, index: int, root: Path) -> None:
        self.index = index
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = root / f"replica-{index}.log"
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``, as an nginx upstream ``server``."""
        return f"127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the replica (SIGTERM: drain; SIGKILL: the whole process group)."""
        if self.proc is None or self.proc.returncode is not None:
            return
        if sig == signal.SIGKILL:
            os.killpg(self.proc.pid, signal.SIGKILL)
        else:
            self.proc.send_signal(sig)

    async def wait(self, timeout: float) -> int:
        """Wait for the process to exit; its exit status."""
        assert self.proc is not None
        return await asyncio.wait_for(self.proc.wait(), timeout)


class Fleet:
    """``n`` replicas on one store, each with ``--grace grace``.

    Args:
        root: a directory for the replicas' logs (their working directory too).
        slack: the running stand-in Slack.
        settings: settings shared by every replica (section -> key -> value), e.g. the sandbox's
            ``overrides()`` plus ``{"storage": {"data_dir": ..., "database_url": ...}}``.
        n: how many replicas; grace: their ``--grace`` seconds (a list: one per replica).
    """

    def __init__(self, root: Path, slack: SlackStandIn, settings: dict[str, dict[str, Any]], *, n: int = 3,
                 grace: float | list[float] = 30.0) -> None:
        self.root = Path(root)
        self.slack = slack
        self.env = replica_env(settings, slack)
        self.replicas = [Replica(i, self.root) for i in range(n)]
        self.graces = list(grace) if isinstance(grace, list) else [grace] * n
        self.session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Fleet:
        self.root.mkdir(parents=True, exist_ok=True)
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        try:
            await asyncio.gather(*(self.start(r) for r in self.replicas))
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        for r in self.replicas:
            r.signal(signal.SIGKILL)
        for r in self.replicas:
            if r.proc is not None and r.proc.returncode is None:
                await r.proc.wait()
        if self.session is not None:
            await self.session.close()

    async def start(self, r: Replica, timeout: float = 30.0) -> None:
        """Start replica ``r`` and wait until its ``/readyz`` answers 200.

        Raises:
            RuntimeError: it exited or was not ready in ``timeout`` seconds (with its log).
        """
        argv = [sys.executable, "-m", "hugginggpt", "-v", "slack", "--mode", "http", "--host", "127.0.0.1",
                "--port", str(r.port), "--api-url", self.slack.api_url, "--grace", str(self.graces[r.index])]
        with open(r.log, "ab") as out:
            r.proc = await asyncio.create_subprocess_exec(*argv, cwd=self.root, env=self.env, stdin=asyncio.subprocess.DEVNULL,
                                                          stdout=out, stderr=out, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if r.proc.returncode is not None:
                raise RuntimeError(f"replica {r.index} exited with {r.proc.returncode}: {r.log_text()[-3000:]}")
            if await self.ready(r) == 200:
                return
            await asyncio.sleep(0.1)
        raise RuntimeError(f"replica {r.index} not ready within {timeout} s: {r.log_text()[-3000:]}")

    async def ready(self, r: Replica) -> int | None:
        """The status of ``GET /readyz`` on ``r`` (``None``: no connection)."""
        assert self.session is not None
        try:
            async with self.session.get(r.url + "/readyz", timeout=aiohttp.ClientTimeout(total=5)) as resp:
                await resp.read()
                return resp.status
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return None

    def mention(self, text: str, *, channel: str = CHANNEL, user: str = "U1") -> tuple[dict, str]:
        """A user's ``@bot text`` in ``channel`` (stored in the stand-in) and its ``app_mention``
        Events API body; returns ``(body, ts)``; the thread is ``ts``."""
        msg = self.slack.add_user_message(channel, f"<@{self.slack.bot_user_id}> {text}", user=user)
        body = self.slack.event_body({"type": "app_mention", "user": user, "text": msg.text, "ts": msg.ts,
                                      "channel": channel, "team": self.slack.team_id, "event_ts": msg.ts})
        return body, msg.ts

    async def deliver(self, url: str, body: dict, *, retry_num: int | None = None) -> tuple[int, float]:
        """POST the signed ``body`` to ``url`` + ``/slack/events`` as Slack does; returns the HTTP
        status (``0``: no connection) and the seconds until the response."""
        assert self.session is not None
        raw = json.dumps(body)
        t0 = time.perf_counter()
        try:
            async with self.session.post(url + "/slack/events", data=raw, headers=signed_headers(SECRET, raw, retry_num),
                                         timeout=aiohttp.ClientTimeout(total=30)) as resp:
                await resp.read()
                return resp.status, time.perf_counter() - t0
        except aiohttp.ClientError:
            return 0, time.perf_counter() - t0

    def answers(self, ts: str, channel: str = CHANNEL) -> int:
        """How many runs answered in the thread ``ts``: the bot's status messages that reached an
        end (a run posts one, then edits or streams it to its final state)."""
        return len(self.status_messages(ts, channel, finished=True))

    def status_messages(self, ts: str, channel: str = CHANNEL, *, finished: bool = False) -> list:
        """The bot's first message of each run in the thread (a run's live status message),
        optionally only those no longer streaming or edited at least once."""
        bot = [m for m in self.slack.thread(channel, ts) if m.user == self.slack.bot_user_id and m.ts != ts]
        runs = [m for m in bot if m.streaming or m.display_mode is not None or m.edits]
        return [m for m in runs if not (finished and m.streaming)]

    def worked(self, r: Replica) -> int:
        """How many runs replica ``r`` started, from its log."""
        return r.log_text().count("run started in ")
