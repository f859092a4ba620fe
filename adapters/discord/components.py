"""Discord Components V2 layouts for a run: the progress container with its Stop button, and the
media message (a gallery of generated images, audio and video as file components).

Builders only: no network I/O. What they show comes from :class:`adapters.progress.Progress` (the
single source of task states) through :func:`adapters.discord.render.task_line`.

Limits (Discord API docs, "Component Reference", and discord.py 2.7 ``ui.LayoutView``): at most
40 components per message, nested ones included; at most 4,000 characters of ``TextDisplay``
text across the whole message; a media gallery holds 1 to 10 items, each with up to 256
characters of alt text; a message with components V2 (flag ``1 << 15``) has no ``content`` and no
embeds, and shows attachments only where a component references them (``attachment://name``).
"""

from __future__ import annotations

import io
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

import discord
from discord import ui

from adapters.progress import Progress
from bot.approval import ApprovalNeeded

from .render import task_line

log = logging.getLogger("hugginggpt.discord")

MAX_COMPONENTS = 40
"""Components per message, nested ones included (Discord API docs, "Component Reference")."""
MAX_TEXT = 4000
"""Characters of ``TextDisplay`` text across one message (Discord API docs, "Text Display")."""
MAX_GALLERY_ITEMS = 10
"""Items in one media gallery (Discord API docs, "Media Gallery")."""
MAX_ALT_TEXT = 256
"""Characters of a gallery item's description (alt text) (Discord API docs, "Media Gallery Item")."""
ANSWER_PREVIEW = 1500
"""Characters of the streamed answer shown in the progress message while it is written."""

STOP_PREFIX = "hgpt:stop:"
STOP_TEMPLATE = re.compile(r"hgpt:stop:(?P<run>[0-9a-f]{1,32})")
"""A Stop button's ``custom_id``: the prefix and the run id (hex), so that a press is understood
after a restart too (``custom_id`` up to 100 characters, Discord API docs, "Button")."""

_COLOURS = {
    "planning": discord.Colour.blurple(),
    "executing": discord.Colour.blurple(),
    "responding": discord.Colour.blurple(),
    "done": discord.Colour.green(),
    "failed": discord.Colour.red(),
    "stopped": discord.Colour.dark_grey(),
}


def stop_custom_id(run_id: str) -> str:
    """The ``custom_id`` of the Stop button of run ``run_id`` (lower-case hex, 1-32 digits).

    Raises:
        ValueError: ``run_id`` is not 1-32 lower-case hex digits.
    """
    cid = STOP_PREFIX + run_id
    if not STOP_TEMPLATE.fullmatch(cid):
        raise ValueError(f"run id {run_id!r} is not 1-32 lower-case hex digits")
    return cid


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)].rstrip() + "…"


