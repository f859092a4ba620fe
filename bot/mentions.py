"""What a request says about files, checked before any LLM call ("Inputs people give").

Three slips get a sentence of their own instead of a plan built on nothing:

* an id the conversation lacks (``image-9``);
* a file named but not attached (``identify the objects in example.jpg`` with no file);
* a reference to "the photo" / "this recording" / "the first video" when the conversation has no
  file of that kind (after ``/new``, say).

The hint says how to attach a file on the front end the request came from.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pipeline.types import Modality, Resource

from .errors import InputError

_ID = re.compile(r"\b(image|audio|video|text)-(\d+)\b", re.IGNORECASE)

_EXTENSIONS: dict[str, Modality] = {
    **dict.fromkeys(("jpg", "jpeg", "png", "gif", "webp", "bmp", "tif", "tiff"), "image"),
    **dict.fromkeys(("mp3", "wav", "ogg", "oga", "flac", "m4a", "opus"), "audio"),
    **dict.fromkeys(("mp4", "mov", "webm", "avi", "mkv", "m4v"), "video"),
    **dict.fromkeys(("txt", "md", "csv", "tsv", "json"), "text"),
}
_FILE_NAME = re.compile(r"(?<![\w/.-])([\w-]{1,80}\.(" + "|".join(_EXTENSIONS) + r"))\b", re.IGNORECASE)

_KIND_WORDS: dict[str, Modality] = {
    **dict.fromkeys(("photo", "photos", "picture", "pictures", "image", "images", "pic", "pics", "screenshot"), "image"),
    **dict.fromkeys(("recording", "recordings", "audio", "voice", "speech", "song", "sound", "clip"), "audio"),
    **dict.fromkeys(("video", "videos", "movie", "footage"), "video"),
    **dict.fromkeys(("document", "documents", "spreadsheet"), "text"),
}
_REFERENCE = re.compile(
    r"\b(?:the|this|that|these|those|my|our|your)\s+(?:(?:first|second|third|last|previous|earlier|above|same|"
    r"attached|uploaded|original)\s+)?(" + "|".join(_KIND_WORDS) + r")\b",
    re.IGNORECASE,
)
_CREATES = re.compile(
    r"\b(?:generate|create|draw|paint|render|produce|make|synthesi[sz]e|compose|record|imagine)\s+(?:me\s+)?"
    r"(?:an?|some|one|two|three|\d+)\b",
    re.IGNORECASE,
)

ATTACH_HINTS = {
    "run": "attach it with --file PATH",
    "terminal": "attach it with /file PATH, then send your request",
    "discord": "attach it to your message (or to /ask's file option)",
    "slack": "upload it with your message in this thread",
}


def attach_hint(platform: str | None) -> str:
    """How to attach a file on ``platform`` (``None``: ``hugginggpt run``)."""
    return ATTACH_HINTS.get(platform or "run", ATTACH_HINTS["run"])


def check_mentions(
    text: str, resources: Sequence[Resource], attached: Sequence[Modality], platform: str | None
) -> None:
    """Refuse a request that relies on a file that is not there.

    Args:
        text: the user's request.
        resources: the files the conversation already has (earlier turns).
        attached: kinds of the files attached to this very message (their ids are not known yet).
        platform: ``ConversationKey.platform`` (``"terminal"``, ``"discord"``, ``"slack"``) or
            ``None`` for ``hugginggpt run``; picks the attach hint.

    Raises:
        InputError: naming the missing id, file name or kind, and how to attach a file.
    """
    have_kinds = {r.kind for r in resources} | set(attached)
    ids = {r.id.lower() for r in resources}
    for m in _ID.finditer(text):
        rid = m.group(0).lower()
        if rid in ids or attached:
            continue
        same = sorted((r.id for r in resources if r.kind == m.group(1).lower()), key=lambda s: int(s.split("-")[1]))
        known = ", ".join(same) if same else f"no {m.group(1).lower()} yet"
        raise InputError(f"There is no {rid} in this conversation (it has {known}).")
    names = {(r.name or "").lower() for r in resources}
    for m in _FILE_NAME.finditer(text):
        name, kind = m.group(1), _EXTENSIONS[m.group(2).lower()]
        if name.lower() in names or kind in have_kinds:
            continue
        raise InputError(f"You mention {name}, but no such file is attached: {attach_hint(platform)}.")
    if _CREATES.search(text):
        return  # "generate an image, then describe the image": the image will exist
    for m in _REFERENCE.finditer(text):
        kind = _KIND_WORDS[m.group(1).lower()]
        if kind not in have_kinds:
            noun = {"image": "photo or image", "audio": "recording", "video": "video", "text": "document or text file"}[kind]
            if kind == "audio" and "video" in have_kinds:
                raise InputError("There is no recording in this conversation: the sound of a video cannot be used on "
                                 f"its own yet, so send the audio as a file ({attach_hint(platform)}).")
            raise InputError(f"There is no {noun} in this conversation yet: {attach_hint(platform)}.")
