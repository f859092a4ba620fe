"""``hugginggpt store prune|forget ID``: conversation storage maintenance."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from ..errors import InputError
from ..settings import Settings
from ..store import MediaStore, SQLiteStore


def add_parser(subparsers: Any) -> None:
    """Add ``store prune`` and ``store forget ID`` to the command line's subparsers."""
    store = subparsers.add_parser("store", help="conversation storage maintenance")
    ssub = store.add_subparsers(dest="store_command", required=True)
    prune = ssub.add_parser("prune", help="apply the retention settings ([storage] max_age_days, max_media_bytes)")
    prune.add_argument("--max-age-days", type=float, help="override [storage] max_age_days")
    prune.add_argument("--max-media-mb", type=float, help="override [storage] max_media_bytes, in MiB")
    forget = ssub.add_parser("forget", help="delete one conversation and its files")
    forget.add_argument("id", help="conversation id")
    store.set_defaults(handler=main)


async def main(args: argparse.Namespace, settings: Settings, out: TextIO = sys.stdout) -> int:
    """``store prune`` / ``store forget ID``.

    Raises:
        StorageError: the database is unusable.
        InputError: unknown conversation id (forget).
    """
    async with SQLiteStore(settings.storage.data_dir, MediaStore(settings.storage.data_dir)) as store:
        if args.store_command == "forget":
            if not await store.forget(args.id):
                raise InputError(f"There is no conversation {args.id}.")
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
