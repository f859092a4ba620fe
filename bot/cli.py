"""``hugginggpt``: the command line (ARCHITECTURE.md, "Configuration and command line").

    hugginggpt run TEXT [--file PATH]... [--json] [--sandbox]
    hugginggpt chat [--conversation ID] [--sandbox]
    hugginggpt catalog refresh|show ...
    hugginggpt store prune|forget ID
    hugginggpt discord | slack

Every failure a user can cause ends as one sentence on stderr and a non-zero exit status
(2 settings, 3 input, 4 controller, 5 plan, 6 experts, 7 deadline, 8 storage, 130 Ctrl-C);
details go to the log file ``<data_dir>/logs/hugginggpt.log``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import logging
import mimetypes
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.errors import HuggingGPTError, InputError

from .config import Settings, load_settings
from .logs import setup_logging

if TYPE_CHECKING:
    from .service import IncomingFile

log = logging.getLogger("hugginggpt")

os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def _secrets(settings: Settings) -> list[str]:
    values = []
    for section in (settings.llm, settings.inference, settings.discord, settings.slack):
        for name in type(section).model_fields:
            v = getattr(section, name)
            if hasattr(v, "get_secret_value"):
                values.append(v.get_secret_value())
    return values


@contextlib.asynccontextmanager
async def open_settings(args: argparse.Namespace) -> AsyncIterator[Settings]:
    """Load settings (starting the sandbox stand-ins first with ``--sandbox``) and set up logging.

    Raises:
        ConfigError: the config file or a value is invalid.
    """
    overrides: dict[str, dict[str, Any]] = {}
    sandbox = None
    if getattr(args, "sandbox", False):
        from .sandbox import Sandbox

        sandbox = await Sandbox().start()
        overrides = sandbox.overrides()
    try:
        settings = load_settings(args.config, overrides=overrides)
        setup_logging(
            verbose=args.verbose, log_file=settings.storage.data_dir / "logs" / "hugginggpt.log", secrets=_secrets(settings)
        )
        yield settings
    finally:
        if sandbox is not None:
            await sandbox.close()


def read_user_file(path: str) -> IncomingFile:
    """Read a ``--file`` argument.

    Raises:
        InputError: the file does not exist or cannot be read.
    """
    from .service import IncomingFile

    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise InputError(f"The file {path} does not exist.") from None
    except IsADirectoryError:
        raise InputError(f"{path} is a directory, not a file.") from None
    except OSError as e:
        raise InputError(f"The file {path} cannot be read ({e.strerror or e.__class__.__name__}).") from None
    return IncomingFile(data=data, name=p.name, declared_mime=mimetypes.guess_type(p.name)[0])


async def cmd_run(args: argparse.Namespace) -> int:
    """``hugginggpt run``: one request end to end."""
    from adapters.terminal import TerminalRenderer
    from pipeline.types import Done

    from .service import Service

    files = [read_user_file(p) for p in args.file]
    async with open_settings(args) as settings:
        service = await Service.create(settings)
        try:
            renderer = TerminalRenderer(sys.stderr if args.json else sys.stdout)
            record = None
            async for event in service.handle(args.text, files):
                if not args.json or args.verbose:
                    renderer.render(event)
                elif isinstance(event, Done) and event.record.status == "error":
                    renderer.finish(event.record)
                if isinstance(event, Done):
                    record = event.record
        finally:
            await service.close()
    assert record is not None
    if args.json:
        print(json.dumps(record.to_json(), indent=2, ensure_ascii=False))
    return record.exit_code


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(prog="hugginggpt", description="HuggingGPT chat bot: plan, select, execute, respond.")
    parser.add_argument("--config", help="TOML config file (default: $HUGGINGGPT_CONFIG or ./hugginggpt.toml)")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log to stderr too (-vv: debug)")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run one request end to end")
    run.add_argument("text", help="the request")
    run.add_argument("--file", action="append", default=[], metavar="PATH", help="attach a file (repeatable)")
    run.add_argument("--json", action="store_true", help="print the machine-readable record of the run")
    run.add_argument("--sandbox", action="store_true", help="use in-process stand-in backends (no credentials needed)")
    run.set_defaults(func=cmd_run)

    for module in dict.fromkeys(_SUBCOMMAND_MODULES.values()):
        importlib.import_module(module).add_parser(sub)
    return parser


# Subcommands living in their own modules: each has add_parser(subparsers) and
# async main(args, settings) -> int; the CLI loads the settings and calls main.
_SUBCOMMAND_MODULES: dict[str, str] = {
    "catalog": "bot.catalog_cmd",
    "chat": "bot.chat_cmd",
    "store": "bot.chat_cmd",
    "discord": "adapters.discord_cmd",
    "slack": "adapters.slack_cmd",
}


async def _module_command(args: argparse.Namespace) -> int:
    mod = importlib.import_module(_SUBCOMMAND_MODULES[args.command])
    async with open_settings(args) as settings:
        return await mod.main(args, settings)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``hugginggpt``. Returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None) if args.command not in _SUBCOMMAND_MODULES else _module_command
    try:
        return asyncio.run(func(args)) or 0
    except HuggingGPTError as e:
        log.warning("%s: %s", e.__class__.__name__, e)
        print(f"Error: {e.user_message}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("\nInterrupted. Nothing was left half-written.", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
