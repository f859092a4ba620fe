"""Slack HTTP mode replicas behind a load balancer (issue 11): several real ``hugginggpt slack
--mode http`` processes on one store, nginx in front (benchmarks/harness/realparts.py), the stand-in Slack
recording what users see, the sandbox backends in this process.

Each thread must get exactly one answer whichever replica receives an event or its retry; a
replica draining on SIGTERM answers ``/readyz`` and new events with 503 (nginx gives them to
another replica) while its run in flight finishes, then exits 0.

The store is the ``store`` fixture's settings (``[storage]`` keys); add a parameter to run the same
tests on another database (e.g. ``{"database_url": postgres_url, ...}``).
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from sandbox import Sandbox
from benchmarks.harness.slack_replicas import CHANNEL, Fleet
from sandbox.slack_api import SlackStandIn
from benchmarks.harness.realparts import Missing, NginxServer

pytestmark = pytest.mark.slow

DRAW = "draw a picture of a red fox"


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path) -> dict[str, str]:
    """``[storage]`` settings every replica of a test shares: one data dir (media files), and
    either its SQLite file or a PostgreSQL database (a throwaway server, benchmarks/harness/realparts.py)."""
    out = {"data_dir": str(tmp_path / "data"), "lease_seconds": "6"}
    if request.param == "postgres":
        out["database_url"] = request.getfixturevalue("postgres_url")
    return out


@pytest.fixture
async def world(tmp_path, store):
    """The stand-in Slack and the sandbox backends, and the settings replicas need to use them."""
    async with SlackStandIn() as slack, Sandbox() as sandbox:
        # one user sends every event here: no per-user rate limit (it is shared by the replicas)
        yield slack, sandbox, {**sandbox.overrides(), "storage": store, "slack": {"rate_limit_per_minute": 0}}


def nginx_for(root, fleet: Fleet) -> NginxServer:
    try:
        return NginxServer(root, [r.address for r in fleet.replicas]).start()
    except Missing as e:
        pytest.skip(str(e))


async def answered(fleet: Fleet, ts: str, timeout: float = 30.0) -> None:
    """Wait until the thread ``ts`` has a finished answer and its generated picture."""
    slack = fleet.slack
    await slack.wait_for(lambda: fleet.answers(ts) and slack.thread_files(CHANNEL, ts), timeout=timeout)


async def logged(fleet: Fleet, needle: str, timeout: float = 15.0) -> None:
    """Wait until some replica's log has ``needle``."""
    deadline = time.monotonic() + timeout
    while not any(needle in r.log_text() for r in fleet.replicas):
        assert time.monotonic() < deadline, f"no replica logged {needle!r}"
        await asyncio.sleep(0.05)


def assert_one_answer(fleet: Fleet, ts: str) -> None:
    """What the user sees in the thread: one answer (one run's message) and one picture."""
    runs = fleet.status_messages(ts)
    assert len(runs) == 1, [m.text[:80] for m in runs]
    assert "Sandbox stand-in" in runs[0].text and not runs[0].streaming
    assert len(fleet.slack.thread_files(CHANNEL, ts)) == 1


async def test_threads_through_nginx_each_answered_once_by_several_replicas(tmp_path, world):
    slack, _, settings = world
    async with Fleet(tmp_path / "fleet", slack, settings, n=3) as fleet:
        nginx = nginx_for(tmp_path / "nginx", fleet)
        try:
            threads = []
            for i in range(5):
                body, ts = fleet.mention(f"{DRAW} number {i}", user=f"U{i}")
                status, _ = await fleet.deliver(nginx.url, body)
                assert status == 200
                threads.append(ts)
            for ts in threads:
                await answered(fleet, ts)
        finally:
            nginx.stop()
        for ts in threads:
            assert_one_answer(fleet, ts)
        busy = [r.index for r in fleet.replicas if "pipeline.experts" in r.log_text()]
        assert len(busy) >= 2, busy


