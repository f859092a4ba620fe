"""Pure functions that turn a run's progress (:mod:`bot.progress`) and answers into Discord text.

No I/O and no discord.py imports: everything here is tested without a network.

Limits come from the Discord API docs ("Create Message": ``content`` up to 2000 characters;
"Start Thread": ``name`` 1-100 characters).
"""

from __future__ import annotations

import re
import time

from bot.progress import Progress, TaskProgress

MESSAGE_LIMIT = 2000
"""Characters in one message's ``content`` (Discord API docs, "Create Message")."""
THREAD_NAME_LIMIT = 100
"""Characters in a thread name (Discord API docs, "Start Thread from Message")."""

_STATE_ICON = {"waiting": "⏳", "running": "⚙️", "done": "✅", "failed": "❌", "skipped": "⏭️", "stopped": "⏹️"}


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _task_line(line: TaskProgress, now: float) -> str:
    t = line.task
    deps = f" (after {', '.join(f'#{d}' for d in t.dep)})" if t.dep else ""
    model = f" · `{_clip(line.model, 80)}`" if line.model else ""
    text = f"{_STATE_ICON.get(line.state, '•')} **#{t.id} {t.task}**{deps}{model} · {line.state}"
    seconds = line.seconds(now)
    if line.state == "running" and seconds is not None:
        text += f" {seconds:.0f} s"
    elif line.state == "done" and seconds is not None:
        text += f" in {seconds:.1f} s"
    if line.state in ("failed", "skipped") and line.error:
        text += f": {_clip(line.error, 200)}"
    return text


def render_progress(progress: Progress, *, title: str | None = None, now: float | None = None,
                    limit: int = MESSAGE_LIMIT) -> str:
    """The progress message's text: the plan (tasks with dependencies), each task's model and state.

    Args:
        progress: the run's progress (:class:`bot.progress.Progress`).
        title: an optional first line (e.g. the request, clipped).
        now: ``time.monotonic()`` seconds, for running times.
        limit: maximum characters (Discord: 2000); task lines that do not fit are summarised as
            "… and N more tasks".

    Returns:
        Markdown text of at most ``limit`` characters.
    """
    now = time.monotonic() if now is None else now
    head: list[str] = []
    if title:
        head.append(f"> {_clip(title, 300)}")
    if not progress.planned:
        head.append("🧭 Planning the tasks…" if not progress.finished else "🧭 No plan was made.")
    elif not progress.tasks:
        head.append("🧭 Plan: no expert models needed, answering directly.")
    else:
        n = len(progress.tasks)
        head.append(f"🧭 **Plan:** {n} task{'s' if n != 1 else ''}")
    tail: list[str] = []
    secs = f" in {progress.elapsed:.1f} s" if progress.elapsed is not None else ""
    if progress.stage == "stopped":
        tail.append(f"⚠️ {progress.error}")
    elif progress.stage == "done":
        tail.append(f"🏁 Finished{secs}.")
    elif progress.stage == "failed":
        tail.append(f"⚠️ Stopped{secs}: {_clip(progress.error or 'the run failed.', 400)}")
    elif progress.stage == "responding":
        tail.append("✍️ Writing the answer…")
    lines = [_task_line(line, now) for line in progress.tasks.values()]
    head_text = "\n".join(h for h in head if h)
    tail_text = "\n".join(tail)
    budget = limit - len(head_text) - len(tail_text) - 2
    shown: list[str] = []
    used = 0
    for i, line in enumerate(lines):
        more = f"… and {len(lines) - i} more tasks"
        need = len(line) + 1
        reserve = len(more) + 1 if i < len(lines) - 1 else 0
        if used + need + reserve > budget:
            shown.append(more)
            break
        shown.append(line)
        used += need
    text = "\n".join(part for part in (head_text, "\n".join(shown), tail_text) if part)
    return text[:limit]


# ----------------------------------------------------------------------------------------------
# answer splitting

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def _split_words(text: str, limit: int) -> list[str]:
    """Split one line into pieces of at most ``limit`` characters at spaces; a word longer than
    ``limit`` (a URL, a hash) is cut, as nothing else can make it fit."""
    pieces: list[str] = []
    while len(text) > limit:
        cut = text.rfind(" ", 0, limit + 1)
        if cut <= 0:
            pieces.append(text[:limit])
            text = text[limit:]
        else:
            pieces.append(text[:cut])
            text = text[cut + 1 :]
    pieces.append(text)
    return pieces


