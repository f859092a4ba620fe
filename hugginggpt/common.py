"""What every command shares: the options defined once, loading settings (with the sandbox),
reading ``--file`` arguments, and the exit status each error class means.

Exit statuses (docs/command-line.md): 0 ok (every task succeeded);
2 settings; 3 input (a file, an empty request, an unknown conversation); 4 controller; 5 plan; 6 answered, but some task failed or was skipped; 7 the
run's deadline passed; 8 storage; 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import mimetypes
import os
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.errors import CatalogError, ControllerError, DeadlineError, ExpertError, HuggingGPTError, PlanError
from pipeline.types import RunRecord

from bot.errors import ConfigError, InputError, StorageError
from bot.incoming import IncomingFile
from bot.logs import setup_logging

if TYPE_CHECKING:
    from bot.settings import Settings

log = logging.getLogger("hugginggpt")

EXIT_STATUS: dict[type[HuggingGPTError], int] = {
    ConfigError: 2,
    CatalogError: 2,
    InputError: 3,
    ControllerError: 4,
    PlanError: 5,
    ExpertError: 6,
    DeadlineError: 7,
    StorageError: 8,
}
"""Error class → exit status of the command line (subclasses inherit their base's status)."""
INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT, the shell convention)."""
BROKEN_PIPE = 141
"""Exit status when the reader of our output went away (128 + SIGPIPE, as ``cat`` or ``grep``)."""
MAX_PORT = 65535
"""The largest TCP port number (RFC 793: 16 bits)."""
READ_CHUNK = 1024 * 1024
"""Bytes read from a user's file at a time."""
READ_POLL_SECONDS = 0.05
"""Pause before trying again a file the event loop cannot wait on."""


def clean_text(text: str) -> str:
    """``text`` safe to store and print: bytes that were not UTF-8 (kept by Python as surrogate
    escapes in ``sys.argv``, PEP 383) become U+FFFD."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def exit_status(error: BaseException | None) -> int:
    """The exit status for ``error`` (``None``: 0; an error of no listed class: 1)."""
    if error is None:
        return 0
    for cls in type(error).__mro__:
        if cls in EXIT_STATUS:
            return EXIT_STATUS[cls]
    return 1


PARTIAL = 6
"""Exit status of a run that answered but had a task fail or be skipped."""
DEADLINE = 7
"""Exit status of a run whose deadline passed (with or without a partial answer)."""


def record_exit_status(record: RunRecord) -> int:
    """The exit status of a finished run: 130 when the user stopped it, 7 when its deadline passed, else 0 for ``"ok"``, 6 for
    ``"partial"``, and that of its error for ``"error"``."""
    if record.stopped:
        return INTERRUPTED
    if record.deadline_passed:
        return DEADLINE
    if record.status == "ok":
        return 0
    if record.status == "partial":
        return PARTIAL
    return exit_status(record.failure) or 1


# ----------------------------------------------------------------------------------------------
# Options shared by several commands, each defined once


def add_sandbox_option(parser: argparse.ArgumentParser, still_needed: str | None = None) -> None:
    """``--sandbox``: run on the stand-in backends for the controller and the models.

    Args:
        still_needed: the credentials the command needs even then (a chat platform's tokens), said
            in the help; ``None``: no credentials at all.
    """
    needed = f"{still_needed} still needed" if still_needed else "no credentials needed"
    parser.add_argument(
        "--sandbox", action="store_true",
        help=f"use stand-in backends on 127.0.0.1 for the controller and the models ({needed})",
    )


def add_grace_option(parser: argparse.ArgumentParser) -> None:
    """``--grace SECONDS``: how long runs in flight may finish on shutdown."""
    parser.add_argument(
        "--grace", type=float, default=30.0, metavar="SECONDS",
        help="on shutdown, let runs in flight finish this long before marking them interrupted (default 30)",
    )


def port_number(text: str) -> int:
    """``--port``'s type: a TCP port, 0 (any free port) to 65535.

    Raises:
        argparse.ArgumentTypeError: ``text`` is not such a number (argparse's usage error, exit 2).
    """
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: give a whole number from 0 to {MAX_PORT}")
    return port


@contextlib.asynccontextmanager
async def open_settings(args: argparse.Namespace) -> AsyncIterator[Settings]:
    """Load settings (starting the sandbox stand-ins first with ``--sandbox``) and set up logging.

    Raises:
        ConfigError: the config file or a value is invalid.
    """
    overrides: dict[str, dict[str, Any]] = {}
    sandbox = None
    if getattr(args, "sandbox", False):
        from sandbox import Sandbox

        sandbox = await Sandbox().start()
        overrides = sandbox.overrides()
    try:
        from bot.settings import load_settings  # pydantic loads when a command runs, not for --help

        settings = load_settings(args.config, overrides=overrides)
        setup_logging(
            verbose=args.verbose,
            log_file=settings.storage.data_dir / "logs" / "hugginggpt.log",
            secrets=settings.secret_values(),
        )
        yield settings
    finally:
        if sandbox is not None:
            await sandbox.close()


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


def _too_large(shown: str, max_bytes: int, size: int | None) -> InputError:
    """The refusal of a file larger than ``max_bytes`` (``size``: its size when known, in bytes)."""
    from bot.settings_sections import MiB  # loaded with the settings already

    what = f"is {size / MiB:.1f} MiB" if size is not None else "is larger than that"
    return InputError(f"The file {shown} {what}; the limit is {max_bytes / MiB:g} MiB.",
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


def print_report(report: dict[str, Any], table: str, out_name: str | None) -> None:
    """Print an evaluation's Markdown ``table``; with ``--out``, write ``report`` as JSON there and
    the table beside it (``OUT.md``).

    Raises:
        InputError: a file cannot be written.
    """
    print(table)
    if out_name:
        out = Path(out_name)
        try:
            out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
            out.with_name(out.name + ".md").write_text(table + "\n", encoding="utf-8")
        except OSError as e:
            raise InputError(f"The report cannot be written to {out_name} ({e.strerror}).") from None
        print(f"\nReport: {out} (JSON), {out.name}.md (Markdown).", file=sys.stderr)