async def test_same_event_at_the_same_instant_on_two_replicas_is_answered_once(tmp_path, world):
    slack, _, settings = world
    async with Fleet(tmp_path / "fleet", slack, settings, n=2) as fleet:
        a, b = fleet.replicas
        body, ts = fleet.mention(DRAW)
        statuses = await asyncio.gather(fleet.deliver(a.url, body), fleet.deliver(b.url, body))
        assert [s for s, _ in statuses] == [200, 200]  # both acknowledge: Slack must not retry
        await answered(fleet, ts)
        await logged(fleet, "already taken by another process")
        assert_one_answer(fleet, ts)


async def test_slack_retry_on_another_replica_is_answered_once(tmp_path, world):
    slack, _, settings = world
    async with Fleet(tmp_path / "fleet", slack, settings, n=2) as fleet:
        a, b = fleet.replicas
        body, ts = fleet.mention(DRAW)
        assert (await fleet.deliver(a.url, body))[0] == 200
        # Slack did not see the acknowledgement in time and retries; the load balancer picks b
        assert (await fleet.deliver(b.url, body, retry_num=1))[0] == 200
        await answered(fleet, ts)
        await logged(fleet, "already taken by another process")
        assert_one_answer(fleet, ts)
        # whichever replica claimed the event first ran it (under load b's claim can come first:
        # a acknowledges before it claims); the other one ran nothing
        ran = [r for r in (a, b) if "pipeline.experts" in r.log_text()]
        declined = [r for r in (a, b) if "already taken by another process" in r.log_text()]
        assert len(ran) == 1 and declined == [r for r in (a, b) if r not in ran]


async def test_drain_on_sigterm_finishes_the_run_in_flight_and_nginx_skips_the_replica(tmp_path, world):
    slack, sandbox, settings = world
    async with Fleet(tmp_path / "fleet", slack, settings, n=3, grace=20) as fleet:
        nginx = nginx_for(tmp_path / "nginx", fleet)
        try:
            first = fleet.replicas[0]
            assert await fleet.ready(first) == 200
            sandbox.inference.latency["text-to-image"] = 3.0  # the picture takes a while: the run is in flight

            body, in_flight = fleet.mention(DRAW)
            assert (await fleet.deliver(first.url, body))[0] == 200
            await slack.wait_for(lambda: fleet.status_messages(in_flight), timeout=15)  # the run started on it
            first.signal(signal.SIGTERM)

            deadline = time.monotonic() + 5
            while await fleet.ready(first) != 503:
                assert time.monotonic() < deadline, "readyz did not turn 503"
                await asyncio.sleep(0.02)
            refused, refused_ts = fleet.mention(DRAW + " while draining")
            assert (await fleet.deliver(first.url, refused))[0] == 503

            # through nginx while the replica drains: other replicas answer
            during = []
            for i in range(3):
                b, ts = fleet.mention(f"{DRAW} during the drain {i}")
                assert (await fleet.deliver(nginx.url, b))[0] == 200
                during.append(ts)
            # Slack retries the event the draining replica refused; it lands elsewhere
            assert (await fleet.deliver(nginx.url, refused, retry_num=1))[0] == 200

            await answered(fleet, in_flight)
            assert await first.wait(30) == 0
            for ts in [in_flight, *during, refused_ts]:
                await answered(fleet, ts)
                assert_one_answer(fleet, ts)
            assert "restarted" not in fleet.status_messages(in_flight)[0].text

            # the replica is gone: nginx still delivers every event to the others
            sandbox.inference.latency["text-to-image"] = 0.0
            after = []
            for i in range(3):
                b, ts = fleet.mention(f"{DRAW} after the stop {i}")
                assert (await fleet.deliver(nginx.url, b))[0] == 200
                after.append(ts)
            for ts in after:
                await answered(fleet, ts)
                assert_one_answer(fleet, ts)
        finally:
            nginx.stop()
        log = first.log_text()
        for line in ("SIGTERM received: draining", "drain: /readyz answers 503", "drain: delivery refused with 503",
                     "drain: waiting up to 20 s for 1 runs in flight", "drain: all 1 runs in flight finished"):
            assert line in log, log[-3000:]
        assert "Traceback" not in log


