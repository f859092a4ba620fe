"""What every command shares: the options defined once, loading settings (with the sandbox),
and the exit status each error class means.

Exit statuses (docs/command-line.md): 0 ok (every task succeeded);
2 settings; 3 input (a file, an empty request, an unknown conversation); 4 controller; 5 plan; 6 answered, but some task failed or was skipped
(and a backend such as the Hub failed: ``catalog refresh``, ``experts download``); 7 the
run's deadline passed; 8 storage; 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shlex
import shutil
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.errors import (CatalogError, ControllerError, DeadlineError, ExpertError, HubError, HuggingGPTError,
                             PlanError)
from pipeline import tracing
from pipeline.types import RunRecord

from bot.errors import ConfigError, InputError, StorageError
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
    HubError: 6,
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


def loop_factory(event_loop: str = "uvloop") -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop a command runs on (``asyncio.Runner``'s ``loop_factory``): uvloop's, a
    dependency wherever it builds (not on Windows), whose I/O callbacks and timers are C code on
    libuv where the standard library's are Python on ``selectors``.

    Args:
        event_loop: ``"uvloop"``, or ``"asyncio"`` for a command whose parser sets it (``experts
            serve``: see its ``set_defaults``).

    Returns:
        ``uvloop.new_event_loop``; ``None`` (asyncio's own loop) for ``"asyncio"`` or where uvloop
        is not installed.
    """
    if event_loop == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


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


def program_words() -> list[str]:
    """The words that start this program the way the user started it, for hints they can follow
    as printed: ``python -m hugginggpt`` when run as a module (the interpreter by its bare name
    when ``PATH`` finds that very interpreter, else by its path), else the script as invoked
    (``hugginggpt`` when ``PATH`` finds that very script, else the path typed, such as
    ``.venv/bin/hugginggpt``). Paths are compared unresolved: a virtual environment's ``python``
    is a link to the system's, but runs with other packages."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name == f"{__package__}.__main__":
        exe = sys.executable or "python3"
        name = os.path.basename(exe)
        found = shutil.which(name)
        return [name if found and os.path.abspath(found) == os.path.abspath(exe) else exe, "-m", __package__]
    script = sys.argv[0] if sys.argv and sys.argv[0] else __package__
    name = os.path.basename(script)
    found = shutil.which(name)
    return [name if found and os.path.abspath(found) == os.path.abspath(script) else script]


def command_hint(args: argparse.Namespace, *words: str) -> str:
    """The shell command running ``words`` (a command and its options) the way the user ran
    this one: :func:`program_words`, the ``--config`` they gave and the ``--sandbox`` they gave;
    quoted for a POSIX shell."""
    config = ["--config", args.config] if getattr(args, "config", None) else []
    sandbox = ["--sandbox"] if getattr(args, "sandbox", False) else []
    return shlex.join([*program_words(), *config, *words, *sandbox])


@contextlib.asynccontextmanager
async def open_settings(args: argparse.Namespace) -> AsyncIterator[Settings]:
    """Load settings (starting the sandbox stand-ins first with ``--sandbox``) and set up logging.

    Raises:
        ConfigError: the config file or a value is invalid.
    """
    overrides: dict[str, dict[str, Any]] = {}
    sandbox = None
    if getattr(args, "sandbox", False):
        if getattr(args, "before_sandbox", None) is not None:  # run: says it is starting before the stand-ins load
            args.before_sandbox(args)
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
        telemetry = settings.telemetry
        tracing.install(telemetry.otlp_endpoint, service="hugginggpt", trace_content=telemetry.trace_content)
        yield settings
    finally:
        if tracing.enabled():  # the spans still waiting are sent (a blocking HTTP call: off the loop)
            await asyncio.to_thread(tracing.shutdown)
        if sandbox is not None:
            await sandbox.close()


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
