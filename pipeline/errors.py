"""Errors the four stages raise. Each carries one sentence for the user.

``user_message`` is safe to show in a chat (no secrets, no paths outside the conversation, no
traceback); ``str(exc)`` may carry operator details for the log. Errors of the service around the
pipeline (settings, user input, storage) live in :mod:`bot.errors`; which exit status each class
means to the command line is decided in :mod:`hugginggpt.common`.
"""

from __future__ import annotations


class HuggingGPTError(Exception):
    """Base class of every error that ends as one sentence for the user (``user_message``)."""

    def __init__(self, user_message: str, detail: str | None = None) -> None:
        super().__init__(detail or user_message)
        self.user_message = user_message


class CatalogError(HuggingGPTError):
    """The model catalog file is missing, unreadable or has an invalid record."""


class HubError(CatalogError):
    """The Hugging Face Hub could not be reached or answered with an error while the catalog was
    rebuilt or models downloaded: a backend failed, not a setting (exit status: that of a failed
    expert, :mod:`hugginggpt.common`)."""


class ControllerError(HuggingGPTError):
    """The controller LLM is unreachable, refused the key, rate-limited or timed out."""


class PlanError(HuggingGPTError):
    """The controller's plan could not be parsed or validated, even after one repair round."""


class DeadlineError(HuggingGPTError):
    """The run's deadline (``[inference] deadline``, the whole run) passed before an answer existed."""


class StoppedError(HuggingGPTError):
    """The user stopped the run (a Stop button, Ctrl-C) before there was anything to answer with."""


class ExpertError(HuggingGPTError):
    """An expert model call failed.

    Attributes:
        reason: ``"gone"`` (404/410), ``"refused"`` (400/401/403/422), ``"loading"`` (503),
            ``"rate_limited"`` (429), ``"timeout"``, ``"server"`` (other 5xx), ``"bad_output"``,
            ``"unavailable"`` (no backend configured for the task), ``"too_large"`` (a reply over a
            size or pixel limit, ``[inference] max_*``).
        retryable: whether the same model may succeed on a later try (429, 503, timeout, 5xx).
        estimated_time: seconds the server says the model needs to load (503), if given.
    """

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
