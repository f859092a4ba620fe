"""Errors of the service around the pipeline: settings, user input and storage.

Like :class:`pipeline.errors.HuggingGPTError`, each carries one sentence for the user
(``user_message``) and operator details in ``str(exc)``.
"""

from __future__ import annotations

from pipeline.errors import HuggingGPTError


class ConfigError(HuggingGPTError):
    """A setting is missing or invalid, or a credential is refused at start."""


class InputError(HuggingGPTError):
    """The user's input is unusable: file unreadable, empty, too large, mislabelled, or a request
    naming a resource the conversation does not have."""


def unknown_conversation(conversation_id: str) -> InputError:
    """The refusal of a conversation id the store does not hold (``chat --conversation``, ``store
    forget``, the MCP server's ``conversation_id`` over stdio): one sentence for every front end."""
    return InputError(f"There is no conversation {conversation_id}.")


class StorageError(HuggingGPTError):
    """The conversation store or media directory is unusable: corrupt, locked, full."""


class Refused(InputError):
    """Admission refused the request (:class:`bot.admission.Admission`): the front end says the
    sentence, formatted its way (a rate limit is not an access refusal).

    Attributes:
        reason: ``"dm" | "guild" | "channel" | "user" | "role" | "rate" | "concurrency"``, or
            ``"budget"`` (:mod:`bot.budgets`).
    """

    def __init__(self, reason: str, sentence: str) -> None:
        super().__init__(sentence, f"refused: {reason}")
        self.reason = reason
