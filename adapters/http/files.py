"""The OpenAI Files API over the files of the caller's conversations: ``GET /v1/files``
(``files.list``), ``GET /v1/files/{id}`` (``files.retrieve``: a file object) and ``GET
/v1/files/{id}/content`` (``files.content``: the bytes).

Shapes follow the OpenAI API reference and the ``openai`` SDK's types (``FileObject``: ``id``,
``object: "file"``, ``bytes``, ``created_at``, ``filename``, ``purpose``, ``status``; the list as a
cursor page ``{"object": "list", "data", "first_id", "last_id", "has_more"}``, next page with
``after=<last id>``). A file sent in a chat message has the purpose ``user_data``, a file a task
generated ``assistants_output``. Uploading and deleting are not offered: files come and go with
conversations (``hugginggpt store prune|forget``).

Access: the API key that owns the conversation; another key's file is a 404, as an unknown one.
The links in answers carry ``?exp=...&sig=...`` (:mod:`adapters.http.links`) so a browser's
``<img>`` can load them without the key until they expire; ``GET /v1/files/{id}?exp=...&sig=...``
is such a link and answers the bytes.
"""

from __future__ import annotations

import mimetypes
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response

from bot.stored import StoredFile

from .common import PLATFORM, caller_of, file_id, parse_file_id, state_of
from .errors import ApiError
from .links import authorize_file

router = APIRouter()

PURPOSES = {"user_data": "user", "assistants_output": "task"}
"""The purposes this server's files have, and the origin each stands for."""
MAX_PAGE = 10_000
"""The largest ``limit`` of ``GET /v1/files`` (also its default, as OpenAI's)."""


def filename_of(stored: StoredFile) -> str:
    """The user's file name, else ``<resource id><extension of its type>`` (``image-2.png``)."""
    r = stored.resource
    return r.name or f"{r.id}{mimetypes.guess_extension(r.mime) or ''}"


def file_object(stored: StoredFile) -> dict[str, Any]:
    """The OpenAI ``FileObject`` of a stored file (``bytes`` in bytes, ``created_at`` in epoch
    seconds)."""
    r = stored.resource
    return {"id": file_id(stored.conversation_id, r), "object": "file", "bytes": r.size,
            "created_at": int(stored.created), "filename": filename_of(stored),
            "purpose": "user_data" if r.origin == "user" else "assistants_output", "status": "processed",
            "expires_at": None, "status_details": None}


async def owned_file(request: Request, fid: str, sig: str | None, exp: str | None = None) -> StoredFile:
    """The file ``fid`` if the caller may read it: the owning key, or a valid, unexpired link
    (:func:`adapters.http.links.authorize_file`).

    Raises:
        ApiError: 401 without a valid key (and no link signature); 404 when the id is unknown,
            malformed, another key's, the link's signature is wrong, or its bytes are gone; 410
            when the link has expired.
    """
    st = state_of(request)
    missing = ApiError(404, f"No such file: {fid}.", "file_not_found", "file_id")
    conv, resource_id = await authorize_file(request, fid, sig, exp)
    key = await st.service.find_conversation(conv)
    if key is None:
        raise missing
    found = await st.service.files_of(PLATFORM, key.workspace, limit=1, only=(conv, resource_id))
    if not found or not found[0].resource.path.is_file():
        raise missing
    return found[0]


def _bytes_of(stored: StoredFile) -> FileResponse:
    r = stored.resource
    return FileResponse(r.path, media_type=r.mime, filename=filename_of(stored), content_disposition_type="inline",
                        headers={"Cache-Control": "private, max-age=86400", "X-Content-Type-Options": "nosniff"})


@router.get("/v1/files", summary="List files")
async def list_files(
    request: Request,
    after: str | None = Query(None, description="the id of the last file of the previous page"),
    limit: int = Query(MAX_PAGE, ge=1, le=MAX_PAGE, description="files per page"),
    order: Literal["asc", "desc"] = Query("desc", description="by created_at"),
    purpose: str | None = Query(None, description="user_data (sent by users) or assistants_output (generated)"),
) -> dict[str, Any]:
    """The files of the caller's conversations as a cursor page, newest first by default."""
    caller = await caller_of(request)
    if purpose is not None and purpose not in PURPOSES:
        raise ApiError(400, f"The purpose {purpose!r} has no files here; use user_data or assistants_output.",
                       "invalid_request", "purpose")
    mark = parse_file_id(after) if after else None
    if after and mark is None:
        raise ApiError(400, f"{after!r} is not a file id of this server.", "invalid_request", "after")
    rows = await state_of(request).service.files_of(
        PLATFORM, caller.key_id, limit=limit + 1, order=order, after=mark,
        origin=PURPOSES[purpose] if purpose else None)  # type: ignore[arg-type]
    data = [file_object(f) for f in rows[:limit]]
    return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None, "has_more": len(rows) > limit}


@router.get("/v1/files/{fid}", summary="Retrieve a file object (or, with ?sig=, the bytes of an answer's link)",
            responses={200: {"content": {"application/json": {}, "application/octet-stream": {}}}})
async def retrieve_file(fid: str, request: Request, sig: str | None = None, exp: str | None = None) -> Response:
    """The file object of one of the caller's files; a signed link (``?exp=&sig=``) answers the bytes."""
    stored = await owned_file(request, fid, sig, exp)
    return _bytes_of(stored) if sig else JSONResponse(file_object(stored))


@router.get("/v1/files/{fid}/content", summary="Retrieve a file's content", response_class=FileResponse)
async def file_content(fid: str, request: Request, sig: str | None = None, exp: str | None = None) -> FileResponse:
    """The bytes of one of the caller's files, with the content type sniffed when it was stored."""
    return _bytes_of(await owned_file(request, fid, sig, exp))
