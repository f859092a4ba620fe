"""A stdio tool server's stderr, capped: what the program writes there reaches its log (the file
``[mcp]`` names, else this process's stderr) only up to ``max_log_bytes`` per start of the
program; the rest is read and discarded, with one line in the log file and one warning in the
application's log saying so. A program that writes without end therefore neither fills the disk
nor blocks on a full pipe.

The SDK's ``stdio_client`` hands its ``errlog`` to the subprocess as its stderr, so it must be a
real file: it gets the write end of a pipe whose read end a thread of this process copies.
A log file larger than the cap when the program starts is first moved to ``<file>.1`` (one
older file is kept), so the files of one server hold at most about four times the cap.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

CHUNK = 64 * 1024
"""Bytes read from the pipe at a time."""
STDERR = 2


def _open_log(path: Path | None, limit: int) -> int:
    """The descriptor to copy to: ``path`` opened for appending (moved to ``<path>.1`` first when
    larger than ``limit`` bytes), or this process's stderr.

    Raises:
        OSError: the file cannot be created or moved.
    """
    if path is None:
        return STDERR
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        if path.stat().st_size > limit:
            os.replace(path, path.with_name(path.name + ".1"))
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


class CappedErrlog:
    """The pipe a program's stderr goes into, and the thread that copies at most ``limit`` bytes
    of it to ``dest``.

    Args:
        server: the server's configured name (for the log).
        dest: a writable descriptor (closed by the thread at the end unless it is stderr).
        limit: bytes copied at most; the rest is discarded.
    """

    def __init__(self, server: str, dest: int, limit: int) -> None:
        self.server, self.dest, self.limit = server, dest, limit
        self.kept = self.dropped = 0
        read, write = os.pipe()
        self.writer: IO[str] = os.fdopen(write, "w")
        self._thread = threading.Thread(target=self._copy, args=(read,), name=f"mcp-stderr-{server}", daemon=True)
        self._thread.start()

    def _copy(self, read: int) -> None:
        try:
            with os.fdopen(read, "rb", buffering=0) as pipe:
                while chunk := pipe.read(CHUNK):
                    self._take(chunk)
        finally:
            if self.dest != STDERR:
                os.close(self.dest)

    def _take(self, chunk: bytes) -> None:
        room = max(0, self.limit - self.kept)
        if room:
            os.write(self.dest, chunk[:room])
            self.kept += min(room, len(chunk))
        if len(chunk) <= room:
            return
        if not self.dropped:
            os.write(self.dest, f"\n[hugginggpt: more than {self.limit:,} bytes since the program started; "
                                "the rest of its output is discarded]\n".encode())
            log.warning("MCP server %s wrote more than %d bytes to stderr since it started; the rest is "
                        "discarded ([mcp] max_log_bytes)", self.server, self.limit)
        self.dropped += len(chunk) - room

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the program's end of the pipe to close."""
        self._thread.join(timeout)


@contextlib.asynccontextmanager
async def capped_stderr(server: str, path: Path | None, limit: int,
                        transport: Callable[[IO[str]], Any]) -> AsyncIterator[Any]:
    """The streams of ``transport(errlog)``, the program's stderr capped at ``limit`` bytes and
    copied to ``path`` (``None``: this process's stderr); see the module docstring.

    Raises:
        OSError: the log file cannot be opened (the server is then left out, as unreachable).
    """
    capped = CappedErrlog(server, _open_log(path, limit), limit)
    try:
        async with transport(capped.writer) as streams:
            capped.writer.close()  # the program holds its own copy: its exit ends the thread
            yield streams
    finally:
        capped.writer.close()
