"""What the stand-in Discord stores and checks: messages (with their edit history and uploaded
files), the requests the bot made, Components V2 rules and permission bits.

Components V2 (Discord API docs, "Component Reference"): a message sent or edited with
``components`` is checked like Discord does, and a violation is answered 400 / code 50035 "Invalid
Form Body" (see :func:`component_problem`): more than 40 components, more than 4,000 characters of
text display, a gallery of 0 or more than 10 items, top-level layout components without the flag
``1 << 15``, ``content`` or embeds with that flag, a reference ``attachment://name`` to no uploaded
file. :attr:`StoredMessage.text` is what a user reads (content, or the text displays), and every
version is kept in :attr:`StoredMessage.history`. Used by :mod:`sandbox.discord_server` and
:mod:`sandbox.discord_rest`.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

DISCORD_EPOCH_MS = 1420070400000
JSON = "application/json"
IS_COMPONENTS_V2 = 1 << 15
LAYOUT_TYPES = {9, 10, 11, 12, 13, 14, 17}  # section, text display, thumbnail, gallery, file, separator, container
MAX_COMPONENTS = 40
MAX_TEXT = 4000


SUPPRESS_EMBEDS = 1 << 2
"""Message flag: no link previews (discord.com/developers/docs/resources/message#message-object-message-flags)."""


def walk_components(components: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every component, nested ones included (container children, action row buttons, section
    accessories), depth first."""
    out: list[dict[str, Any]] = []
    for c in components or []:
        out.append(c)
        out += walk_components(c.get("components") or [])
        if isinstance(c.get("accessory"), dict):
            out += walk_components([c["accessory"]])
    return out


def components_text(components: list[dict[str, Any]]) -> str:
    """The text a user reads in a components message: its text displays, in order."""
    return "\n".join(c.get("content") or "" for c in walk_components(components) if c.get("type") == 10)


def component_problem(body: dict[str, Any], flags: int, filenames: set[str]) -> str | None:
    """Why Discord would refuse this message body (400, "Invalid Form Body"), or ``None``.

    Rules (Discord API docs, "Component Reference" and "Create Message"): at most 40 components in
    all; text displays at most 4,000 characters in all; media gallery 1-10 items, alt text up to
    256; action rows 1-5 components; ``custom_id`` up to 100; layout components only with the flag
    ``IS_COMPONENTS_V2``; with the flag, no ``content`` and no embeds; ``attachment://name``
    references an attachment of the message.
    """
    comps = body.get("components")
    v2 = bool(flags & IS_COMPONENTS_V2)
    if v2 and (body.get("content") or body.get("embeds")):
        return "content and embeds cannot be used with the IS_COMPONENTS_V2 flag"
    if comps is None:
        return None
    every = walk_components(comps)
    if len(every) > MAX_COMPONENTS:
        return f"too many components ({len(every)} > {MAX_COMPONENTS})"
    if not v2 and any(c.get("type") != 1 for c in comps):
        return "layout components need the IS_COMPONENTS_V2 flag"
    text = sum(len(c.get("content") or "") for c in every if c.get("type") == 10)
    if text > MAX_TEXT:
        return f"text displays have {text} characters (> {MAX_TEXT})"
    for c in every:
        kind = c.get("type")
        if kind == 10 and not (c.get("content") or "").strip():
            return "a text display needs content"
        if kind == 1 and not 1 <= len(c.get("components") or []) <= 5:
            return "an action row holds 1 to 5 components"
        if kind == 2 and len(c.get("custom_id") or "") > 100:
            return "custom_id is longer than 100 characters"
        if kind == 1 and any(x.get("type") == 3 for x in c["components"]) and len(c["components"]) > 1:
            return "an action row with a select holds nothing else"
        if kind == 3:
            problem = select_problem(c)
            if problem:
                return problem
        if kind == 12:
            items = c.get("items") or []
            if not 1 <= len(items) <= 10:
                return f"a media gallery holds 1 to 10 items, not {len(items)}"
            if any(len(i.get("description") or "") > 256 for i in items):
                return "a media gallery item's description is longer than 256 characters"
        urls = [i["media"]["url"] for i in c.get("items") or []] if kind == 12 else (
            [c["file"]["url"]] if kind == 13 else [])
        for url in urls:
            if url.startswith("attachment://") and url[len("attachment://"):] not in filenames:
                return f"{url} refers to no attachment of this message"
    return None


def select_problem(c: dict[str, Any]) -> str | None:
    """Why Discord would refuse this string select (component type 3), or ``None``. Rules (Discord
    API docs, "String Select"): ``custom_id`` 1-100 characters; 1-25 options, each ``label`` and
    ``value`` 1-100 characters, values distinct; ``min_values`` 0-25, ``max_values`` 1-25, at most
    the options; ``placeholder`` up to 150 characters."""
    options = c.get("options") or []
    lo, hi = c.get("min_values", 1), c.get("max_values", 1)
    if not 1 <= len(c.get("custom_id") or "") <= 100:
        return "a select needs a custom_id of 1 to 100 characters"
    if not 1 <= len(options) <= 25:
        return f"a select holds 1 to 25 options, not {len(options)}"
    if any(not 1 <= len(o.get("label") or "") <= 100 or not 1 <= len(o.get("value") or "") <= 100 for o in options):
        return "a select option's label and value are 1 to 100 characters"
    if len({o["value"] for o in options}) != len(options):
        return "a select's option values are distinct"
    if not (0 <= lo <= 25 and 1 <= hi <= 25 and lo <= hi <= len(options)):
        return f"min_values {lo} / max_values {hi} do not fit {len(options)} options"
    if len(c.get("placeholder") or "") > 150:
        return "a select's placeholder is longer than 150 characters"
    return None


FILE_TYPE_KINDS = {"image", "video", "audio"}
LABEL_CHILDREN = {3, 4, 5, 6, 7, 8, 19, 21, 22, 23}  # selects, text input, file upload, radio/checkbox


def file_types_problem(types: Any) -> str | None:
    """Why Discord would refuse a ``file_types`` filter (``"image"``, ``"video"``, ``"audio"`` or
    dot-prefixed extensions, 1 to 10 entries), or ``None``."""
    if not isinstance(types, list) or not 1 <= len(types) <= 10:
        return "file_types holds 1 to 10 entries"
    bad = [t for t in types if not (t in FILE_TYPE_KINDS or (isinstance(t, str) and re.fullmatch(r"\.[A-Za-z0-9]{1,16}", t)))]
    return f"file_types entries {bad} are neither image, video, audio nor .extensions" if bad else None


def modal_problem(data: dict[str, Any]) -> str | None:
    """Why Discord would refuse this modal (interaction callback type 9), or ``None``.

    Rules (Discord API docs, "Interactions > Modal" and "Components > Label / File Upload"):
    ``custom_id`` up to 100 characters, ``title`` up to 45; 1 to 5 top-level components, each a
    Label (type 18; label up to 45 characters, description up to 100) around one input; a File
    Upload (type 19) takes ``min_values`` 0-10 and ``max_values`` 1-10 files, its ``file_types``
    as :func:`file_types_problem`; a text input inside a Label has no ``label`` of its own.
    """
    if not 1 <= len(str(data.get("custom_id") or "")) <= 100 or not 1 <= len(str(data.get("title") or "")) <= 45:
        return "a modal needs a custom_id (up to 100 characters) and a title (up to 45)"
    comps = data.get("components") or []
    if not 1 <= len(comps) <= 5:
        return f"a modal holds 1 to 5 components, not {len(comps)}"
    for c in comps:
        inner = c.get("component") or {}
        if c.get("type") != 18 or inner.get("type") not in LABEL_CHILDREN:
            return "a modal's components are labels around one input"
        if not 1 <= len(c.get("label") or "") <= 45 or len(c.get("description") or "") > 100:
            return "a label's text is 1-45 characters, its description up to 100"
        if inner.get("type") == 4 and inner.get("label"):
            return "a text input inside a label has no label of its own"
        if inner.get("type") == 19:
            if not 0 <= int(inner.get("min_values", 1)) <= 10 or not 1 <= int(inner.get("max_values", 1)) <= 10:
                return "a file upload takes min_values 0-10 and max_values 1-10"
            if "file_types" in inner and (problem := file_types_problem(inner["file_types"])):
                return problem
    return None


def command_problem(command: dict[str, Any]) -> str | None:
    """Why Discord would refuse this command in a bulk overwrite, or ``None``: ``file_types``
    only on attachment options (type 11), as :func:`file_types_problem`."""
    for option in command.get("options") or []:
        if "file_types" not in option:
            continue
        if option.get("type") != 11:
            return f"option {option.get('name')!r}: file_types only go on attachment options"
        if problem := file_types_problem(option["file_types"]):
            return f"option {option.get('name')!r}: {problem}"
    return None


# Permission bits (Discord API docs, "Permissions > Bitwise Permission Flags").
VIEW_CHANNEL = 1 << 10
SEND_MESSAGES = 1 << 11
ATTACH_FILES = 1 << 15
READ_MESSAGE_HISTORY = 1 << 16
CREATE_PUBLIC_THREADS = 1 << 35
SEND_MESSAGES_IN_THREADS = 1 << 38
BOT_PERMISSIONS = (
    VIEW_CHANNEL | SEND_MESSAGES | ATTACH_FILES | READ_MESSAGE_HISTORY | CREATE_PUBLIC_THREADS | SEND_MESSAGES_IN_THREADS
)


def now_iso() -> str:
    """The current UTC time in ISO 8601, as Discord writes timestamps."""
    return datetime.now(timezone.utc).isoformat()


@dataclass
class Call:
    """One request the bot made: when (``time.monotonic()``, seconds), what, and its body."""

    t: float
    method: str
    path: str
    json: Any = None
    files: list["UploadedFile"] = field(default_factory=list)
    query: dict[str, str] = field(default_factory=dict)


@dataclass
class UploadedFile:
    """A file the bot uploaded (multipart ``files[n]``)."""

    filename: str
    content_type: str | None
    data: bytes


@dataclass
class StoredMessage:
    """A message as the stand-in keeps it: current payload, edit history, uploaded files."""

    payload: dict[str, Any]
    files: list[UploadedFile] = field(default_factory=list)
    history: list[str] = field(default_factory=list)  # every content the message had, oldest first
    edit_times: list[float] = field(default_factory=list)  # time.monotonic() of each PATCH
    created: float = field(default_factory=time.monotonic)
    deleted: bool = False

    @property
    def id(self) -> int:
        return int(self.payload["id"])

    @property
    def channel_id(self) -> int:
        return int(self.payload["channel_id"])

    @property
    def content(self) -> str:
        return self.payload.get("content") or ""

    @property
    def flags(self) -> int:
        return int(self.payload.get("flags") or 0)

    @property
    def components(self) -> list[dict[str, Any]]:
        return self.payload.get("components") or []

    @property
    def previews(self) -> list[str]:
        """The links Discord would fetch to show link previews (embeds) under the message: every
        http(s) link of its content, unless the message has the ``SUPPRESS_EMBEDS`` flag (1 << 2)."""
        if self.flags & SUPPRESS_EMBEDS:
            return []
        return re.findall(r"https?://[^\s<>()\[\]]+", self.content)

    @property
    def text(self) -> str:
        """What a user reads: the content, or the text displays of a components message."""
        return components_text(self.components) if self.flags & IS_COMPONENTS_V2 else self.content

    def buttons(self) -> list[dict[str, Any]]:
        """The buttons a user can press now."""
        return [c for c in walk_components(self.components) if c.get("type") == 2]

    def selects(self) -> list[dict[str, Any]]:
        """The string selects a user can choose in now."""
        return [c for c in walk_components(self.components) if c.get("type") == 3]

    def choice_problem(self, custom_id: str, values: list[str]) -> str | None:
        """Why a user could not choose ``values`` in the string select ``custom_id`` (none shown,
        a value not among its options, fewer than ``min_values`` or more than ``max_values``,
        Discord API docs "String Select"), or ``None``."""
        select = next((c for c in self.selects() if c.get("custom_id") == custom_id), None)
        if select is None:
            return f"no string select {custom_id!r}"
        offered = {o.get("value") for o in select.get("options") or []}
        if not set(values) <= offered or len(set(values)) != len(values):
            return f"{values} are not distinct options of {sorted(map(str, offered))}"
        if not select.get("min_values", 1) <= len(values) <= select.get("max_values", 1):
            return f"{len(values)} choices, outside {select.get('min_values', 1)}..{select.get('max_values', 1)}"
        return None

    def gallery(self) -> list[tuple["UploadedFile", str | None]]:
        """The media gallery items as (uploaded file, alt text), in order."""
        by_name = {f.filename: f for f in self.files}
        out = []
        for c in walk_components(self.components):
            for item in c.get("items") or [] if c.get("type") == 12 else []:
                name = item["media"]["url"].removeprefix("attachment://")
                out.append((by_name[name], item.get("description")))
        return out

    def file_components(self) -> list["UploadedFile"]:
        """The files shown by file components, in order."""
        by_name = {f.filename: f for f in self.files}
        return [by_name[c["file"]["url"].removeprefix("attachment://")]
                for c in walk_components(self.components) if c.get("type") == 13]
