"""Errors the server answers in Hugging Face's error shape, ``{"error": "<one sentence>"}``.

Every error a request can meet is one of these; the app turns it into its status code and one log
line (no traceback: the cause is the caller's input or the machine's limits, not a bug).
"""

from __future__ import annotations


class ExpertError(Exception):
    """Base class. ``status`` is the HTTP status; ``message`` the sentence the caller sees."""

    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def body(self) -> dict:
        """The JSON body of the error response (Hugging Face's shape)."""
        return {"error": self.message}


class BadPayload(ExpertError):
    """400: the request body does not fit the task; the sentence names the field."""

    status = 400

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"Field '{field}' {problem}.")
        self.field = field


class TooLarge(ExpertError):
    """413: one part of the request is over a limit of the server's settings; the sentence names
    the part and the setting."""

    status = 413

    def __init__(self, field: str, problem: str, setting: str) -> None:
        super().__init__(f"Field '{field}' {problem}, over this server's limit ({setting}).")
        self.field = field


class Unauthorized(ExpertError):
    """401: the request carries no API key, or a wrong one."""

    status = 401


class Forbidden(ExpertError):
    """403: a web page of another origin sent the request."""

    status = 403


class WrongHost(ExpertError):
    """421: the ``Host`` header names a host this server does not answer to (DNS rebinding)."""

    status = 421


class UnknownModel(ExpertError):
    """404: the model is not in the cache, not allowed, or not servable here."""

    status = 404


class Refused(ExpertError):
    """507: the model can never fit the memory budget (state ``refused`` in ``/models``)."""

    status = 507


class OutOfMemory(ExpertError):
    """503: memory ran out during inference; the model was unloaded and the server keeps serving."""

    status = 503


class Busy(ExpertError):
    """503: the model's queue is full, or the memory budget is held by the inputs waiting; retry
    later (``Retry-After`` is sent)."""

    status = 503


class NotReady(ExpertError):
    """503: the server is still reading its model cache."""

    status = 503


class DeadlineExceeded(ExpertError):
    """504: the request's deadline passed before its result was ready."""

    status = 504


class ModelFailed(ExpertError):
    """500: the model could not be loaded or raised during inference (details in the log)."""

    status = 500


class ClientClosed(ExpertError):
    """499 (nginx's code): the client disconnected; nobody reads this answer."""

    status = 499


SHOWN_CHARS = 200
"""Characters of a caller's value (a model id, a field) kept in a sentence or a log line."""


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``value`` safe to echo into a sentence or a log line: control characters (NUL, newlines,
    escapes) written as ``\\xNN``/``\\n`` escapes, and cut to ``limit`` characters with ``…``."""
    text = str(value)
    safe = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:limit])
    return safe[:limit] + ("…" if len(safe) > limit or len(text) > limit else "")
