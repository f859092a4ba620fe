"""One Slack event, read once: the frozen per-event context every step of a request works from.

Bolt hands a listener ``body``, ``event`` and its own ``context`` (``BoltContext``: ``team_id``,
``bot_user_id``, ``bot_id``, ...). :class:`EventContext` is the same idea for our steps: it is built
once when the event is accepted (or when a delivery is taken over from a gone process) and then
passed whole, instead of a handful of loose values. What is derived from the event (team, thread,
conversation key, delivery key, the run's progress model) is derived here, once.

Pure: no network, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from adapters.progress import Progress
from bot.incoming import ConversationKey

from .logic import delivery_key, event_payload, is_dm, key_for


@dataclass(frozen=True)
class EventContext:
    """One accepted ``app_mention`` / ``message`` event and what follows from it.

    Attributes:
        body: the Events API envelope (``event_id``, ``team_id``, ...), as delivered.
        event: the inner event (``channel``, ``ts``, ``user``, ``text``, ``files``, ...).
        bot_user_id, bot_id: the bot's own ids (from bolt's context), for mentions and own messages.
        needs_thread_check: a thread reply without mention: a request only if the bot takes part.
        team, channel, ts, thread_ts, user: where and by whom (``thread_ts`` is ``ts`` outside a thread).
        delivery: the key the delivery is claimed under (:func:`adapters.slack.logic.delivery_key`).
        key: the conversation the message belongs to (its thread; the user's DM conversation).
        is_dm: a direct message with the bot.
        adopted: taken over from a gone process (already claimed there).
        status_ts: adopted only: the gone process's status message (deleted before running again).
        progress: the run's progress model, rendered by the live reply (one per event).
    """

    body: Mapping[str, Any]
    event: Mapping[str, Any]
    bot_user_id: str | None
    bot_id: str | None
    needs_thread_check: bool
    team: str
    channel: str
    ts: str
    thread_ts: str
    user: str
    delivery: str
    key: ConversationKey
    is_dm: bool
    adopted: bool = False
    status_ts: str | None = None
    progress: Progress = field(default_factory=Progress, compare=False, repr=False)

    @classmethod
    def of(cls, body: Mapping[str, Any], event: Mapping[str, Any], *, bot_user_id: str | None, bot_id: str | None,
           needs_thread_check: bool, adopted: str | None = None,
           status_ts: str | None = None) -> EventContext:
        """Build the context of one event.

        Args:
            body, event: as delivered by bolt (or as kept with a claimed delivery).
            bot_user_id, bot_id: bolt's ``context["bot_user_id"]`` / ``context["bot_id"]``.
            needs_thread_check: from :func:`adapters.slack.logic.classify_message`.
            adopted: the delivery key of a delivery taken over from a gone process, else ``None``.
            status_ts: that delivery's status message, if one was posted.
        """
        channel = str(event.get("channel") or "")
        ts = str(event.get("ts") or "")
        team = str(body.get("team_id") or event.get("team") or "")
        thread_ts = str(event.get("thread_ts") or ts)
        return cls(body=body, event=event, bot_user_id=bot_user_id, bot_id=bot_id,
                   needs_thread_check=needs_thread_check, team=team, channel=channel, ts=ts,
                   thread_ts=thread_ts, user=str(event.get("user") or ""),
                   delivery=adopted or delivery_key(dict(body), team, channel, ts),
                   key=key_for(team, channel, thread_ts, dict(event)), is_dm=is_dm(dict(event)), adopted=adopted is not None,
                   status_ts=status_ts)

    @classmethod
    def from_payload(cls, delivery: str, payload: str) -> EventContext:
        """The context of a delivery taken over from a gone process (what :meth:`payload` kept).

        Raises:
            ValueError, KeyError, TypeError: the payload is unreadable.
        """
        d = json.loads(payload)
        return cls.of(d["body"], d["event"], bot_user_id=d.get("bot_user_id"), bot_id=d.get("bot_id"),
                      needs_thread_check=bool(d.get("needs_thread_check")), adopted=delivery,
                      status_ts=d.get("status_ts"))

    def payload(self, status_ts: str | None = None) -> str:
        """What is kept with the claimed delivery (JSON, :func:`adapters.slack.logic.event_payload`)."""
        return json.dumps(event_payload(dict(self.body), dict(self.event), self.bot_user_id, self.bot_id,
                                        self.needs_thread_check, status_ts=status_ts))

    @property
    def message_key(self) -> str:
        """The second delivery key: the message itself (``app_mention`` and ``message`` share it)."""
        return f"slack:message:{self.team}:{self.channel}:{self.ts}"

    @property
    def files(self) -> list[dict[str, Any]]:
        """The file objects attached to the message (``event["files"]``)."""
        return list(self.event.get("files") or [])

    @property
    def run_id(self) -> str:
        """The run's id, carried by its Stop button."""
        return f"{self.channel}-{self.ts}"
