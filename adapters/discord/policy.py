"""Pure decisions of the Discord front end: who may ask where, which files are acceptable, which
(deduplication is :class:`bot.limits.SeenKeys`). No I/O, no discord.py imports.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.limits import too_many_files

from .media import human_size

SUPPORTED_KINDS = ("image", "audio", "video", "text")
"""Declared content types we accept before the service sniffs the bytes (``image/*``, ``text/*`` ...)."""
TEXT_TYPES = ("application/json",)
"""Declared types outside ``text/*`` that are text files too."""
TEXT_EXTENSIONS = (".txt", ".md", ".markdown", ".csv", ".tsv", ".json")
"""File names Discord may label with no or another content type that are text files."""


@dataclass(frozen=True)
class AttachmentInfo:
    """What Discord says about an attachment before it is downloaded."""

    filename: str
    size: int
    content_type: str | None


def attachment_refusal(files: list[AttachmentInfo], *, max_bytes: int, max_files: int) -> str | None:
    """The sentence refusing attachments by their declared size and type, or ``None``.

    The bytes are checked again by the service (type sniffed from the content); this check only
    lets the bot refuse at once, privately, before downloading anything.
    """
    if len(files) > max_files:
        return too_many_files(max_files).user_message
    for f in files:
        if f.size > max_bytes:
            return (f"{f.filename} is {human_size(f.size)}, over the {human_size(max_bytes)} limit for files I read; "
                    f"please send a smaller file.")
        ctype = (f.content_type or "").split(";")[0].strip().lower()
        kind = ctype.split("/", 1)[0]
        text = ctype in TEXT_TYPES or f.filename.lower().endswith(TEXT_EXTENSIONS)
        if (kind not in SUPPORTED_KINDS or ctype in ("text/html", "text/xml")) and not text:
            shown = f.content_type or "of an unknown type"
            return (f"{f.filename} is {shown}; I can only work with images, audio, video and text files "
                    "(.txt, .md, .csv, .json).")
    return None


REQUIRED_IN_CHANNEL = ("view_channel", "send_messages", "create_public_threads", "send_messages_in_threads",
                       "attach_files", "read_message_history")
"""Permissions the bot needs for ``/ask`` in a text channel (it opens a public thread there)."""
REQUIRED_IN_THREAD = ("view_channel", "send_messages_in_threads", "attach_files", "read_message_history")
"""Permissions the bot needs to work inside an existing thread."""


def missing_permission(granted: set[str], *, in_thread: bool) -> str | None:
    """The first permission (discord.py attribute name) the bot lacks, or ``None``.

    Args:
        granted: names of permissions granted (e.g. from ``Interaction.app_permissions``).
        in_thread: whether the bot works in an existing thread (no thread to create).
    """
    for name in REQUIRED_IN_THREAD if in_thread else REQUIRED_IN_CHANNEL:
        if name not in granted:
            return name
    return None
