"""Admission: who may use the bot where, and how often (the per-platform settings ``[discord]``
and ``[slack]`` stay where they are; the rules live here once, for every front end).

Front ends describe a request with a :class:`bot.incoming.Requester` and ask :meth:`Admission.admit`; the
answer is ``None`` (go ahead: a run slot is reserved, give it back with :meth:`Admission.release`)
or a typed :class:`Refusal` whose sentence the front end only formats.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Literal

from .errors import StorageError
from .incoming import Platform, Requester
from .limits import RateLimiter
from .settings import Settings
from .store.protocol import SharedLimits

log = logging.getLogger(__name__)

RefusalReason = Literal["dm", "guild", "channel", "user", "role", "rate", "concurrency"]


@dataclass(frozen=True)
class Refusal:
    """Why a request may not run, and the one sentence for the user."""

    reason: RefusalReason
    sentence: str


class Admission:
    """Access rules and per-user limits of one front end.

    Args:
        settings: all settings; ``settings.discord`` / ``settings.slack`` hold the allow-lists and
            limits (an empty allow-list allows everyone).
        platform: whose settings apply.
        store: the conversation store (``service.store``): with it, the rate limit and the run
            slots are kept in the database and shared by every process using it;
            without it, in this process's memory.
    """

    def __init__(self, settings: Settings, platform: Platform, store: SharedLimits | None = None) -> None:
        self.platform = platform
        self.settings = settings
        cfg = settings.discord if platform == "discord" else settings.slack if platform == "slack" else None
        per_minute = cfg.rate_limit_per_minute if cfg is not None else 0
        self.per_minute = per_minute
        self.max_concurrent = settings.discord.max_concurrent_runs if platform == "discord" else 0
        self._rate = RateLimiter(per_minute, 60.0)
        self._active: dict[Hashable, int] = {}
        self.store = store
        self._slots: dict[Hashable, list[str]] = {}
        self._releasing: set[asyncio.Task] = set()

    def access(self, who: Requester) -> Refusal | None:
        """Check the allow-lists; ``None`` when allowed."""
        if self.platform == "discord":
            d = self.settings.discord
            channels = {int(c) for c in who.channels if str(c).isdigit()}
            if who.workspace is None or who.is_dm:  # no allow-list can be checked in a DM or group DM
                if d.allowed_guilds or d.allowed_channels or d.allowed_roles:
                    return Refusal("dm", "I only answer in the servers I'm enabled in here, not in direct messages.")
                return None
            if d.allowed_guilds and int(who.workspace) not in d.allowed_guilds:
                return Refusal("guild", "I'm not enabled on this server.")
            if d.allowed_channels and not channels & set(d.allowed_channels):
                return Refusal("channel", "I'm not allowed to answer in this channel; please ask in one where I'm enabled.")
            if d.allowed_roles and not {int(r) for r in who.roles} & set(d.allowed_roles):
                return Refusal("role", "You need one of the roles allowed to use me; ask a server admin.")
        elif self.platform == "slack":
            s = self.settings.slack
            if s.allowed_users and who.user not in s.allowed_users:
                return Refusal("user", "Sorry, you are not on the list of people allowed to use this bot; "
                                       "ask the Slack admin who runs it.")
            dms = s.allow_dms if s.allow_dms is not None else not s.allowed_channels
            if who.is_dm and not dms:
                return Refusal("dm", "Sorry, I don't answer direct messages here; please ask in a channel where "
                                     "I'm enabled.")
            if s.allowed_channels and not who.is_dm and not set(who.channels) & set(s.allowed_channels):
                hint = ", or send me a direct message" if dms else ""
                return Refusal("channel", "Sorry, I'm not enabled in this channel; ask the admin who runs me to add "
                                          f"it to the allowed channels{hint}.")
        return None

    async def admit(self, who: Requester) -> Refusal | None:
        """Check access, then the user's concurrency and rate budget.

        On success one run slot is reserved at once (before any suspension), so two requests
        arriving together cannot both pass; give it back with :meth:`release` when the run ends.
        With a store, slots and the rate budget are shared by every process (a database row per
        slot, GCRA per user); when the store fails (a full disk), this process's own limits apply
        to the request (logged), so the bot keeps answering as the service does without its store.
        """
        refusal = self.access(who)
        if refusal is not None:
            return refusal
        if self.store is not None:
            return await self._admit_shared(who)
        return await self._admit_local(who)

    async def _admit_local(self, who: Requester) -> Refusal | None:
        if self.max_concurrent > 0 and self._active.get(who.key, 0) >= self.max_concurrent:
            return self._busy()
        if await self._rate.try_acquire(who.key):
            return self._too_fast()
        if self.max_concurrent > 0:
            self._active[who.key] = self._active.get(who.key, 0) + 1
        return None

    async def _admit_shared(self, who: Requester) -> Refusal | None:
        store, key = self.store, f"{who.platform}:{who.user}"
        assert store is not None
        slot: str | None = None
        try:
            slot = await store.take_slot(key, self.max_concurrent) if self.max_concurrent > 0 else None
            if self.max_concurrent > 0 and slot is None:
                return self._busy()
            if await store.take_rate(key, self.per_minute, 60.0):
                if slot is not None:
                    await store.release_slot(slot)
                return self._too_fast()
        except StorageError as e:
            log.warning("admission of %s: the store failed, this process's limits apply: %s", key, e)
            if slot is not None:
                self._slots.setdefault(who.key, []).append(slot)
                self.release(who)  # taken before the failure: given back in the background
            return await self._admit_local(who)
        if slot is not None:
            self._slots.setdefault(who.key, []).append(slot)
        return None

    def _busy(self) -> Refusal:
        n = self.max_concurrent
        return Refusal("concurrency", f"You already have {n} request{'s' if n != 1 else ''} running; "
                                      "please wait for one to finish.")

    def _too_fast(self) -> Refusal:
        return Refusal("rate", f"You're sending requests faster than {self.per_minute} per minute; "
                               "please wait a little and try again.")

    def release(self, who: Requester) -> None:
        """Give back the run slot :meth:`admit` reserved (nothing to do without a concurrency limit;
        a shared slot is deleted in the background)."""
        slots = self._slots.get(who.key)
        if slots:
            slot = slots.pop()
            if not slots:
                self._slots.pop(who.key, None)
            task = asyncio.get_running_loop().create_task(self._release_slot(slot))
            self._releasing.add(task)
            task.add_done_callback(self._releasing.discard)
            return
        if who.key not in self._active:
            return
        left = self._active.get(who.key, 1) - 1
        if left > 0:
            self._active[who.key] = left
        else:
            self._active.pop(who.key, None)

    async def _release_slot(self, slot: str) -> None:
        try:
            await self.store.release_slot(slot)  # type: ignore[union-attr]
        except StorageError as e:  # the slot goes with this process's lease at worst
            log.warning("could not release run slot %s: %s", slot, e)
