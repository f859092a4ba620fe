"""What the routes share: the application state, reading a body within its limit, the caller,
the conversation of a request and file links."""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from pydantic import BaseModel, ValidationError

from bot.incoming import ConversationKey
from bot.service import Service
from bot.settings import Settings
from pipeline.types import Resource

from .auth import Caller, Keys
from .errors import ApiError, validation_error
from .guard import media_type
from .safe_markdown import StreamGuard, sanitize

CONVERSATION_HEADER = "X-HuggingGPT-Conversation"
"""Request/response header naming the conversation (multi-turn); echoed back on every reply."""
OPEN_WEBUI_CHAT_HEADER = "X-OpenWebUI-Chat-Id"
"""Open WebUI's chat id (sent with ``ENABLE_FORWARD_USER_INFO_HEADERS``): a conversation too."""
PLATFORM = "api"
"""``ConversationKey.platform`` of the HTTP API's conversations."""
_CONVERSATION = re.compile(r"^[A-Za-z0-9._:@-]{1,128}$")
_FILE_ID = re.compile(r"^file-(?P<conv>[0-9a-f]{1,32})-(?P<res>[a-z]+-\d+)$")


@dataclass
class State:
    """Everything the routes need, built once by :func:`adapters.http.app.create_app`."""

    settings: Settings
    service: Service
    keys: Keys
    ready: bool = True
    runs: set[Any] = field(default_factory=set)


def state_of(request: Request) -> State:
    """The :class:`State` of the application serving ``request``."""
    return request.app.state.hugginggpt


async def caller_of(request: Request) -> Caller:
    """Authenticate ``request`` (see :meth:`adapters.http.auth.Keys.authenticate`)."""
    peer = request.client.host if request.client else None
    return state_of(request).keys.authenticate(request.headers.get("authorization"), peer)


async def read_json(request: Request, model: type[BaseModel]) -> Any:
    """Read the body (at most ``[server] max_body_bytes``) and validate it as ``model``.

    Raises:
        ApiError: 415 when its ``Content-Type`` is not ``application/json`` (a browser's form or
            ``text/plain`` request, see :mod:`adapters.http.guard`), 413 when the body is larger than
            the limit (stops reading there), 400 when it is not JSON or not valid.
    """
    if media_type(request.headers.get("content-type")) != "application/json":
        raise ApiError(415, "Send the request body as application/json (Content-Type: application/json).",
                       "unsupported_media_type")
    limit = state_of(request).settings.server.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"The request body is larger than this server's limit of {limit} bytes.",
                       "request_too_large")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiError(413, f"The request body is larger than this server's limit of {limit} bytes.",
                           "request_too_large")
    if not body.strip():
        raise ApiError(400, "The request body is empty; send a JSON object.", "invalid_request")
    try:
        return model.model_validate_json(bytes(body))
    except ValidationError as e:
        errors = e.errors(include_url=False, include_input=False)
        if errors and errors[0].get("type") == "json_invalid":
            raise ApiError(400, "The request body is not valid JSON.", "invalid_json") from None
        raise validation_error(list(errors)) from None


def conversation_of(request: Request, caller: Caller, user_field: str | None) -> tuple[str, ConversationKey]:
    """The conversation a request belongs to and its key.

    The ``X-HuggingGPT-Conversation`` header, else Open WebUI's chat id header, else the body's
    ``user`` field names it; else a new one is made (and echoed back, so the client can go on).
    Conversations are per API key: ``ConversationKey("api", <key id>, "chat", <name>)``.

    Raises:
        ApiError: 400 when the name has characters other than letters, digits and ``._:@-`` or is
            longer than 128.
    """
    name = request.headers.get(CONVERSATION_HEADER) or request.headers.get(OPEN_WEBUI_CHAT_HEADER) or user_field
    param = CONVERSATION_HEADER if request.headers.get(CONVERSATION_HEADER) else "user"
    if name is None or not name.strip():
        name = uuid.uuid4().hex
    name = name.strip()
    if not _CONVERSATION.match(name):
        raise ApiError(400, "A conversation id may have 1 to 128 letters, digits and . _ : @ - only.",
                       "invalid_conversation", param)
    return name, ConversationKey(PLATFORM, caller.key_id, "chat", name)


def file_id(conversation_id: str, resource: Resource) -> str:
    """The API id of a stored resource: ``file-<conversation id>-<resource id>``."""
    return f"file-{conversation_id}-{resource.id}"


def parse_file_id(fid: str) -> tuple[str, str] | None:
    """``(conversation id, resource id)`` of an API file id, or ``None`` if it is not one."""
    m = _FILE_ID.match(fid)
    return (m.group("conv"), m.group("res")) if m else None


def base_url(request: Request) -> str:
    """``[server] public_url``, else ``scheme://<bound address>:<port>`` of the connection (its
    local socket address), else ``[server] host`` and ``port``; never the ``Host`` header, which
    the client chooses."""
    server = state_of(request).settings.server
    if server.public_url:
        return server.public_url.rstrip("/")
    bound = request.scope.get("server")
    host, port = (str(bound[0]), bound[1]) if bound else (server.host, server.port)
    host = f"[{host}]" if ":" in host else host
    return f"{request.url.scheme}://{host}" + (f":{port}" if port else "")


def safe_answer(request: Request, markdown: str) -> str:
    """The controller's answer with only this server's file links left as images
    (:func:`adapters.http.safe_markdown.sanitize`, ``[server] external_images``)."""
    return sanitize(markdown, own_files(request), state_of(request).settings.server.external_images)


def answer_guard(request: Request) -> StreamGuard:
    """:func:`safe_answer` for a streamed answer."""
    return StreamGuard(own_files(request), state_of(request).settings.server.external_images)


def own_files(request: Request) -> str:
    """The start of this server's file links (``<base>/v1/files/``)."""
    return base_url(request) + "/v1/files/"


def file_url(request: Request, caller: Caller, conversation_id: str, resource: Resource) -> str:
    """The link of a generated file: ``<base>/v1/files/<id>``, plus ``?exp=<Unix seconds>&sig=...``
    when keys are configured, so a chat UI's image tag can load it until ``[server] link_ttl`` has
    passed (see :mod:`adapters.http.links`)."""
    st = state_of(request)
    fid = file_id(conversation_id, resource)
    expires = int(time.time() + st.settings.server.link_ttl)
    sig = st.keys.sign(caller.key_id, fid, expires)
    if sig is None:  # no keys: loopback callers read the bytes at the files API's content path
        return f"{base_url(request)}/v1/files/{fid}/content"
    return f"{base_url(request)}/v1/files/{fid}?exp={expires}&sig={sig}"
