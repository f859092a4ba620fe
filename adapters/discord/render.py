"""Pure functions that turn pipeline events and answers into Discord text.

No I/O and no discord.py imports: everything here is tested without a network.

Limits come from the Discord API docs ("Create Message": ``content`` up to 2000 characters;
"Start Thread": ``name`` 1-100 characters).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from pipeline.types import (
    Done,
    Event,
    ModelSelected,
    PlanReady,
    ResponseDelta,
    Task,
    TaskFailed,
    TaskFinished,
    TaskSkipped,
    TaskStarted,
)

MESSAGE_LIMIT = 2000
"""Characters in one message's ``content`` (Discord API docs, "Create Message")."""
THREAD_NAME_LIMIT = 100
"""Characters in a thread name (Discord API docs, "Start Thread from Message")."""

_STATE_ICON = {"queued": "⏳", "running": "⚙️", "done": "✅", "failed": "❌", "skipped": "⏭️", "interrupted": "⏹️"}


@dataclass
class TaskLine:
    """What the progress message shows for one task."""

    task: Task
    model: str | None = None
    state: str = "queued"  # queued | running | done | failed | skipped
    reason: str | None = None
    started: float | None = None
    finished: float | None = None


@dataclass
class Progress:
    """The state of one run as the progress message shows it; fed by :func:`apply_event`.

    Attributes:
        started: ``time.monotonic()`` when the run began, seconds.
        planned: whether task planning is done.
        tasks: task id → :class:`TaskLine`, in plan order.
        answering: whether response generation has begun (first :class:`ResponseDelta`).
        answer: the answer text streamed so far.
        done: whether :class:`Done` arrived; ``status``/``error`` then hold its outcome.
        interrupted: a sentence when the run was stopped from outside (shutdown).
    """

    started: float = field(default_factory=time.monotonic)
    planned: bool = False
    tasks: dict[int, TaskLine] = field(default_factory=dict)
    answering: bool = False
    answer: str = ""
    done: bool = False
    status: str | None = None
    error: str | None = None
    elapsed: float | None = None
    interrupted: str | None = None


def apply_event(progress: Progress, event: Event, now: float | None = None) -> Progress:
    """Update ``progress`` with one pipeline event (in place) and return it.

    Args:
        progress: the run's state.
        event: any event of ``pipeline.types.Event``.
        now: ``time.monotonic()`` seconds (default: the current clock); lets tests fix time.
    """
    now = time.monotonic() if now is None else now
    if isinstance(event, PlanReady):
        progress.planned = True
        for task in event.tasks:
            progress.tasks.setdefault(task.id, TaskLine(task))
    elif isinstance(event, ModelSelected):
        line = progress.tasks.get(event.selection.task_id)
        if line is not None:
            line.model = event.selection.model
    elif isinstance(event, TaskStarted):
        line = progress.tasks.get(event.task_id)
        if line is not None:
            line.state, line.model, line.started = "running", event.model, now
    elif isinstance(event, (TaskFinished, TaskFailed, TaskSkipped)):
        result = event.result
        line = progress.tasks.get(result.task_id)
        if line is not None:
            line.state = {TaskFinished: "done", TaskFailed: "failed", TaskSkipped: "skipped"}[type(event)]
            line.model = result.model or line.model
            line.reason = result.error
            line.finished = now
            if line.started is None and result.started is not None and result.finished is not None:
                line.started, line.finished = now - (result.finished - result.started), now
    elif isinstance(event, ResponseDelta):
        progress.answering = True
        progress.answer += event.text
    elif isinstance(event, Done):
        record = event.record
        progress.done = True
        progress.status = record.status
        progress.error = record.error
        progress.elapsed = now - progress.started
        if record.tasks and not progress.tasks:
            progress.planned = True
            for task in record.tasks:
                progress.tasks[task.id] = TaskLine(task)
        for tid, sel in record.selections.items():
            if tid in progress.tasks and progress.tasks[tid].model is None:
                progress.tasks[tid].model = sel.model
        for tid, res in record.results.items():
            line = progress.tasks.get(tid)
            if line is not None and line.state in ("queued", "running"):
                line.state = {"ok": "done", "failed": "failed", "skipped": "skipped"}.get(res.status, line.state)
                line.reason = res.error
                line.model = res.model or line.model
    return progress


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _task_line(line: TaskLine, now: float) -> str:
    t = line.task
    deps = f" (after {', '.join(f'#{d}' for d in t.dep)})" if t.dep else ""
    model = f" · `{_clip(line.model, 80)}`" if line.model else ""
    text = f"{_STATE_ICON.get(line.state, '•')} **#{t.id} {t.task}**{deps}{model} · {line.state}"
    if line.state == "running" and line.started is not None:
        text += f" {now - line.started:.0f} s"
    elif line.state == "done" and line.started is not None and line.finished is not None:
        text += f" in {line.finished - line.started:.1f} s"
    if line.state in ("failed", "skipped") and line.reason:
        text += f": {_clip(line.reason, 200)}"
    return text


def render_progress(progress: Progress, *, title: str | None = None, now: float | None = None,
                    limit: int = MESSAGE_LIMIT) -> str:
    """The progress message's text: the plan (tasks with dependencies), each task's model and state.

    Args:
        progress: the run's state.
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
        head.append("🧭 Planning the tasks…" if not progress.done and not progress.interrupted else "🧭 No plan was made.")
    elif not progress.tasks:
        head.append("🧭 Plan: no expert models needed, answering directly.")
    else:
        n = len(progress.tasks)
        head.append(f"🧭 **Plan:** {n} task{'s' if n != 1 else ''}")
    tail: list[str] = []
    if progress.interrupted:
        tail.append(f"⚠️ {progress.interrupted}")
    elif progress.done:
        secs = f" in {progress.elapsed:.1f} s" if progress.elapsed is not None else ""
        if progress.status == "ok":
            tail.append(f"🏁 Finished{secs}.")
        else:
            tail.append(f"⚠️ Stopped{secs}: {_clip(progress.error or 'the run failed.', 400)}")
    elif progress.answering:
        tail.append("✍️ Writing the answer…")
    shown_lines = progress.tasks.values()
    if progress.interrupted:  # a stopped run: nothing is running or queued any more
        shown_lines = [TaskLine(ln.task, ln.model, "interrupted") if ln.state in ("queued", "running") else ln
                       for ln in shown_lines]
    lines = [_task_line(line, now) for line in shown_lines]
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
