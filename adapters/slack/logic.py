"""Pure decisions of the Slack front end: no network, no clock unless one is passed in.

Everything here is unit-tested without Slack:

* :func:`classify_message`: which events are requests, which are ignored (own messages,
  ``message_changed``, channel chatter without a mention).
* :class:`EventContext`: one event, read once. Bolt hands a listener ``body``, ``event`` and its
  own ``context``; our steps get one frozen context built when the event is accepted (or when a
  delivery is taken over from a gone process) and passed whole. What is derived from the event
  (team, thread, conversation key, delivery key, the run's progress model) is derived there, once.
* :func:`split_text`: answers cut under Slack's message size without breaking code blocks or words.
* :func:`to_mrkdwn`, :func:`unescape_slack`, :func:`strip_mentions`: text in both directions.
* :func:`render_status`: the status message text for a run's progress.
* :func:`viewing_line`, :class:`Viewing`: what the user views in Slack (agent view context), as
  one untrusted line for their next request.
* sentences for the user (:func:`missing_scope_sentence`, ...).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from cachetools import TTLCache
from slackify_markdown import slackify_markdown

from adapters.progress import Progress
from adapters.text import split_text as _split, utf8_len
from bot.incoming import ConversationKey

Clock = Callable[[], float]

#: Bytes per message we aim for. Slack refuses ``msg_too_long`` near 4000 characters and section
#: blocks cap at 3000 characters (api.slack.com/methods/chat.postMessage, "Truncating content").
MESSAGE_LIMIT_BYTES = 3500


# ----------------------------------------------------------------------------------------------
# Which messages are requests

#: Message subtypes that carry a user's words (api.slack.com/events/message, "Message subtypes").
_USER_SUBTYPES = {None, "file_share", "thread_broadcast"}

Verdict = Literal["request", "ignore"]


@dataclass(frozen=True)
class Decision:
    """What to do with one event.

    Attributes:
        verdict: ``"request"`` (run it) or ``"ignore"``.
        reason: why, for the debug log (``"own message"``, ``"edit"``, ``"no mention"``, ...).
        needs_thread_check: a thread reply without a mention that is a request only if the bot
            takes part in that thread (the caller checks, possibly with ``conversations.replies``).
    """

    verdict: Verdict
    reason: str
    needs_thread_check: bool = False


def mentions(text: str, bot_user_id: str | None) -> bool:
    """Whether ``text`` contains ``<@BOT>`` (Slack's mention markup, also ``<@BOT|name>``)."""
    return bool(bot_user_id) and re.search(rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>", text or "") is not None


def classify_message(
    event: dict[str, Any],
    *,
    bot_user_id: str | None,
    bot_id: str | None = None,
    followups_need_mention: bool = False,
) -> Decision:
    """Decide whether a Slack ``app_mention`` or ``message`` event is a request.

    Rules: the bot's own messages, other bots' messages, edits (``message_changed``), deletions and
    other subtypes are ignored; direct messages (``channel_type == "im"``) and mentions are
    requests; a thread reply without a mention is a request only when follow-ups without mention are
    on and the bot takes part in that thread (``needs_thread_check``).

    Args:
        event: the ``event`` object of the Events API envelope.
        bot_user_id: the bot's user id (``auth.test`` ``user_id``), e.g. ``"U0BOT"``.
        bot_id: the bot's bot id (``auth.test`` ``bot_id``), e.g. ``"B0BOT"``.
        followups_need_mention: the ``[slack] followups_need_mention`` setting.
    """
    if event.get("subtype") not in _USER_SUBTYPES:
        return Decision("ignore", f"subtype {event.get('subtype')}")
    if event.get("bot_id") or event.get("bot_profile"):
        own = event.get("bot_id") == bot_id or event.get("user") == bot_user_id
        return Decision("ignore", "own message" if own else "bot message")
    if not event.get("user") or event.get("user") == bot_user_id:
        return Decision("ignore", "own message" if event.get("user") else "no user")
    if event.get("type") == "app_mention" or mentions(event.get("text", ""), bot_user_id):
        return Decision("request", "mention")
    if event.get("channel_type") == "im":
        return Decision("request", "direct message")
    thread_ts = event.get("thread_ts")
    if thread_ts and thread_ts != event.get("ts") and not followups_need_mention:
        return Decision("request", "thread follow-up", needs_thread_check=True)
    return Decision("ignore", "no mention")


def missing_scope_sentence(needed: str | None, action: str) -> str:
    """The user's sentence for Slack's ``missing_scope`` error, naming the scope.

    Slack answers ``{"ok": false, "error": "missing_scope", "needed": "files:write"}``
    (api.slack.com/web#errors).
    """
    scope = f"the `{needed}` scope" if needed else "a scope it needs"
    return (
        f"I could not {action} because this Slack app lacks {scope}; "
        "ask a workspace admin to add it in the app settings and reinstall the app."
    )


# ----------------------------------------------------------------------------------------------
# Text in

_MENTION_RE = re.compile(r"<@[UW][A-Z0-9]+(?:\|[^>]*)?>")
_LINK_RE = re.compile(r"<((?:https?|mailto):[^|>]+)(?:\|([^>]*))?>")
_SPECIAL_RE = re.compile(r"<!(here|channel|everyone)(?:\|[^>]*)?>")


def strip_mentions(text: str, bot_user_id: str | None) -> str:
    """Remove the bot's own ``<@BOT>`` mentions from ``text`` and trim whitespace.

    Mentions of other users are kept (they may matter to the request).
    """
    if bot_user_id:
        text = re.sub(rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>", " ", text)
    return re.sub(r"[ \t]+", " ", text).strip()


def unescape_slack(text: str) -> str:
    """Turn Slack message markup into plain text for the controller.

    ``<https://x|label>`` becomes ``label (https://x)`` (``<https://x>`` becomes the URL),
    ``<!here>`` becomes ``@here``, and the entities ``&lt; &gt; &amp;`` become ``< > &``
    (api.slack.com/reference/surfaces/formatting#escaping). ``&amp;`` is decoded last, so
    ``&amp;lt;`` stays ``&lt;``.
    """

    def link(m: re.Match[str]) -> str:
        url, label = m.group(1), m.group(2)
        return f"{label} ({url})" if label and label != url else url

    text = _LINK_RE.sub(link, text)
    text = _SPECIAL_RE.sub(lambda m: "@" + m.group(1), text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


# ----------------------------------------------------------------------------------------------
# Text out

# A link slackify-markdown writes: <https://x|label> or <https://x>; every other "<" is escaped.
_OUR_LINK_RE = re.compile(r"<(?:https?://|mailto:)[^\s|<>]*(?:\|[^<>]*)?>")


def escape_slack(text: str) -> str:
    """Escape ``& < >`` as Slack requires for message text (formatting#escaping)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_mrkdwn(markdown: str) -> str:
    """Convert the controller's Markdown answer to Slack mrkdwn (``slackify-markdown``).

    slackify-markdown escapes ``& < >`` in text but passes inline HTML and code through, so a
    ``<!channel>`` in an answer would notify the whole channel: every ``<`` and ``>`` that is not
    part of a link it wrote (or a block quote marker) is escaped afterwards
    (api.slack.com/reference/surfaces/formatting#escaping).
    """
    out = slackify_markdown(markdown)
    parts: list[str] = []
    pos = 0
    for m in _OUR_LINK_RE.finditer(out):
        parts.append(_escape_angles(out[pos:m.start()]))
        parts.append(m.group(0))
        pos = m.end()
    parts.append(_escape_angles(out[pos:]))
    return "".join(parts).strip()


def _escape_angles(text: str) -> str:
    lines = []
    for line in text.split("\n"):
        m = re.match(r"^(\s*(?:>\s?)+)", line)
        head, rest = (m.group(1), line[m.end():]) if m else ("", line)
        lines.append(head + rest.replace("<", "&lt;").replace(">", "&gt;"))
    return "\n".join(lines)


def split_text(text: str, limit: int = MESSAGE_LIMIT_BYTES) -> list[str]:
    """An answer cut into Slack messages of at most ``limit`` UTF-8 bytes (:func:`adapters.text.split_text`,
    measured in bytes, code blocks reopened as bare fences since mrkdwn has no language tags).

    Raises:
        ValueError: ``limit`` below 40.
    """
    return _split(text, limit, size=utf8_len, reopen_language=False)


# ----------------------------------------------------------------------------------------------
# Progress


_STATE_ICON = {
    "waiting": ":white_small_square:",
    "running": ":hourglass_flowing_sand:",
    "done": ":white_check_mark:",
    "failed": ":x:",
    "skipped": ":fast_forward:",
    "stopped": ":black_square_for_stop:",
}


def render_status(progress: Progress) -> str:
    """The status message's text (mrkdwn, at most :data:`MESSAGE_LIMIT_BYTES` bytes) for a run's
    progress (:class:`adapters.progress.Progress`). Nothing here talks to Slack."""
    n = len(progress.tasks)
    plural = "s" if n != 1 else ""
    secs = f" in {progress.elapsed:.1f} s" if progress.elapsed else ""
    head = {
        "planning": ":thinking_face: Planning the tasks…",
        "executing": f":gear: Running {n} task{plural}…",
        "responding": ":writing_hand: Writing the answer…",
        "done": f":white_check_mark: Done{secs}.",
        "failed": ":warning: Stopped: " + escape_slack(progress.error or "the run failed"),
        "stopped": ":warning: " + escape_slack(progress.error or "the run was stopped"),
    }[progress.stage]
    lines = [head] + [f":information_source: {escape_slack(note)}" for note in progress.notes]
    if progress.tasks:
        lines.append(f"*Plan* ({n} task{plural}):")
    for tid in sorted(progress.tasks):
        t = progress.tasks[tid]
        s = f"{_STATE_ICON[t.state]} {tid}. `{t.task.task}`"
        if t.model:
            s += f" with `{t.model}`"
        if t.task.dep and t.state == "waiting":
            s += f" (after {', '.join(str(d) for d in t.task.dep)})"
        s += f": {t.state}"
        if t.error and t.state in ("failed", "skipped"):
            s += f" ({escape_slack(t.error)})"
        lines.append(s)
    out = "\n".join(lines)
    hidden = 0
    while utf8_len(out) > MESSAGE_LIMIT_BYTES and len(lines) > 2:
        lines.pop()
        hidden += 1
        out = "\n".join(lines) + f"\n…and {hidden} more task{'s' if hidden != 1 else ''}."
    return out if utf8_len(out) <= MESSAGE_LIMIT_BYTES else split_text(out, MESSAGE_LIMIT_BYTES)[0]


DM_THREAD = "dm"
"""The conversation key's thread part for a user's direct messages with the bot: every DM continues
one conversation (its files and answers stay reachable) until the user starts over."""
NEW_WORDS = frozenset({"new", "/new", "start over", "reset"})
"""A direct message that is only one of these starts a new DM conversation."""


def is_dm(event: dict[str, Any]) -> bool:
    """Whether ``event`` is a direct message with the bot (``channel_type == "im"``)."""
    return event.get("channel_type") == "im"


def delivery_key(body: dict[str, Any], team: str, channel: str, ts: str) -> str:
    """The key a delivery's event is kept under until its turn begins (the first key the adapter
    claims): the Events API's ``event_id``, or the message's ``(team, channel, ts)``."""
    event_id = body.get("event_id")
    return f"slack:event:{event_id}" if event_id else f"slack:message:{team}:{channel}:{ts}"


def event_payload(body: dict[str, Any], event: dict[str, Any], bot_user_id: str | None, bot_id: str | None,
                  needs_thread_check: bool, status_ts: str | None = None) -> dict[str, Any]:
    """What is kept with a claimed delivery until its turn begins, for a process that takes it
    over (``ConversationStore.claim_delivery``): the event, how to handle it, and the ``ts`` of the
    status message already posted for it, if any (the new process deletes it)."""
    out = {"body": body, "event": event, "bot_user_id": bot_user_id, "bot_id": bot_id,
           "needs_thread_check": needs_thread_check}
    if status_ts:
        out["status_ts"] = status_ts
    return out


def key_for(team: str, channel: str, thread_ts: str, event: dict[str, Any]) -> ConversationKey:
    """The conversation a message belongs to: its thread in channels; the user's one DM
    conversation (:data:`DM_THREAD`) in direct messages, threaded or not."""
    return ConversationKey("slack", team, channel, DM_THREAD if is_dm(event) else thread_ts)


def wants_new_conversation(event: dict[str, Any], text: str) -> bool:
    """Whether a direct message asks to start over (:data:`NEW_WORDS`, files not attached)."""
    return is_dm(event) and not event.get("files") and text.strip().lower().rstrip(".!") in NEW_WORDS


NO_PREVIEWS = {"unfurl_links": False, "unfurl_media": False}
"""Arguments of every message the bot posts or edits (``chat.postMessage``, ``chat.update``,
``chat.startStream``): no link or media previews. The answer's links are the controller's (untrusted
text); a preview would make Slack's servers fetch whatever URL it wrote."""


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


# ----------------------------------------------------------------------------------------------
# What the user is viewing (Slack's agent view)

#: Entities of one context shown to the controller (Slack orders them by relevance), and the
#: characters of a field; a field outside ``_CONTEXT_FIELD`` (spaces, markup, prose) is dropped.
CONTEXT_ENTITIES = 3
_CONTEXT_FIELD = re.compile(r"[A-Za-z0-9_.:/#-]{1,64}")


def viewing_line(context: Any) -> str:
    """One line for the controller saying what the user views in Slack, from an agent view
    context (``{"entities": [{"type": "slack#/types/channel_id", "value": "C1"}]}``, sent with
    ``app_context_changed``, ``app_home_opened`` and ``message.im``; docs.slack.dev/reference/events/
    app_context_changed) or an assistant view context (``{"channel_id": "C1"}``, sent with
    ``assistant_thread_started`` / ``assistant_thread_context_changed``); ``""`` when it names
    nothing usable.

    The context is untrusted: at most :data:`CONTEXT_ENTITIES` entities, each type and value kept
    only when it is an id-like token of at most 64 characters (no spaces, no ``<`` markup: the line
    can neither carry prose nor mention anyone when echoed).

    Args:
        context: the event's ``context`` / ``app_context`` object, of any shape.

    Returns:
        ``"The user is viewing in Slack: channel C1."`` or ``""``.
    """
    if not isinstance(context, Mapping):
        return ""
    entities = context.get("entities")
    if not isinstance(entities, list):
        entities = [{"type": "channel_id", "value": context.get("channel_id")}]
    shown = []
    for entity in entities[:CONTEXT_ENTITIES]:
        if not isinstance(entity, Mapping):
            continue
        kind, value = entity.get("type"), entity.get("value")
        if not isinstance(kind, str) or not isinstance(value, str):
            continue
        kind = kind.removeprefix("slack#/types/").removesuffix("_id")
        if _CONTEXT_FIELD.fullmatch(kind) and _CONTEXT_FIELD.fullmatch(value):
            shown.append(f"{kind.replace('_', ' ')} {value}")
    return f"The user is viewing in Slack: {'; '.join(shown)}." if shown else ""


class Viewing:
    """What each user was last seen viewing (``app_context_changed``), given as context to that
    user's next requests: per (team, user), at most ``max_users`` users (the oldest forgotten
    first), each for ``ttl`` seconds.

    Args:
        max_users: users remembered at most, > 0.
        ttl: seconds a context stays usable, > 0 (a user who looked away long ago views something else).
        clock: time source in seconds (default :func:`time.monotonic`).
    """

    def __init__(self, max_users: int = 10_000, ttl: float = 1800.0, clock: Clock = time.monotonic) -> None:
        self._lines: TTLCache[tuple[str, str], str] = TTLCache(maxsize=max_users, ttl=ttl, timer=clock)

    def remember(self, team: str, user: str, context: Any) -> None:
        """Keep what ``context`` (:func:`viewing_line`) names for the user; an empty context forgets it."""
        line = viewing_line(context)
        if line:
            self._lines[(team, user)] = line
        else:
            self._lines.pop((team, user), None)

    def line_for(self, team: str, user: str, event: Mapping[str, Any]) -> str:
        """The context line of a request: the event's own ``app_context`` (``message.im``) when it
        has one, else what the user was last seen viewing, else ``""``."""
        return viewing_line(event.get("app_context")) or self._lines.get((team, user), "")

    def __len__(self) -> int:
        self._lines.expire()
        return len(self._lines)
