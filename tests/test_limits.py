"""The one dedupe cache and the one per-user rate limiter every front end uses (bot.limits)."""

from __future__ import annotations

import asyncio

from bot.limits import RateLimiter, SeenKeys


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_slack_retry_with_the_same_event_id_is_not_first():
    d = SeenKeys()
    assert d.first_time("Ev1", ("C1", "1.000")) is True
    assert d.first_time("Ev1", ("C1", "1.000")) is False  # X-Slack-Retry-Num: 1


def test_app_mention_and_message_for_the_same_ts_count_once():
    d = SeenKeys()
    assert d.first_time("EvMention", ("C1", "1.000")) is True
    assert d.first_time("EvMessage", ("C1", "1.000")) is False
    assert d.first_time("EvOther", ("C1", "1.001")) is True  # another message in the channel
    assert d.first_time("EvX", ("C2", "1.000")) is True  # same ts in another channel
    assert d.first_time(None, ("C3", "2.0")) is True and d.first_time(None, ("C3", "2.0")) is False


def test_discord_replays_are_seen_and_keys_expire_and_stay_bounded():
    clock = FakeClock()
    d = SeenKeys(max_size=3, ttl=60, clock=clock)
    assert d.first_time(("interaction", 1))
    assert not d.first_time(("interaction", 1))  # a replay after RESUME
    clock.t += 61
    assert d.first_time(("interaction", 1))  # forgotten after the TTL
    for i in range(10):
        d.first_time(("message", i))
    assert len(d) <= 3


async def test_rate_limit_per_user_refuses_with_a_wait_and_recovers():
    lim = RateLimiter(2, period=0.4)
    assert await lim.try_acquire("U1") == 0 and await lim.try_acquire("U1") == 0
    wait = await lim.try_acquire("U1")
    assert 0 < wait <= 0.2  # at most period / limit
    assert await lim.try_acquire("U2") == 0  # per user
    await asyncio.sleep(0.25)  # one request's worth drained
    assert await lim.try_acquire("U1") == 0
    assert await RateLimiter(0).try_acquire("x") == 0  # 0 disables the limit
