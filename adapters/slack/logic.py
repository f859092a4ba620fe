"""Pure decisions of the Slack front end: no network, no clock unless one is passed in.

Everything here is unit-tested without Slack (collmbo's ``*_logic`` split, see STYLE.md):

* :class:`TTLCache` / :class:`Deduplicator`: one answer per mention although Slack delivers it
  several times (retries with ``X-Slack-Retry-Num``, ``app_mention`` *and* ``message.channels``
  for the same message, Socket Mode redelivery).
* :func:`classify_message`: which events are requests, which are ignored (own messages,
  ``message_changed``, channel chatter without a mention).
* :func:`split_text`: answers cut under Slack's message size without breaking code blocks or words.
* :func:`to_mrkdwn`, :func:`unescape_slack`, :func:`strip_mentions`: text in both directions.
* :func:`render_status`: the status message text for a run's progress.
* :class:`SlidingWindowLimiter`: the per-user request rate limit.
* sentences for the user (:func:`missing_scope_sentence`, ...).
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Literal

from slackify_markdown import slackify_markdown

from bot.progress import Progress

Clock = Callable[[], float]

#: Bytes per message we aim for. Slack refuses ``msg_too_long`` near 4000 characters and section
#: blocks cap at 3000 characters (api.slack.com/methods/chat.postMessage, "Truncating content").
MESSAGE_LIMIT_BYTES = 3500


# ----------------------------------------------------------------------------------------------
# Deduplication


class TTLCache:
    """A bounded set of keys that forget themselves after ``ttl`` seconds.

    Args:
        max_size: at most this many keys are kept; the oldest are evicted first (> 0).
        ttl: seconds a key is remembered (> 0).
        clock: monotonic time source in seconds (default :func:`time.monotonic`).
    """

    def __init__(self, max_size: int = 10_000, ttl: float = 600.0, clock: Clock = time.monotonic) -> None:
        if max_size <= 0 or ttl <= 0:
            raise ValueError("max_size and ttl must be positive")
        self.max_size = max_size
        self.ttl = ttl
        self._clock = clock
        self._items: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()

    def __len__(self) -> int:
        self._expire()
        return len(self._items)

    def _expire(self) -> None:
        now = self._clock()
        while self._items:
            key, (expires, _) = next(iter(self._items.items()))
            if expires > now:
                break
            del self._items[key]

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value stored for ``key``, or ``default`` if absent or expired."""
        self._expire()
        item = self._items.get(key)
        return default if item is None else item[1]

    def __contains__(self, key: Hashable) -> bool:
        self._expire()
        return key in self._items

    def set(self, key: Hashable, value: Any = True) -> None:
        """Remember ``key`` (refreshing its TTL); evicts the oldest keys beyond ``max_size``."""
        self._expire()
        self._items.pop(key, None)
        self._items[key] = (self._clock() + self.ttl, value)
        while len(self._items) > self.max_size:
            self._items.popitem(last=False)


class Deduplicator:
    """Decides whether a delivered event is the first delivery of its message.

    Slack's delivery rules (api.slack.com/apis/events-api, "Retries"; PLATFORMS.md): a retry carries
    the same ``event_id``; a mention arrives as ``app_mention`` *and* ``message`` with different
    ``event_id`` but the same ``(channel, ts)``. Both keys are remembered.

    Args:
        max_size: keys kept per kind (bounded memory).
        ttl: seconds a key is kept; Slack's last retry comes about 5 minutes after the first try,
            so the default of 15 minutes covers it.
        clock: monotonic time source in seconds.
    """

    def __init__(self, max_size: int = 10_000, ttl: float = 900.0, clock: Clock = time.monotonic) -> None:
        self._event_ids = TTLCache(max_size, ttl, clock)
        self._messages = TTLCache(max_size, ttl, clock)

    def first_delivery(self, event_id: str | None, channel: str | None, ts: str | None) -> bool:
        """Return ``True`` the first time this event/message is seen, ``False`` for any repeat.

        Marks both keys as seen. Call it before any ``await`` so concurrent deliveries cannot both
        pass.
        """
        seen = False
        if event_id:
            seen = event_id in self._event_ids
        if channel and ts:
            seen = seen or (channel, ts) in self._messages
        if event_id:
            self._event_ids.set(event_id)
        if channel and ts:
            self._messages.set((channel, ts))
        return not seen

    def __len__(self) -> int:
        return len(self._event_ids) + len(self._messages)


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
    followups_without_mention: bool = True,
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
        followups_without_mention: the ``[slack] followups_without_mention`` setting.
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
    if thread_ts and thread_ts != event.get("ts") and followups_without_mention:
        return Decision("request", "thread follow-up", needs_thread_check=True)
    return Decision("ignore", "no mention")


def is_allowed(channel: str, user: str, *, channel_type: str | None, allowed_channels: list[str], allowed_users: list[str]) -> str | None:
    """Check the ``[slack] allowed_channels`` / ``allowed_users`` settings (empty = everyone).

    Direct messages are not subject to the channel list (only to the user list).

    Returns:
        ``None`` when allowed, else the user's sentence.
    """
    if allowed_users and user not in allowed_users:
        return "Sorry, you are not on the list of people allowed to use this bot; ask the Slack admin who runs it."
    if allowed_channels and channel_type != "im" and channel not in allowed_channels:
        return "Sorry, I'm not enabled in this channel; ask the admin who runs me to add it to the allowed channels, or send me a direct message."
    return None


