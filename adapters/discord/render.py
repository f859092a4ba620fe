"""Pure functions that turn a run's progress (:mod:`adapters.progress`) and answers into Discord text.

No I/O and no discord.py imports: everything here is tested without a network.

Limits come from the Discord API docs ("Create Message": ``content`` up to 2000 characters;
"Start Thread": ``name`` 1-100 characters).
"""

from __future__ import annotations

import re
import time

from adapters.text import split_text
from adapters.progress import Progress, TaskProgress

MESSAGE_LIMIT = 2000
"""Characters in one message's ``content`` (Discord API docs, "Create Message")."""
THREAD_NAME_LIMIT = 100
"""Characters in a thread name (Discord API docs, "Start Thread from Message")."""

_STATE_ICON = {"waiting": "⏳", "running": "⚙️", "done": "✅", "failed": "❌", "skipped": "⏭️", "stopped": "⏹️"}


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def task_line(line: TaskProgress, now: float) -> str:
    """One task as a Markdown line: icon, ``#id task`` (dependencies), model, state, time, reason."""
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
        progress: the run's progress (:class:`adapters.progress.Progress`).
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
    head += [f"ℹ️ {_clip(note, 300)}" for note in progress.notes]
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
    lines = [task_line(line, now) for line in progress.tasks.values()]
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

def split_message(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """An answer cut into Discord messages of at most ``limit`` characters
    (:func:`adapters.text.split_text`; Discord API docs, "Create Message": 2000).

    Raises:
        ValueError: ``limit`` below 40.
    """
    return split_text(text, limit)


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
