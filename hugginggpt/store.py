"""``hugginggpt store prune|forget ID``: conversation storage maintenance, on the store the settings
choose (``[storage] database_url`` or the SQLite file in ``data_dir``).

Safe while bots or other commands use the same store: ``prune`` first marks the running
turns of gone processes interrupted, then deletes only what no live process is using and nothing
used in the last 10 minutes (rules: :mod:`bot.store.retention`, :mod:`bot.store.lease`).
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import TYPE_CHECKING, Any, TextIO

from bot.errors import InputError, unknown_conversation

if TYPE_CHECKING:
    from bot.settings import Settings


MAX_DAYS = 36500.0
"""Largest ``--max-age-days`` (100 years, as ``[storage] max_age_days``)."""
MAX_MB = float(2**30)
"""Largest ``--max-media-mb`` (1 PiB)."""


def _days(text: str) -> float:
    """``--max-age-days``: a finite number of days, > 0 and <= :data:`MAX_DAYS`."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of days, not {text!r}") from None
    if not math.isfinite(v) or v <= 0 or v > MAX_DAYS:
        raise argparse.ArgumentTypeError(f"must be a number of days above 0 and at most {MAX_DAYS:g}, not {text}")
    return v


def _mib(text: str) -> float:
    """``--max-media-mb``: a finite number of MiB, >= 0 (0 frees every unprotected file) and
    <= :data:`MAX_MB`."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of MiB, not {text!r}") from None
    if not math.isfinite(v) or v < 0 or v > MAX_MB:
        raise argparse.ArgumentTypeError(f"must be a number of MiB from 0 to {MAX_MB:.0f}, not {text}")
    return v


def add_parser(subparsers: Any) -> None:
    """Add ``store prune`` and ``store forget ID`` to the command line's subparsers."""
    store = subparsers.add_parser("store", help="conversation storage maintenance")
    ssub = store.add_subparsers(dest="store_command", required=True, metavar="{prune,forget}")
    prune = ssub.add_parser("prune", help="apply the retention settings ([storage] max_age_days, max_media_bytes)")
    prune.add_argument("--max-age-days", type=_days, metavar="DAYS", help="override [storage] max_age_days (> 0)")
    prune.add_argument(
        "--max-media-mb", type=_mib, metavar="MIB", help="override [storage] max_media_bytes, in MiB (>= 0)"
    )
    forget = ssub.add_parser("forget", help="delete one conversation and its files")
    forget.add_argument("id", help="conversation id")
    store.set_defaults(handler=main)


async def main(args: argparse.Namespace, settings: Settings, out: TextIO = sys.stdout) -> int:
    """``store prune`` / ``store forget ID``. Option values were checked by the parser (a negative
    or absurd value is refused with one sentence and exit status 2).

    Raises:
        StorageError: the database is unusable.
        InputError: unknown conversation id (forget).
    """
    storage = settings.storage.model_copy(update={"max_age_days": None, "max_media_bytes": None})  # prune below
    from bot.store import MediaStore, open_store  # the store's drivers load when the command runs

    store = await open_store(storage, MediaStore(settings.storage.data_dir))
    try:
        if args.store_command == "forget":
            if not await store.forget(args.id):
                raise unknown_conversation(args.id)
            print(f"Deleted conversation {args.id} and its files.", file=out)
            return 0
        age = args.max_age_days if args.max_age_days is not None else settings.storage.max_age_days
        size = int(args.max_media_mb * 1024 * 1024) if args.max_media_mb is not None else settings.storage.max_media_bytes
        if age is None and size is None:
            raise InputError("Nothing to prune: set [storage] max_age_days or max_media_bytes, or pass --max-age-days / --max-media-mb.")
        report = await store.prune(max_age_days=age, max_media_bytes=size)
        print(
            f"Removed {report.conversations} conversations and {report.files} files "
            f"({report.bytes_freed / 1024 / 1024:.1f} MiB); media now {report.media_bytes / 1024 / 1024:.1f} MiB.",
            file=out,
        )
        return 0
    finally:
        await store.close()
