"""What a terminal user types: the request's text and the files named with ``--file`` or ``/file``,
made safe to store and print, and read with their size limit applied while reading."""

from __future__ import annotations

import asyncio
import mimetypes
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from bot.errors import InputError
from bot.incoming import IncomingFile

from . import on_ctrl_c

if TYPE_CHECKING:
    from bot.settings import Settings

READ_CHUNK = 1024 * 1024
"""Bytes read from a user's file at a time."""
READ_POLL_SECONDS = 0.05
"""Pause before trying again a file the event loop cannot wait on."""


def clean_text(text: str) -> str:
    """``text`` safe to store and print: bytes that were not UTF-8 (kept by Python as surrogate
    escapes in ``sys.argv``, PEP 383) become U+FFFD."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


async def read_user_file(path: str, settings: Settings) -> IncomingFile:
    """Read a ``--file`` (or ``/file``) argument into an :class:`IncomingFile`, bounded while it is read.

    Every kind of file is read the same way: a regular file, a pipe (``--file <(cmd)``), a named
    FIFO, a device (``/dev/stdin``, ``/dev/zero``) or a ``/proc`` file. At most ``max_bytes`` + 1
    bytes are ever held, and the whole read ends within ``timeout`` seconds; the waits yield to the
    event loop, so Ctrl-C (which cancels the task) stops a read at once.

    Args:
        path: the path as the user typed it.
        settings: ``max_bytes`` is the larger of ``[storage] max_file_bytes`` and ``[documents]
            max_pdf_bytes`` (each kind's own limit is checked after reading); ``timeout`` is
            ``[storage] file_read_timeout``: a FIFO that no program writes to, or a pipe that keeps
            sending slowly, is refused then.

    Raises:
        InputError: the file does not exist, is a directory, cannot be read, is empty, is larger
            than ``max_bytes``, or did not end within ``timeout`` seconds.
    """
    max_bytes = max(settings.storage.max_file_bytes, settings.documents.max_pdf_bytes)
    timeout = settings.storage.file_read_timeout
    shown = clean_text(path)  # opened by its real bytes; shown and stored with what is not UTF-8 replaced
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO with no writer opens at once
    except FileNotFoundError:
        raise InputError(f"The file {shown} does not exist.") from None
    except OSError as e:
        raise InputError(f"The file {shown} cannot be read ({e.strerror or e.__class__.__name__}).") from None
    try:
        kind = os.fstat(fd)
        if stat.S_ISDIR(kind.st_mode):
            raise InputError(f"{shown} is a directory, not a file.")
        if stat.S_ISREG(kind.st_mode) and kind.st_size > max_bytes:
            raise _too_large(shown, max_bytes, kind.st_size)
        try:
            async with asyncio.timeout(timeout):
                with on_ctrl_c(_interrupt):
                    data = await _read_bounded(fd, shown, max_bytes, stat.S_ISFIFO(kind.st_mode))
        except TimeoutError:
            raise InputError(f"The file {shown} was still not read after {timeout:g} seconds (a pipe or FIFO that "
                             "nothing writes to, or one that keeps sending), so I stopped reading it.") from None
        except OSError as e:
            raise InputError(f"The file {shown} cannot be read ({e.strerror or e.__class__.__name__}).") from None
    finally:
        os.close(fd)
    if not data:
        raise InputError(f"The file {shown} is empty.")
    name = clean_text(Path(path).name)
    return IncomingFile(data=data, name=name, declared_mime=mimetypes.guess_type(name)[0])


def _interrupt() -> None:
    """Ctrl-C during a read: the command is interrupted (``KeyboardInterrupt``: exit status 130).
    Through the event loop's own signal handling (:func:`adapters.terminal.on_ctrl_c`), which wakes
    the loop whichever of the process's threads the kernel hands the signal to: Python's default
    handling runs only when the main thread runs, and a signal given to a worker thread while the
    loop waited on a silent FIFO was seen only when the read timed out."""
    raise KeyboardInterrupt


def _too_large(shown: str, max_bytes: int, size: int | None) -> InputError:
    """The refusal of a file larger than ``max_bytes`` (``size``: its size when known, in bytes)."""
    from bot.settings import MiB  # loaded with the settings already

    if size is None:  # a stream (a device, a pipe): read up to the limit and past it
        return InputError(f"The file {shown} goes on past the limit of {max_bytes / MiB:g} MiB.",
                          f"read of {shown} stopped past max_bytes {max_bytes}")
    return InputError(f"The file {shown} is {size / MiB:.1f} MiB; the limit is {max_bytes / MiB:g} MiB.",
                      f"read of {shown} stopped past max_bytes {max_bytes}")


async def _read_bounded(fd: int, shown: str, max_bytes: int, fifo: bool) -> bytes:
    """The bytes of the open, non-blocking ``fd`` up to its end.

    Raises:
        InputError: more than ``max_bytes`` arrived (the read stops at ``max_bytes`` + 1).
        OSError: the read failed.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        if fifo:  # a FIFO with no writer yet reads as its end: wait until one writes or hangs up
            await _readable(fd)
        try:
            chunk = os.read(fd, min(READ_CHUNK, max_bytes + 1 - size))
        except BlockingIOError:  # a terminal or socket with nothing yet
            await _readable(fd)
            continue
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            raise _too_large(shown, max_bytes, None)
        await asyncio.sleep(0)  # Ctrl-C and the timeout act between chunks of an endless device


async def _readable(fd: int) -> None:
    """Return once ``fd`` has data or its writer hung up (after a short pause for a file the event
    loop cannot watch, such as a regular file or some devices)."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    try:
        loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
    except OSError:  # epoll refuses this kind of file
        await asyncio.sleep(READ_POLL_SECONDS)
        return
    try:
        await ready
    finally:
        loop.remove_reader(fd)
