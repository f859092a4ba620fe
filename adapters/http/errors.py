"""OpenAI-style errors: one exception type, one body shape, one place that maps failures to them.

Body (platform.openai.com/docs/guides/error-codes, the API reference's error object)::

    {"error": {"message": str, "type": str, "param": str | None, "code": str | None}}

Statuses as the OpenAI API uses them: 400 malformed request, 401 missing or wrong key, 404 unknown
model/file/route, 413 body too large, 429 rate or concurrency limit, 500 server error, 503 not
ready. Never a traceback: unexpected errors become one sentence for the client and one log line
(with the details) for the operator.
"""

from __future__ import annotations

import errno
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from bot.errors import StorageError
from bot.readiness import storage_sentence

log = logging.getLogger("adapters.http")

_TYPE_OF_STATUS = {401: "invalid_request_error", 429: "requests", 500: "server_error", 502: "server_error",
                   503: "server_error", 504: "server_error"}


class ApiError(Exception):
    """A refusal or failure the client sees as an OpenAI error object.

    Args:
        status: HTTP status (400, 401, 404, 413, 429, 500, 503).
        message: one sentence for the client (never a secret, never a path).
        code: machine-readable code (``"invalid_api_key"``, ``"model_not_found"``, ...), or ``None``.
        param: the request field at fault (``"model"``, ``"messages[0].content[1]"``), or ``None``.
        headers: extra response headers (``Retry-After``, ``WWW-Authenticate``).
    """

    def __init__(self, status: int, message: str, code: str | None = None, param: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.headers = headers or {}

    @property
    def type(self) -> str:
        """The OpenAI error ``type``: ``invalid_request_error`` for 4xx, ``requests`` for 429,
        ``server_error`` for 5xx."""
        return _TYPE_OF_STATUS.get(self.status, "invalid_request_error")

    def body(self) -> dict[str, Any]:
        """``{"error": {"message", "type", "param", "code"}}``."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        """The JSON response with this error's status and headers."""
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def _field(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if part in ("body",):
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def validation_error(errors: list[dict[str, Any]]) -> ApiError:
    """A 400 naming the first invalid field of a pydantic validation (``messages[1].content``)."""
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    param = _field(tuple(first.get("loc", ()))) or None
    msg = str(first.get("msg", "invalid value")).rstrip(".")
    where = f" at {param}" if param else ""
    return ApiError(400, f"The request body is invalid{where}: {msg}.", "invalid_request", param)


def storage_error(exc: BaseException) -> ApiError:
    """The 503 ``storage_unavailable`` of a storage failure: a sentence naming no path
    (:func:`bot.readiness.storage_sentence`)."""
    return ApiError(503, storage_sentence(exc), "storage_unavailable", headers={"Retry-After": "30"})


def storage_response(request: Request, exc: BaseException) -> JSONResponse:
    """Log one line (no traceback) and answer :func:`storage_error`."""
    log.warning("%s %s -> 503 storage_unavailable: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
    return storage_error(exc).response()


def install_error_handlers(app: FastAPI) -> None:
    """Make every error of ``app`` an OpenAI error object (including 404/405 of unknown routes and
    FastAPI's own validation errors, which would otherwise be 422 with another shape)."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        log.info("%s %s -> %d %s: %s", request.method, request.url.path, exc.status, exc.code, exc.message)
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return await _api_error(request, validation_error(list(exc.errors())))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            err = ApiError(404, f"There is no {request.method} {request.url.path} here; see /openapi.json.", "not_found")
        elif exc.status_code == 405:
            err = ApiError(405, f"{request.method} is not allowed on {request.url.path}.", "method_not_allowed")
        else:
            err = ApiError(exc.status_code, str(exc.detail), None)
        return await _api_error(request, err)

    @app.exception_handler(ClientDisconnect)
    async def _gone(request: Request, exc: ClientDisconnect) -> JSONResponse:
        return await _api_error(request, ApiError(400, "The request body ended before its declared length "
                                                       "(the client went away).", "incomplete_body"))

    @app.exception_handler(StorageError)
    async def _storage(request: Request, exc: StorageError) -> JSONResponse:
        return storage_response(request, exc)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:  # a full disk outside the store
            return storage_response(request, exc)
        log.error("%s %s failed: %s: %s", request.method, request.url.path, exc.__class__.__name__, exc, exc_info=exc)
        return ApiError(500, "The server failed while handling this request; the operator's log has the details.",
                        "internal_error").response()
