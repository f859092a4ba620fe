"""Errors a user can cause or meet. Each carries one sentence for the user.

``user_message`` is safe to show in a chat (no secrets, no paths outside the conversation, no
traceback); ``str(exc)`` may carry operator details for the log.
"""

from __future__ import annotations


class HuggingGPTError(Exception):
    """Base class. ``user_message``: one sentence for the user; ``exit_code``: CLI exit status."""

    exit_code = 1

    def __init__(self, user_message: str, detail: str | None = None) -> None:
        super().__init__(detail or user_message)
        self.user_message = user_message


class ConfigError(HuggingGPTError):
    """A setting is missing or invalid (exit status 2)."""

    exit_code = 2


class InputError(HuggingGPTError):
    """The user's input is unusable: file unreadable, empty, too large, mislabelled (exit status 3)."""

    exit_code = 3


class ControllerError(HuggingGPTError):
    """The controller LLM is unreachable, refused the key, rate-limited or timed out (exit status 4)."""

    exit_code = 4


class PlanError(HuggingGPTError):
    """The controller's plan could not be parsed or validated, even after one repair round (exit 5)."""

    exit_code = 5


class ExpertError(HuggingGPTError):
    """An expert model call failed.

    Attributes:
        reason: ``"gone"`` (404/410), ``"refused"`` (400/401/403/422), ``"loading"`` (503),
            ``"rate_limited"`` (429), ``"timeout"``, ``"server"`` (other 5xx), ``"bad_output"``,
            ``"unavailable"`` (no backend configured for the task).
        retryable: whether the same model may succeed on a later try (429, 503, timeout, 5xx).
        estimated_time: seconds the server says the model needs to load (503), if given.
    """

    exit_code = 6

    def __init__(
        self,
        user_message: str,
        detail: str | None = None,
        *,
        reason: str = "server",
        retryable: bool = False,
        estimated_time: float | None = None,
    ) -> None:
        super().__init__(user_message, detail)
        self.reason = reason
        self.retryable = retryable
        self.estimated_time = estimated_time


class DeadlineExceeded(HuggingGPTError):
    """The overall deadline for a run passed (exit status 7)."""

    exit_code = 7


class StorageError(HuggingGPTError):
    """The conversation store or media directory is unusable: corrupt, locked, full (exit 8)."""

    exit_code = 8