def split_message(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """Split an answer into messages of at most ``limit`` characters.

    Rules: break between lines, preferring a blank line or the start of a code block once a
    message is at least half full; a line longer than a message is broken at a space (only a
    single word longer than the limit is cut inside). A code block (```` ``` ```` or ``~~~``
    fence) that must be split is closed at the end of one message and reopened, with its
    language tag, at the start of the next, so every message renders as valid Markdown.

    Args:
        text: Markdown text.
        limit: maximum characters per message (Discord: 2000); at least 40.

    Returns:
        Non-empty messages in order (``[]`` for blank text).

    Raises:
        ValueError: ``limit`` below 40.
    """
    if limit < 40:
        raise ValueError("limit must be at least 40 characters")
    text = text.strip("\n")
    if not text.strip():
        return []
    chunks: list[str] = []
    cur: list[str] = []
    cur_len = 0  # len("\n".join(cur))
    fence: str | None = None  # opening line of the code block we are inside
    soft: int | None = None  # index into cur where a split is pleasant (outside code)

    def closer(f: str | None) -> int:
        return len(_fence_chars(f)) + 1 if f else 0

    def has_content(lines: list[str]) -> bool:
        return any(ln.strip() and not _FENCE.match(ln) for ln in lines)

    def emit(upto: int, open_fence: str | None) -> None:
        nonlocal cur, cur_len, soft
        head, rest = cur[:upto], cur[upto:]
        body = "\n".join(head).strip("\n")
        if open_fence is not None and upto == len(cur):
            body += "\n" + _fence_chars(open_fence)
        if has_content(head):
            chunks.append(body)
        if upto == len(cur):
            rest = [open_fence] if open_fence is not None else []
        while rest and not rest[0].strip():
            rest = rest[1:]
        cur = rest
        cur_len = len("\n".join(cur))
        soft = None

    for raw in text.split("\n"):
        is_fence = _FENCE.match(raw) is not None
        if is_fence and fence is None:
            after: str | None = raw.strip()
            if cur and has_content(cur):
                soft = len(cur)
        elif is_fence and fence is not None and raw.strip().strip("`~") == "" and raw.strip()[0] == fence[0] \
                and len(raw.strip()) >= len(_fence_chars(fence)):
            after = None
        else:
            after = fence
        room = limit - (len(fence) + 1 if fence else 0) - max(closer(fence), closer(after)) - 1
        pieces = _split_words(raw, room) if len(raw) > room else [raw]
        for i, piece in enumerate(pieces):
            state_after = after if i == len(pieces) - 1 else fence
            while cur and cur_len + 1 + len(piece) + closer(state_after) > limit:
                if soft is not None and len("\n".join(cur[:soft])) >= limit // 2:
                    emit(soft, None)
                else:
                    emit(len(cur), fence)
            cur_len += len(piece) + (1 if cur else 0)
            cur.append(piece)
        fence = after
        if fence is None and (not raw.strip() or is_fence):
            soft = len(cur)
    emit(len(cur), fence)
    return chunks


def _fence_chars(fence_line: str) -> str:
    """The bare fence (```` ``` ```` or ``~~~``, same length) that closes ``fence_line``."""
    s = fence_line.strip()
    ch = s[0] if s else "`"
    n = len(s) - len(s.lstrip(ch))
    return ch * max(3, n)


# ----------------------------------------------------------------------------------------------
# thread names and sentences


def thread_name(text: str, *, fallback: str = "HuggingGPT request") -> str:
    """A thread name from the request: first line, mentions and Markdown removed, 1-100 chars.

    Args:
        text: the user's request.
        fallback: used when nothing printable remains (e.g. a request with files only).

    Returns:
        A name of 1 to 100 characters, cut at a word boundary with "…" when too long.
    """
    line = re.sub(r"<[@#][!&]?\d+>", " ", text or "")
    line = re.sub(r"[`*_~|>#\[\]]", "", line)
    line = " ".join(line.split())
    if not line:
        line = fallback
    if len(line) > THREAD_NAME_LIMIT:
        cut = line.rfind(" ", 0, THREAD_NAME_LIMIT - 1)
        line = (line[:cut] if cut >= THREAD_NAME_LIMIT // 2 else line[: THREAD_NAME_LIMIT - 1]).rstrip() + "…"
    return line[:THREAD_NAME_LIMIT]


PERMISSION_NAMES = {
    "view_channel": "View Channels",
    "send_messages": "Send Messages",
    "create_public_threads": "Create Public Threads",
    "send_messages_in_threads": "Send Messages in Threads",
    "attach_files": "Attach Files",
    "read_message_history": "Read Message History",
}
"""discord.py permission attribute → the name the Discord client shows in role settings."""


def missing_permission_sentence(permission: str, where: str = "this channel") -> str:
    """The user's sentence for a permission the bot lacks, naming it as Discord's settings do."""
    name = PERMISSION_NAMES.get(permission, permission.replace("_", " ").title())
    return (f"I can't do that here: I lack the **{name}** permission in {where}. "
            f"Ask a server admin to grant it to my role.")
