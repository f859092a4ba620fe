"""Limits on what a request may be (:func:`check_request_size`), and per-process limits: which deliveries this process already handled (a cheap first filter before
the store's ``claim_delivery``, which decides across processes), and a per-key rate limit for
front ends that run without a store.

Both keep bounded memory (cachetools). Budgets shared by several processes live in the store
(``ConversationStore.take_rate`` / ``take_slot``, used by :class:`bot.admission.Admission` and the
HTTP API's keys).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

from aiolimiter import AsyncLimiter
from cachetools import LRUCache, TTLCache

from .errors import InputError


def too_many_files(limit: int) -> InputError:
    """The refusal of a request with more than ``limit`` files (``[storage] max_files``): one
    sentence, said the same way by the service and by the front ends that count before downloading."""
    return InputError(f"Please attach at most {limit} files at a time.")


def check_request_size(text: str, max_chars: int) -> None:
    """Refuse a request whose text is longer than ``max_chars`` characters (Unicode code points,
    as Python's ``len``), before anything is stored or planned.

    The limit is ``[planning] max_request_chars``: a pasted log or book is a request over a stated
    limit, not a plan the controller failed to write.

    Args:
        text: the request's text, as it will be planned.
        max_chars: ``[planning] max_request_chars``.

    Raises:
        InputError: ``text`` is longer than ``max_chars`` (exit status 3 on the command line).
    """
    if len(text) > max_chars:
        raise InputError(
            f"Your request is {len(text):,} characters long, over the limit of {max_chars:,} characters "
            "([planning] max_request_chars); please shorten it or attach the text as a file.",
            f"request of {len(text)} characters over [planning] max_request_chars = {max_chars}",
        )


class SeenKeys:
    """Remembers delivery keys for ``ttl`` seconds, so a redelivered event is handled once.

    Platforms deliver some events twice: Slack retries with the same ``event_id`` and sends a
    mention as ``app_mention`` *and* ``message`` (same ``(channel, ts)``)
    (api.slack.com/apis/events-api, "Retries"); Discord may replay an INTERACTION_CREATE or
    MESSAGE_CREATE after a gateway RESUME.

    Args:
        max_size: keys kept at most (the oldest are forgotten first), > 0.
        ttl: seconds a key is remembered, > 0.
        clock: time source in seconds (default :func:`time.monotonic`).
    """

    def __init__(self, max_size: int = 20_000, ttl: float = 900.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._keys: TTLCache[Hashable, bool] = TTLCache(maxsize=max_size, ttl=ttl, timer=clock)

    def first_time(self, *keys: Hashable | None) -> bool:
        """``True`` when none of ``keys`` (``None`` ones are ignored) was seen within the TTL.

        Marks them all as seen. Call it before any ``await`` so concurrent deliveries of the same
        event cannot both pass.
        """
        present = [k for k in keys if k is not None]
        seen = any(k in self._keys for k in present)
        for k in present:
            self._keys[k] = True
        return not seen

    def __len__(self) -> int:
        self._keys.expire()
        return len(self._keys)


class RateLimiter:
    """At most ``limit`` requests per ``period`` seconds per key (a user), as a leaky bucket
    (aiolimiter) per key.

    Args:
        limit: requests per period; ``0`` or less disables the limit.
        period: seconds (``rate_limit_per_minute`` settings: 60).
        max_keys: buckets kept (least recently used forgotten first; a forgotten bucket is full,
            which only ever favours the user).
    """

    def __init__(self, limit: int, period: float = 60.0, *, max_keys: int = 10_000) -> None:
        self.limit = limit
        self.period = period
        self._buckets: LRUCache[Hashable, AsyncLimiter] = LRUCache(maxsize=max_keys)

    async def try_acquire(self, key: Hashable) -> float:
        """Count one request of ``key`` if its budget allows.

        Returns:
            ``0.0`` when allowed (and counted); otherwise about how many seconds until one more
            request fits (at most ``period / limit``), not counted.
        """
        if self.limit <= 0:
            return 0.0
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = AsyncLimiter(self.limit, self.period)
        if not bucket.has_capacity():
            return self.period / self.limit
        await bucket.acquire()  # has capacity: counts without waiting
        return 0.0
