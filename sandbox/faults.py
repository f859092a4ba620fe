"""The error a stand-in raises to answer with an HTTP error status (sandbox only)."""

from __future__ import annotations

from typing import Any


class Fault(Exception):
    """Answer the current inference request with ``status`` and the JSON ``body``.

    Args:
        status: HTTP status code (400 bad input, 404 unknown model, 429, 503, 504).
        body: the JSON error body, Hugging Face style: ``{"error": str, "estimated_time"?: seconds}``.
    """

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(status, body)
        self.status = status
        self.body = body
