"""``hugginggpt run TEXT [--file PATH]... [--json] [--sandbox]``: one request end to end.

On a terminal the run is drawn live and the answer rendered as Markdown (the chat's renderer,
:mod:`adapters.terminal.live`). When stdout is not a terminal, progress goes to stderr and stdout
holds only the answer and its list of files (``hugginggpt run … > answer.md``); with ``--json``
stdout holds only the JSON document (progress on stderr with ``-v``).

Ctrl-C once stops the run: tasks still running are cancelled, the answer covers what finished
(written without the controller) and the exit status is 130; a second Ctrl-C quits at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .common import add_sandbox_option, exit_status, record_exit_status

if TYPE_CHECKING:
    from bot.settings import Settings


def add_parser(subparsers: Any) -> None:
    """Add ``run`` to the command line's subparsers."""
    p = subparsers.add_parser("run", help="run one request end to end")
    p.add_argument("text", help="the request")
    p.add_argument("--file", action="append", default=[], metavar="PATH", help="attach a file (repeatable)")
    p.add_argument("--json", action="store_true", help="print the machine-readable record of the run")
    p.add_argument("--yes", action="store_true", help="run a plan that needs approval ([planning] approve) without "
                   "asking; without it, such a plan is asked y/N on the terminal and refused where there is none")
    add_sandbox_option(p)
    p.set_defaults(handler=main, before_sandbox=say_starting)


def say_starting(args: argparse.Namespace) -> None:
    """Refuse a request over ``[planning] max_request_chars`` (before anything is said or loaded),
    then say, once, that the run is starting: called by ``main`` and, with ``--sandbox``, before
    the stand-ins load (they take a moment too).

    Raises:
        InputError: the request is too long (exit status 3); ConfigError: the settings are invalid.
    """
    if getattr(args, "said_starting", False):
        return
    from adapters.terminal.files import clean_text
    from bot.limits import check_request_size
    from bot.settings import load_settings  # the stand-ins change only the backends' addresses

    args.text = clean_text(args.text)
    check_request_size(args.text, load_settings(args.config).planning.max_request_chars)
    _starting_line(args)


def _starting_line(args: argparse.Namespace) -> None:
    args.said_starting = True
    if not args.json or args.verbose:  # said at once: loading the pipeline and its clients takes a moment
        print("Starting: loading the planner and the model clients…", file=sys.stdout if sys.stdout.isatty() and
              not args.json else sys.stderr, flush=True)


async def main(args: argparse.Namespace, settings: Settings) -> int:
    """Run one request, render its progress, and return the exit status of the run.

    Raises:
        InputError: a ``--file`` cannot be read or is unusable, or the request is longer than
            ``[planning] max_request_chars`` (exit status 3).
        ConfigError, StorageError: settings or storage unusable.
    """
    from adapters.terminal.files import clean_text, read_user_file

    from bot.store.deferred import begin_store_imports

    begin_store_imports(settings.storage)  # on a thread while the pipeline loads: the media ledger opens sooner
    files = [await read_user_file(p, settings) for p in args.file]
    if not getattr(args, "said_starting", False):
        from bot.limits import check_request_size

        args.text = clean_text(args.text)
        check_request_size(args.text, settings.planning.max_request_chars)  # before anything is said or loaded
        _starting_line(args)
    from adapters.terminal import TerminalView, terminal_renderer  # the pipeline and its clients load now
    from adapters.terminal.lines import TerminalRenderer
    from adapters.turn import follow

    from bot.incoming import Message
    from bot.service import Service

    service = await Service.create(settings, conversations=False)  # stores no turn: no store to open
    stop = asyncio.Event()
    renderer = TerminalRenderer(sys.stderr) if args.json else terminal_renderer(sys.stdout, sys.stderr, os.environ)
    view = TerminalView(renderer, show_progress=not args.json or args.verbose, say_refusal=False)
    try:
        with _ctrl_c_stops(stop, renderer.say):
            outcome = await follow(service.handle(Message(args.text, files, stop=stop)), view, where="run")
            if outcome.moment == "awaiting" and view.waiting is not None:
                outcome = await _approved_run(args, service, view, stop)
    finally:
        renderer.close()
        await service.close()
    if outcome.moment == "refused" and outcome.error is not None:
        raise outcome.error  # the command line says it once, with its exit status (and --json's document)
    record = outcome.record
    if outcome.moment == "awaiting":  # cancelled at the prompt: nothing ran, as asked
        return 0
    if record is None:  # crashed: said by the view, the traceback is in the log
        status = exit_status(outcome.error) or 1
        if args.json:  # --json promises a document whatever happened
            print(json.dumps({"request": args.text, "status": "error", "error": outcome.sentence, "exit_status": status},
                             indent=2, ensure_ascii=False))
        return status
    if args.json:
        doc = record.to_json()
        doc["exit_status"] = record_exit_status(record)
        print(json.dumps(doc, indent=2, ensure_ascii=False))
    return record_exit_status(record)


async def _approved_run(args: argparse.Namespace, service: Any, view: Any, stop: asyncio.Event) -> Any:
    """Ask y/N for the plan waiting in ``view`` and run it, or cancel it (said; exit status 0 with
    nothing run). Returns the outcome of the run or of the refusal (its error re-raised by ``main``)."""
    from adapters.terminal import TerminalView, ask_approval, terminal_renderer
    from adapters.terminal.lines import TerminalRenderer
    from adapters.turn import Outcome, follow
    from bot.approval import Approve
    from bot.errors import InputError
    from bot.incoming import Message

    waiting = view.waiting
    out = sys.stderr if args.json or not sys.stdout.isatty() else sys.stdout
    try:
        approved = await ask_approval(waiting, yes=args.yes, stdin=sys.stdin, out=out)
    except InputError as e:
        await service.cancel_plan(waiting.plan_id, None)
        return Outcome("refused", e.user_message, error=e)
    if not approved:
        print(await service.cancel_plan(waiting.plan_id, None), file=out, flush=True)
        return Outcome("awaiting", None)
    renderer = TerminalRenderer(sys.stderr) if args.json else terminal_renderer(sys.stdout, sys.stderr, os.environ)
    again = TerminalView(renderer, show_progress=not args.json or args.verbose, say_refusal=False)
    try:
        return await follow(service.handle(Message("", stop=stop, approve=Approve(waiting.plan_id))), again, where="run")
    finally:
        renderer.close()


def _ctrl_c_stops(stop: asyncio.Event, say: Callable[[str], None]) -> contextlib.AbstractContextManager[None]:
    """While active, the first SIGINT sets ``stop`` (``say`` tells the user, with the progress)
    and gives Ctrl-C back its usual meaning (a second one cancels the command: exit status 130
    at once)."""
    from adapters.terminal import on_ctrl_c

    def first() -> None:
        say("Stopping this run… (Ctrl-C again to quit at once)")
        stop.set()

    return on_ctrl_c(first, once=True)
