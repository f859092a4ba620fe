"""Storage: conversations (protocol, SQLite), the media store and sinks for generated files.

May import :mod:`pipeline` (types) and the rest of :mod:`bot` below the service (settings,
errors, tokens); never the service, the command line or :mod:`adapters`.
"""

from .media import LocalResourceSink, MediaStore
from .protocol import ConversationStore, MediaWriter, PruneReport
from .sqlite import SQLiteStore, open_store

__all__ = [
    "ConversationStore",
    "LocalResourceSink",
    "MediaStore",
    "MediaWriter",
    "PruneReport",
    "SQLiteStore",
    "open_store",
]