async def test_grace_over_or_second_signal_cancels_the_run_and_tells_its_thread(tmp_path, world, store):
    slack, sandbox, settings = world
    sandbox.inference.latency["text-to-image"] = 60.0  # longer than any grace here
    async with Fleet(tmp_path / "fleet", slack, settings, n=2, grace=[1.0, 60.0]) as fleet:
        short, long = fleet.replicas
        threads = []
        for r in (short, long):
            body, ts = fleet.mention(DRAW)
            assert (await fleet.deliver(r.url, body))[0] == 200
            threads.append(ts)
        for ts in threads:
            await slack.wait_for(lambda ts=ts: fleet.status_messages(ts), timeout=15)
        short.signal(signal.SIGTERM)  # its grace (1 s) runs out: the run is cancelled, exit 0
        long.signal(signal.SIGTERM)
        await logged(fleet, "drain: waiting up to 60 s for 1 runs in flight")
        long.signal(signal.SIGTERM)  # a second signal: stop now, exit 130
        started = time.monotonic()
        assert await long.wait(20) == 130
        assert time.monotonic() - started < 15
        assert await short.wait(20) == 0
        for ts in threads:
            [status] = fleet.status_messages(ts)
            assert "restarted before finishing" in status.text, status.text
        assert "drain: grace of 1 s over: 1 of 1 runs cancelled" in short.log_text()
        assert "drain: second signal, stopping at once" in long.log_text()
        assert "Traceback" not in short.log_text() + long.log_text()
    if "database_url" not in store:  # what the store keeps: both turns ended, none left running
        with sqlite3.connect(Path(store["data_dir"]) / "conversations.sqlite3") as db:
            rows = db.execute("SELECT status, error FROM turns").fetchall()
        assert len(rows) == 2 and all(status != "running" for status, _ in rows), rows


async def test_kill_9_tells_the_thread_and_another_replica_runs_the_waiting_event(tmp_path, world, store):
    """A replica killed mid-run: within the lease (6 s here) another replica tells the thread that
    its run stopped, and runs the follow-up the dead replica had acknowledged but not started (it
    waited for the first run of its thread), so no acknowledged event is lost; other threads are
    untouched."""
    slack, sandbox, settings = world
    sandbox.inference.latency["text-to-image"] = 60.0
    async with Fleet(tmp_path / "fleet", slack, settings, n=2) as fleet:
        doomed, survivor = fleet.replicas
        body, thread = fleet.mention(DRAW)
        assert (await fleet.deliver(doomed.url, body))[0] == 200
        await slack.wait_for(lambda: fleet.status_messages(thread), timeout=15)  # the run is in flight
        follow = slack.add_user_message(CHANNEL, f"<@{slack.bot_user_id}> {DRAW} again, smaller", thread_ts=thread)
        follow_body = slack.event_body({"type": "app_mention", "user": "U1", "text": follow.text, "ts": follow.ts,
                                        "thread_ts": thread, "channel": CHANNEL, "team": slack.team_id,
                                        "event_ts": follow.ts})
        assert (await fleet.deliver(doomed.url, follow_body))[0] == 200  # acknowledged: Slack will not resend it
        await asyncio.sleep(0.5)  # claimed by the doomed replica; it waits for its thread's first run
        other, other_ts = fleet.mention("Describe this picture")  # another thread, on the survivor
        sandbox.inference.latency["text-to-image"] = 0.0
        doomed.signal(signal.SIGKILL)
        killed = time.monotonic()
        assert (await fleet.deliver(survivor.url, other))[0] == 200
        told = await slack.wait_for(lambda: [m for m in slack.thread(CHANNEL, thread)
                                             if m.user == slack.bot_user_id and "stopped unexpectedly" in m.text],
                                    timeout=30)
        assert len(told) == 1
        assert time.monotonic() - killed < 30
        # the acknowledged follow-up runs on the survivor, once, in the same thread
        await slack.wait_for(lambda: fleet.answers(thread) >= 1 and slack.thread_files(CHANNEL, thread), timeout=30)
        assert fleet.answers(thread) == 1
        assert "running delivery" in survivor.log_text() and "taken over from a gone process" in survivor.log_text()
        # the dead replica's "working" message for the follow-up is gone: the survivor posted its own
        assert [m.thread_ts for m in slack.deleted] == [thread]
        assert len(fleet.status_messages(thread)) == 2  # the interrupted first run's, and the follow-up's
        await slack.wait_for(lambda: fleet.answers(other_ts) == 1, timeout=30)
        assert "Traceback" not in survivor.log_text()