# ----------------------------------------------------------------------------------------------
# Per-user rate limit


class SlidingWindowLimiter:
    """At most ``limit`` requests per ``window`` seconds per key (e.g. per Slack user).

    Args:
        limit: requests allowed per window; ``0`` or less disables the limit.
        window: seconds (default 60: ``rate_limit_per_minute``).
        max_keys: bound on remembered keys (oldest evicted).
        clock: monotonic time source in seconds.
    """

    def __init__(self, limit: int, window: float = 60.0, *, max_keys: int = 10_000, clock: Clock = time.monotonic) -> None:
        self.limit = limit
        self.window = window
        self.max_keys = max_keys
        self._clock = clock
        self._hits: OrderedDict[Hashable, deque[float]] = OrderedDict()

    def acquire(self, key: Hashable) -> float:
        """Count a request for ``key``.

        Returns:
            ``0.0`` when allowed (and counted); otherwise the seconds until the next request would
            be allowed (not counted).
        """
        if self.limit <= 0:
            return 0.0
        now = self._clock()
        hits = self._hits.pop(key, None) or deque()
        while hits and hits[0] <= now - self.window:
            hits.popleft()
        self._hits[key] = hits
        while len(self._hits) > self.max_keys:
            self._hits.popitem(last=False)
        if len(hits) >= self.limit:
            return max(0.001, hits[0] + self.window - now)
        hits.append(now)
        return 0.0


def rate_limited_sentence(limit: int, retry_after: float) -> str:
    """The user's sentence when the per-user limit is reached (``retry_after`` in seconds)."""
    return (
        f"You have reached the limit of {limit} requests per minute; "
        f"please try again in {max(1, round(retry_after))} seconds."
    )


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


_FENCE = "```"


def _utf8_len(s: str) -> int:
    return len(s.encode("utf-8"))


def _cut_bytes(s: str, limit: int) -> tuple[str, str]:
    """Split ``s`` at the last whitespace within ``limit`` UTF-8 bytes (else at a character)."""
    b = s.encode("utf-8")
    if len(b) <= limit:
        return s, ""
    head = b[:limit].decode("utf-8", errors="ignore")
    cut = max(head.rfind(" "), head.rfind("\n"), head.rfind("\t"))
    if cut > 0:
        return s[:cut], s[cut + 1:]
    return head, s[len(head):]


def split_text(text: str, limit: int = MESSAGE_LIMIT_BYTES) -> list[str]:
    """Split ``text`` into messages of at most ``limit`` UTF-8 bytes each.

    Splits at line ends where possible, else at spaces, a word is cut only when it alone is longer
    than a message. A code block (```` ``` ````) that spans two messages is closed at the end of
    the first and reopened at the start of the next, so each message renders on its own.

    Args:
        text: mrkdwn text.
        limit: bytes per message (>= 64); default :data:`MESSAGE_LIMIT_BYTES`.

    Returns:
        Non-empty chunks, in order; ``[]`` for blank text.
    """
    if limit < 64:
        raise ValueError("limit must be at least 64 bytes")
    text = text.strip("\n")
    if not text.strip():
        return []
    reserve = len(_FENCE) + 1  # "\n```" to close an open code block
    chunks: list[str] = []
    cur: list[str] = []
    cur_len = 0
    in_code = False  # whether the current chunk ends inside a code block

    def flush() -> None:
        nonlocal cur, cur_len
        body = "\n".join(cur).rstrip()
        if in_code and body:
            body += "\n" + _FENCE
        if body.strip() and body.strip() != _FENCE:
            chunks.append(body)
        cur = [_FENCE] if in_code else []
        cur_len = len(_FENCE) if in_code else 0

    pending = text.split("\n")
    pending.reverse()
    while pending:
        line = pending.pop()
        fences = line.count(_FENCE)
        after = in_code ^ (fences % 2 == 1)
        need = _utf8_len(line) + (1 if cur else 0)
        budget = limit - (reserve if (in_code or after) else 0)
        if cur_len + need <= budget:
            cur.append(line)
            cur_len += need
            in_code = after
            continue
        if cur and cur != [_FENCE]:
            flush()
            pending.append(line)
            continue
        # The line alone does not fit into an empty chunk: cut it.
        room = limit - reserve - cur_len - (1 if cur else 0)
        head, tail = _cut_bytes(line, room)
        cur.append(head)
        cur_len += _utf8_len(head) + (1 if len(cur) > 1 else 0)
        in_code = in_code ^ (head.count(_FENCE) % 2 == 1)
        flush()
        if tail:
            pending.append(tail)
    if cur and cur != [_FENCE]:
        flush()
    return chunks


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
    progress (:class:`bot.progress.Progress`). Nothing here talks to Slack."""
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
    lines = [head]
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
    while _utf8_len(out) > MESSAGE_LIMIT_BYTES and len(lines) > 2:
        lines.pop()
        hidden += 1
        out = "\n".join(lines) + f"\n…and {hidden} more task{'s' if hidden != 1 else ''}."
    return out if _utf8_len(out) <= MESSAGE_LIMIT_BYTES else split_text(out, MESSAGE_LIMIT_BYTES)[0]
