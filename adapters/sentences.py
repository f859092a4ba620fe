"""What a front end shows a user for a failure: the error's own sentence, except for storage
failures, whose sentences name the operator's files; those become a path-free sentence
(:func:`bot.readiness.storage_sentence`: full, busy, damaged, unavailable)."""

from __future__ import annotations

from bot.errors import StorageError
from bot.readiness import storage_sentence
from pipeline.errors import HuggingGPTError
from pipeline.types import RunRecord


def user_sentence(error: HuggingGPTError) -> str:
    """The sentence a user sees for ``error`` (no path of the server's for a storage failure)."""
    return storage_sentence(error) if isinstance(error, StorageError) else error.user_message


def record_error(record: RunRecord) -> str | None:
    """The failure sentence of a run's record, as :func:`user_sentence` (``None`` when it has none)."""
    if isinstance(record.failure, StorageError):
        return storage_sentence(record.failure)
    return record.error
