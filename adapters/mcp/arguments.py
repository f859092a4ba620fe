"""The MCP server's tools: their input schemas, and reading their arguments.

Files come in the call itself, never by reference: a ``data:`` URI (RFC 2397), or an MCP
embedded resource (``{"type": "resource", "resource": {"uri", "mimeType", "blob"}}``, as clients
attach files they hold) or image/audio content (``{"type": "image", "data", "mimeType"}``). A
resource *link* or any other URL is refused: this server fetches nothing a caller names.
Arguments that do not fit raise :class:`BadArguments` with one sentence (the client sees an MCP
error, code -32602 "Invalid params").
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_to_bytes, urlsplit

from bot.incoming import IncomingFile
from pipeline.tasks import TaskSpec

CONVERSATION = re.compile(r"^[A-Za-z0-9._:@-]{1,128}$")
"""A conversation id: the same rule as the OpenAI-compatible API's conversation names."""

FILE_SCHEMA: dict[str, Any] = {
    "description": "A file sent with the call: a data: URI (data:image/png;base64,...), or an embedded "
                   "resource {type: 'resource', resource: {uri, mimeType, blob}} or image/audio content "
                   "{type: 'image', data, mimeType}. Links are not fetched.",
    "anyOf": [
        {"type": "string", "pattern": "^data:"},
        {"type": "object", "properties": {"type": {"type": "string"}}, "required": ["type"]},
    ],
}
REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "request": {"type": "string", "description": "What you want, in your own words."},
        "files": {"type": "array", "items": FILE_SCHEMA, "description": "Photos, recordings, videos or text "
                  "files the request is about (referred to as image-1, audio-1, ... in the answer)."},
    },
    "required": ["request"],
    "additionalProperties": False,
}
RUN_SCHEMA: dict[str, Any] = {
    **REQUEST_SCHEMA,
    "properties": {
        **REQUEST_SCHEMA["properties"],
        "conversation_id": {"type": "string", "pattern": CONVERSATION.pattern,
                            "description": "Continue this conversation (the id an earlier answer returned); "
                                           "later requests may refer to its earlier files and results."},
    },
}


class BadArguments(ValueError):
    """Arguments a tool cannot take; the message is the sentence for the client."""


@dataclass(frozen=True)
class RunArguments:
    """What the ``hugginggpt`` and ``plan`` tools take."""

    text: str
    files: list[IncomingFile]
    conversation_id: str | None = None


def task_schema(spec: TaskSpec) -> dict[str, Any]:
    """The input schema of the tool for registry task ``spec``: one property per argument kind
    (text as a string, a file as :data:`FILE_SCHEMA`), the task's required ones required."""
    props: dict[str, Any] = {}
    for key, kind in spec.allowed.items():
        props[key] = ({"type": "string", "description": f"the {key} ({'required' if key in spec.required else 'optional'})"}
                      if kind == "text" else {**FILE_SCHEMA, "description": f"the {kind}: " + FILE_SCHEMA["description"]})
    return {"type": "object", "properties": props, "required": sorted(spec.required), "additionalProperties": False}


def _unknown(arguments: Mapping[str, Any], allowed: Mapping[str, Any], tool: str) -> None:
    extra = [k for k in arguments if k not in allowed]
    if extra:
        takes = ", ".join(allowed) or "nothing"
        raise BadArguments(f"The tool {tool} takes no argument '{extra[0]}'; it takes {takes}.")


def _decode(data: str, where: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise BadArguments(f"{where} is not valid base64.") from None


def _name_of(uri: Any) -> str | None:
    path = urlsplit(str(uri or "")).path
    last = path.rsplit("/", 1)[-1]
    return last[:128] if re.fullmatch(r"[\w .-]{1,200}", last or "") else None


def read_file(value: Any, where: str) -> IncomingFile:
    """One file argument (see the module docstring) as an :class:`IncomingFile`.

    Raises:
        BadArguments: a link, another URL, an unknown shape or bad base64.
    """
    if isinstance(value, str):
        if not value.startswith("data:"):
            raise BadArguments(f"{where} must be a data: URI or an embedded resource; this server does not fetch links.")
        head, sep, body = value[5:].partition(",")
        if not sep:
            raise BadArguments(f"{where} is not a valid data: URI (no comma before the data).")
        mime = head.split(";")[0].strip() or None
        data = _decode(body, where) if head.endswith(";base64") else unquote_to_bytes(body)
        return IncomingFile(data=data, name=None, declared_mime=mime)
    if not isinstance(value, dict):
        raise BadArguments(f"{where} must be a data: URI or an embedded resource object.")
    kind = value.get("type")
    if kind == "resource_link" or ("uri" in value and "blob" not in value and "text" not in value):
        raise BadArguments(f"{where} is a link; send the file itself (a data: URI or an embedded resource), "
                           "this server does not fetch links.")
    if kind in ("image", "audio") and isinstance(value.get("data"), str):
        return IncomingFile(data=_decode(value["data"], where), declared_mime=value.get("mimeType"))
    res = value.get("resource") if kind == "resource" else value
    if isinstance(res, dict) and isinstance(res.get("blob"), str):
        return IncomingFile(data=_decode(res["blob"], where), name=_name_of(res.get("uri")),
                            declared_mime=res.get("mimeType"))
    if isinstance(res, dict) and isinstance(res.get("text"), str):
        return IncomingFile(data=res["text"].encode("utf-8"), name=_name_of(res.get("uri")) or "document.txt",
                            declared_mime=res.get("mimeType") or "text/plain")
    raise BadArguments(f"{where} is not a file this server understands: send a data: URI or an embedded resource.")


def run_arguments(arguments: Mapping[str, Any] | None, tool: str, *, conversations: bool) -> RunArguments:
    """The arguments of ``hugginggpt`` (``conversations``) or ``plan``.

    Raises:
        BadArguments: a missing or empty request, a bad file, a bad conversation id, an unknown argument.
    """
    args = dict(arguments or {})
    _unknown(args, (RUN_SCHEMA if conversations else REQUEST_SCHEMA)["properties"], tool)
    text = args.get("request")
    if not isinstance(text, str) or not text.strip():
        raise BadArguments(f"The tool {tool} needs a 'request': the text of what you want.")
    files = args.get("files") or []
    if not isinstance(files, list):
        raise BadArguments("'files' must be a list of data: URIs or embedded resources.")
    conversation = args.get("conversation_id")
    if conversation is not None and (not isinstance(conversation, str) or not CONVERSATION.match(conversation)):
        raise BadArguments("A conversation_id has 1 to 128 letters, digits and . _ : @ - only.")
    return RunArguments(text, [read_file(f, f"files[{i}]") for i, f in enumerate(files)], conversation)


def task_arguments(arguments: Mapping[str, Any] | None, spec: TaskSpec) -> tuple[dict[str, str], dict[str, IncomingFile]]:
    """The text and file arguments of the tool of registry task ``spec``.

    Raises:
        BadArguments: a missing required argument, one of the wrong type, an unknown one, a bad file.
    """
    args = dict(arguments or {})
    _unknown(args, spec.allowed, spec.name)
    text: dict[str, str] = {}
    files: dict[str, IncomingFile] = {}
    for key, kind in spec.allowed.items():
        value = args.get(key)
        if value is None or value == "":
            if key in spec.required:
                raise BadArguments(f"The tool {spec.name} needs the argument '{key}' ({kind}).")
            continue
        if kind == "text":
            if not isinstance(value, str):
                raise BadArguments(f"The argument '{key}' of {spec.name} must be a string.")
            text[key] = value
        else:
            files[key] = read_file(value, f"The argument '{key}'")
    return text, files