def progress_texts(progress: Progress, *, title: str | None = None, stopped_by: str | None = None,
                   now: float | None = None, limit: int = MAX_TEXT) -> tuple[str, str, str]:
    """The three texts of the progress container: head (request, notes, plan line), the task
    lines, and the tail (answer being written, final state), together at most ``limit`` chars.

    Args:
        progress: the run's progress.
        title: the request, shown quoted on top (clipped to 300 characters).
        stopped_by: display name of whoever pressed Stop ("Stopping…" until the run has ended).
        now: ``time.monotonic()`` seconds (running times).
        limit: characters across the three texts (Discord: 4,000 per message).

    Returns:
        ``(head, tasks, tail)``; ``tasks`` or ``tail`` may be empty. Task lines that do not fit
        are summarised as "… and N more tasks".
    """
    now = time.monotonic() if now is None else now
    head_text = _clip(_head_text(progress, title), limit // 3)
    tail = _clip(_tail_text(progress, stopped_by), limit // 3)
    budget = limit - len(head_text) - len(tail)
    lines = [task_line(line, now) for line in progress.tasks.values()]
    shown: list[str] = []
    used = 0
    for i, line in enumerate(lines):
        more = f"… and {len(lines) - i} more tasks"
        reserve = len(more) + 1 if i < len(lines) - 1 else 0
        if used + len(line) + 1 + reserve > budget:
            shown.append(more)
            break
        shown.append(line)
        used += len(line) + 1
    return head_text, _clip("\n".join(shown), max(0, budget)), tail


def _head_text(progress: Progress, title: str | None) -> str:
    """The request quoted, the notes, and the plan line."""
    head: list[str] = []
    if title:
        head.append("> " + _clip(" ".join(title.split()), 300))
    head += [f"ℹ️ {_clip(note, 300)}" for note in progress.notes]
    n = len(progress.tasks)
    if not progress.planned and not n:
        head.append("🧭 Planning the tasks…" if not progress.finished else "🧭 No plan was made.")
    elif not n:
        head.append("🧭 Plan: no expert models needed, answering directly.")
    else:
        head.append(f"🧭 **Plan:** {n} task{'s' if n != 1 else ''}" + ("" if progress.planned else " so far…"))
    return "\n".join(head)


def _tail_text(progress: Progress, stopped_by: str | None) -> str:
    """The final state, or the answer being written ("" while planning or executing)."""
    secs = f" in {progress.elapsed:.1f} s" if progress.elapsed is not None else ""
    if stopped_by and progress.stage == "failed":
        return f"⏹️ Stopped by {stopped_by}{secs}: {_clip(progress.error or 'nothing had finished.', 400)}"
    if stopped_by and progress.finished:
        return f"⏹️ Stopped by {stopped_by}{secs}; the answer covers what finished."
    if stopped_by:
        return f"⏹️ Stopping (asked by {stopped_by})…"
    if progress.stage == "stopped":
        return f"⚠️ {progress.error}"
    if progress.stage == "done":
        return f"🏁 Finished{secs}."
    if progress.stage == "failed":
        return f"⚠️ Stopped{secs}: {_clip(progress.error or 'the run failed.', 400)}"
    if progress.stage != "responding":
        return ""
    tail = "✍️ Writing the answer…"
    if progress.answer.strip():
        text = progress.answer.strip()
        tail += "\n" + ("…" + text[-ANSWER_PREVIEW:].lstrip() if len(text) > ANSWER_PREVIEW else text)
    return tail


def _layout(*items: ui.Item) -> ui.LayoutView:
    view = ui.LayoutView(timeout=None)
    for item in items:
        view.add_item(item)
    view.stop()  # not kept by the view store (see progress_view)
    return view


def progress_view(progress: Progress, *, run_id: str | None = None, title: str | None = None,
                  stopped_by: str | None = None, now: float | None = None) -> ui.LayoutView:
    """The progress message: a container (accent colour by stage) with the plan's tasks, their
    models and states, and a Stop button below it while the run goes on.

    Args:
        progress: the run's progress (:class:`adapters.progress.Progress`).
        run_id: the run's id (hex) for the Stop button; ``None`` or a finished run: no button.
        title, stopped_by, now: see :func:`progress_texts`.

    Returns:
        A ``ui.LayoutView`` of at most 9 components and 4,000 characters of text, already
        stopped so that discord.py's view store does not keep it (one per message, for ever):
        presses reach the bot through :class:`adapters.discord.stop.StopButton`, a dynamic item
        that also works for messages posted before a restart.
    """
    head, tasks, tail = progress_texts(progress, title=title, stopped_by=stopped_by, now=now)
    container = ui.Container(accent_colour=_COLOURS.get(progress.stage))
    container.add_item(ui.TextDisplay(head))
    if tasks:
        container.add_item(ui.Separator())
        container.add_item(ui.TextDisplay(tasks))
    if tail:
        container.add_item(ui.Separator())
        container.add_item(ui.TextDisplay(tail))
    items: list[ui.Item] = [container]
    if run_id is not None and not progress.finished:
        items.append(ui.ActionRow(ui.Button(style=discord.ButtonStyle.danger, label="Stop", emoji="⏹️",
                                            custom_id=stop_custom_id(run_id))))
    return _layout(*items)


@dataclass(frozen=True)
class MediaItem:
    """A file ready to upload: its bytes, file name (unique within the message), MIME type and
    alt text (e.g. "text-to-image output of task 2")."""

    data: bytes
    filename: str
    mime: str
    alt: str

    @property
    def is_image(self) -> bool:
        return self.mime.startswith("image/")


def media_view(items: list[MediaItem], note: str | None = None) -> tuple[ui.LayoutView, list[discord.File]]:
    """One media message: ``note`` (files changed or left out), the images in a media gallery
    with alt text, then each audio or video file as a file component.

    Args:
        items: at most 10 files (Discord: 10 attachments per message), names unique.
        note: sentences for the user, or ``None``.

    Returns:
        The layout and the ``discord.File`` uploads it references (``attachment://name``).

    Raises:
        ValueError: more than 10 items.
    """
    if len(items) > MAX_GALLERY_ITEMS:
        raise ValueError("at most 10 files per message")
    parts: list[ui.Item] = []
    if note:
        parts.append(ui.TextDisplay(_clip(note, MAX_TEXT)))
    images = [i for i in items if i.is_image]
    if images:
        parts.append(ui.MediaGallery(*[discord.MediaGalleryItem(f"attachment://{i.filename}",
                                                               description=_clip(i.alt, MAX_ALT_TEXT) or None)
                                       for i in images]))
    for i in items:
        if not i.is_image:
            parts.append(ui.File(f"attachment://{i.filename}"))
    files = [discord.File(io.BytesIO(i.data), filename=i.filename, description=_clip(i.alt, 1000) or None) for i in items]
    return _layout(*parts), files


def note_view(text: str) -> ui.LayoutView:
    """A components message of one text (at most 4,000 characters, clipped with "…")."""
    return _layout(ui.TextDisplay(_clip(text, MAX_TEXT)))


# ---------------------------------------------------------------- a plan waiting for approval

PLAN_TEMPLATE = re.compile(r"hgpt:plan:(?P<verb>run|cancel|drop)(?P<step>\d{0,4}):(?P<plan>[0-9a-f]{16})")
"""A plan button's ``custom_id`` (at most 100 characters, Discord API docs, "Button"); ``drop<N>``:
the one-button-per-step form of earlier versions, still understood on their messages."""
DROP_TEMPLATE = re.compile(r"hgpt:plan:without:(?P<plan>[0-9a-f]{16})")
"""The ``custom_id`` of a plan's "Run without steps…" string select."""
MAX_SELECT_OPTIONS = 25
"""Options of one string select (Discord API docs, "String Select"); a longer plan offers its first 25."""


def plan_custom_id(verb: str, plan_id: str, step: int | None = None) -> str:
    """The ``custom_id`` of a plan button: ``verb`` ``"run" | "cancel" | "drop"`` (with ``step``)."""
    return f"hgpt:plan:{verb}{'' if step is None else step}:{plan_id}"


class PlanButton(ui.DynamicItem[ui.Button], template=PLAN_TEMPLATE):
    """Run or Cancel of a waiting plan (:mod:`bot.approval`), dispatched to
    ``client.on_plan_pressed`` (:func:`adapters.discord.approval.press_plan`). The ``custom_id``
    carries the verb and the plan id, so a press is understood after a restart too."""

    def __init__(self, verb: str, plan_id: str, step: int | None = None) -> None:
        label = {"run": "Run", "cancel": "Cancel"}.get(verb, f"Run without step {step}")
        style = {"run": discord.ButtonStyle.success, "cancel": discord.ButtonStyle.danger}.get(
            verb, discord.ButtonStyle.secondary)
        super().__init__(ui.Button(style=style, label=label, custom_id=plan_custom_id(verb, plan_id, step)))
        self.verb, self.plan_id, self.step = verb, plan_id, step

    @classmethod
    async def from_custom_id(cls, interaction: discord.Interaction, item: ui.Item[Any], match: re.Match[str], /) -> "PlanButton":
        return cls(match["verb"], match["plan"], int(match["step"]) if match["step"] else None)

    async def callback(self, interaction: discord.Interaction) -> None:
        drop = () if self.step is None else (self.step,)
        await interaction.client.on_plan_pressed(interaction, self.verb, self.plan_id, drop)  # type: ignore[attr-defined]


class PlanStepSelect(ui.DynamicItem[ui.Select], template=DROP_TEMPLATE):
    """"Run without steps…": a string select of a waiting plan's steps; choosing some runs the plan
    without them (and what needs them), through ``client.on_plan_pressed`` with the verb ``"run"``.
    A dynamic item like :class:`PlanButton`, so it works after a restart; the choices arrive as the
    interaction's ``data.values`` (step ids; ones not in the plan are ignored by
    :func:`bot.approval.drop_steps`)."""

    def __init__(self, plan_id: str, options: list[discord.SelectOption] | None = None) -> None:
        options = options or [discord.SelectOption(label="-", value="-")]  # a press rebuilds it from the message
        super().__init__(ui.Select(custom_id=f"hgpt:plan:without:{plan_id}", placeholder="Run without steps…",
                                   min_values=1, max_values=len(options), options=options))
        self.plan_id = plan_id

    @classmethod
    async def from_custom_id(cls, interaction: discord.Interaction, item: ui.Item[Any], match: re.Match[str], /) -> "PlanStepSelect":
        options = list(item.options) if isinstance(item, ui.Select) else None
        return cls(match["plan"], options)

    async def callback(self, interaction: discord.Interaction) -> None:
        drop = tuple(int(v) for v in self.item.values if v.isdigit() and len(v) <= 4)
        await interaction.client.on_plan_pressed(interaction, "run", self.plan_id, drop)  # type: ignore[attr-defined]


def approval_view(waiting: ApprovalNeeded) -> ui.View:
    """A waiting plan's components: Run and Cancel buttons, then (a plan of more than one step) a
    "Run without steps…" select of its steps, at most all but one of them chosen."""
    view = ui.View(timeout=None)
    view.add_item(PlanButton("run", waiting.plan_id))
    view.add_item(PlanButton("cancel", waiting.plan_id))
    if len(waiting.tasks) > 1:
        options = [discord.SelectOption(label=f"Step {t.id}: {t.task}"[:100], value=str(t.id))
                   for t in waiting.tasks[:MAX_SELECT_OPTIONS]]
        select = PlanStepSelect(waiting.plan_id, options)
        select.item.max_values = min(len(options), len(waiting.tasks) - 1)
        view.add_item(select)
    return view


async def post_plan(channel: Any, waiting: ApprovalNeeded) -> None:
    """Post the waiting plan (its steps, the estimate, what to do) with its buttons; a refusal is logged."""
    try:
        await channel.send(waiting.text()[:2000], view=approval_view(waiting), suppress_embeds=True)
    except discord.HTTPException as e:
        log.warning("could not post the plan for approval in channel %s: %s", getattr(channel, "id", "?"), e)
