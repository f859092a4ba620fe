"""``hugginggpt``: the command line, the one place above the adapters.

    hugginggpt run TEXT [--file PATH]... [--json] [--sandbox]
    hugginggpt chat [--conversation ID] [--sandbox]
    hugginggpt store prune|forget ID
    hugginggpt usage [--by user|channel|team] [--day YYYY-MM-DD | --month YYYY-MM] [--csv]
    hugginggpt db upgrade
    hugginggpt catalog refresh|show ...
    hugginggpt discord [--sandbox] [--grace S] [--shard-ids IDS --shard-count N]
    hugginggpt slack [--mode socket|http] [--sandbox] [--grace S]
    hugginggpt serve [--host H] [--port N] [--sandbox] [--grace S]
    hugginggpt experts serve [--host H] [--port N] [--device D] [--memory-budget SIZE] [--config FILE]
    hugginggpt experts download MODEL... | --preset minimal|standard|full
    hugginggpt mcp [--sandbox]
    hugginggpt doctor [--json] [--timeout S] [--min-free-mb MIB]
    hugginggpt eval taskbench --data FILE [--limit N] [--concurrency N] [--out FILE] [--resume] [--sandbox]
    hugginggpt eval runs --requests FILE [--files DIR] [--limit N] [--concurrency N] [--out FILE] [--sandbox]

One module per command, each with ``add_parser(subparsers)`` and ``async main(args, settings) ->
int``. Every failure a user can cause ends as one sentence on stderr and the exit status of its
class (:mod:`hugginggpt.common`); details go to ``<data_dir>/logs/hugginggpt.log``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# huggingface_hub reads this when it is first imported (below, through the commands).
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

from bot.paths import default_data_dir

__version__ = "0.1.0"
"""The program's version (the distribution's, read from here by the build: pyproject.toml)."""

COMMANDS = ("run", "chat", "store", "usage", "db", "catalog", "discord", "slack", "serve", "mcp", "experts", "eval", "doctor")
"""The command modules of this package, in ``--help``'s order (imported when the parser is built,
so ``--version`` imports none of them)."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every command."""
    parser = CommandParser(prog="hugginggpt", description="HuggingGPT chat bot: plan, select, execute, respond.")
    parser.add_argument("--config", help="TOML config file (default: $HUGGINGGPT_CONFIG or ./hugginggpt.toml)")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log to stderr too (-vv: debug)")
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and the default data dir, then exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in (importlib.import_module(f"{__name__}.{name}") for name in COMMANDS):
        command.add_parser(sub)
    for p in sub.choices.values():  # -v also after the command: hugginggpt run -v ...
        p.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help="log to stderr too (-vv: debug)")
    return parser


class CommandParser(argparse.ArgumentParser):
    """An argument parser that refuses the words it does not know itself, with its own usage
    (``hugginggpt experts serve --bogus`` prints the usage of ``experts serve``): argparse's
    subcommand parsers otherwise hand unknown words up to the top-level parser, whose usage
    names no option of the subcommand. Subcommand parsers inherit the class (argparse's
    ``parser_class`` defaults to the parent's)."""

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[no-untyped-def]
        """As :meth:`argparse.ArgumentParser.parse_known_args`, but an unknown word is this
        parser's usage error (exit status 2, its usage on stderr)."""
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


class _Version(argparse.Action):
    """``--version``: the version, and where data goes unless ``[storage] data_dir`` says otherwise."""

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[no-untyped-def]
        _print_version()
        parser.exit()


def _print_version() -> None:
    print(f"hugginggpt {package_version()}\ndata dir (unless [storage] data_dir is set): {default_data_dir()}")


def package_version() -> str:
    """The program's version (:data:`__version__`, which the build gives the distribution)."""
    return __version__


def _forgiving_streams() -> None:
    """Never die on text the terminal cannot take: what cannot be encoded or decoded is replaced
    (a user's non-UTF-8 bytes, a model's stray control of the encoding)."""
    for stream, errors in ((sys.stdout, "replace"), (sys.stderr, "backslashreplace"), (sys.stdin, "replace")):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors=errors)
            except (ValueError, OSError):  # a detached or closed stream
                pass


async def _main(args: argparse.Namespace) -> int:
    from .common import open_settings

    if getattr(args, "loads_settings", False):  # doctor: a settings problem is one of its checks
        return await args.handler(args, None)
    async with open_settings(args) as settings:
        return await args.handler(args, settings)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``hugginggpt``. Returns the exit status (:mod:`hugginggpt.common`)."""
    _forgiving_streams()
    if (sys.argv[1:] if argv is None else argv) == ["--version"]:  # answered before any command is imported
        _print_version()
        return 0
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command; a failure is one sentence on stderr and its exit status."""
    import asyncio
    import json
    import logging

    from pipeline.errors import HuggingGPTError

    from .common import BROKEN_PIPE, INTERRUPTED, exit_status, loop_factory

    log = logging.getLogger("hugginggpt")
    try:
        with asyncio.Runner(loop_factory=loop_factory(getattr(args, "event_loop", "uvloop"))) as runner:
            return runner.run(_main(args)) or 0
    except HuggingGPTError as e:
        if logging.getLogger().handlers:  # not before logging is set up (stderr would say it twice)
            log.warning("%s: %s", e.__class__.__name__, e)
        if getattr(args, "json", False):  # --json promises a document whatever happened
            doc = {"request": getattr(args, "text", None), "status": "error", "error": e.user_message,
                   "exit_status": exit_status(e)}
            _print_quietly(json.dumps(doc, indent=2, ensure_ascii=False))
        print(f"Error: {e.user_message}", file=sys.stderr)
        return exit_status(e)
    except KeyboardInterrupt:
        print("\nInterrupted. Nothing was left half-written.", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        # The reader went away (hugginggpt run ... | head -1): stop quietly, like other Unix tools.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE


def _print_quietly(text: str) -> None:
    try:
        print(text)
    except BrokenPipeError:
        pass


def exit_now(status: int) -> None:
    """Leave the process with ``status`` once its output is flushed, without the interpreter's
    teardown (freeing every module and object, which takes a noticeable share of a short run's
    wall time). Called by ``python -m hugginggpt`` after :func:`main` returned: by then every
    store, client and server is closed and asyncio's worker threads are joined.

    Args:
        status: the exit status.
    """
    logging = sys.modules.get("logging")
    if logging is not None:  # (--version never imports it)
        logging.shutdown()  # flushes and closes the log files
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more to say there
            pass
    os._exit(status)


if __name__ == "__main__":  # pragma: no cover
    exit_now(main())
