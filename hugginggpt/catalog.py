"""``hugginggpt catalog refresh|show``: rebuild the model catalog from the Hub, and inspect it.

The crawl itself is :func:`pipeline.catalog.refresh.refresh_catalog`; this module only parses the
options and prints.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from bot.settings import Settings
    from pipeline.catalog.placement import Placement
    from pipeline.catalog.servers import ExpertServers

from bot.errors import InputError

from .common import add_sandbox_option

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# Command line


def add_parser(subparsers: Any) -> None:
    """Add ``catalog refresh`` and ``catalog show`` to an ``argparse`` sub-parser set.

    Sets ``args.command = "catalog"`` and ``args.catalog_command`` (``"refresh" | "show"``).
    """
    p = subparsers.add_parser("catalog", help="inspect or refresh the model catalog")
    sub = p.add_subparsers(dest="catalog_command", required=True, metavar="{refresh,show}")
    r = sub.add_parser("refresh", help="rebuild the catalog from the Hugging Face Hub")
    r.add_argument("--out", type=Path, help="file to write (default: [catalog] path, else DATA_DIR/catalog.jsonl)")
    r.add_argument("--tasks", nargs="+", metavar="TASK", help="only these tasks (default: all that need a model)")
    r.add_argument("--per-task", type=int, default=30, metavar="N", help="models per task (default 30)")
    r.add_argument(
        "--provider",
        default="all",
        help="'all' (served by any Inference Provider, default), a provider name, or 'none' (no filter)",
    )
    r.add_argument("--readmes", type=int, default=5, metavar="N", help="README descriptions for the top N per task (0: none)")
    r.add_argument("--hub-endpoint", help="Hub URL (default: HF_ENDPOINT or huggingface.co)")
    s = sub.add_parser("show", help="list a task's ranked candidates and whether they can run now")
    s.add_argument("task", nargs="?", help="task name, e.g. object-detection (not with --coverage)")
    s.add_argument("--coverage", action="store_true",
                   help="every task instead: whether it runs now on providers, on the expert server, or on neither")
    s.add_argument("--limit", type=int, default=20, metavar="N", help="rows to show (default 20)")
    s.add_argument("--hub-endpoint", help="Hub URL for availability look-ups")
    add_sandbox_option(s)
    p.set_defaults(handler=main)


async def main(args: argparse.Namespace, settings: Settings, *, stdout: TextIO | None = None) -> int:
    """Run ``catalog refresh`` or ``catalog show`` (one task, or ``--coverage``: every task); returns 0.

    Raises:
        CatalogError: the Hub cannot be reached or refused the token, or the file cannot be written.
        InputError: an unknown task name, or neither or both of a task and ``--coverage``.
    """
    out = stdout or sys.stdout
    if args.catalog_command == "refresh":
        return await _refresh(args, settings, out)
    if args.coverage:
        if args.task:
            raise InputError("Give either a task or --coverage, not both.")
        return await _coverage(args, settings, out)
    if not args.task:
        raise InputError("Name a task (for example object-detection), or give --coverage for every task.")
    return await _show(args, settings, out)


async def _refresh(args: argparse.Namespace, settings: Any, out: TextIO) -> int:
    from pipeline.catalog.refresh import refresh_catalog  # the Hub client only when the command runs

    from bot.settings import secret

    target = args.out or settings.catalog.path or Path(settings.storage.data_dir) / "catalog.jsonl"
    provider = None if str(args.provider).lower() == "none" else args.provider
    summary = await refresh_catalog(
        Path(target),
        hub_endpoint=args.hub_endpoint,
        token=secret(settings.inference.token),
        tasks=args.tasks,
        per_task=args.per_task,
        provider=provider,
        readmes=args.readmes,
    )
    print(f"Wrote {summary.models} models for {len(summary.per_task) - len(summary.missing)} tasks to {summary.path} "
          f"(snapshot {summary.snapshot}, from {summary.source}).", file=out)
    if summary.missing:
        print(f"No served models found for: {', '.join(summary.missing)}.", file=out)
    configured = settings.catalog.path
    if configured is None or Path(configured).resolve() != Path(summary.path).resolve():
        print(f"To use it, set [catalog] path = \"{summary.path}\" (or HUGGINGGPT_CATALOG__PATH).", file=out)
    return 0


def _availability(settings: Any, hub_endpoint: str | None) -> Any:
    """The provider availability the settings describe (:class:`pipeline.catalog.Availability`)."""
    from pipeline.catalog import Availability  # the Hub client only when the command runs
    from pipeline.experts.providers import ProviderPolicy

    from bot.settings import secret

    inf = settings.inference
    return Availability(provider=inf.provider, base_url=inf.base_url, endpoints=dict(inf.endpoints), token=secret(inf.token),
                        ttl=settings.catalog.availability_ttl, hub_endpoint=hub_endpoint,
                        policy=ProviderPolicy(inf.provider, dict(inf.providers)))


async def _coverage(args: argparse.Namespace, settings: Any, out: TextIO) -> int:
    """Print, per task of the registry, where it runs now: off the expert servers (Inference
    Providers, a gateway or an endpoint), on an expert server, both, or neither and why."""
    import asyncio

    from pipeline.catalog import Catalog
    from pipeline.catalog.placement import Placement
    from pipeline.tasks import TASKS

    from bot.backends import expert_servers

    inf = settings.inference
    servers = expert_servers(settings, registered=await registered_servers(settings, out))
    placement = Placement(Catalog.load(settings.catalog.path), _availability(settings, args.hub_endpoint), servers,
                          mode=inf.mode)
    controller = set(inf.controller_tasks)
    needed = [n for n, spec in TASKS.items() if not spec.local and not (n in controller and spec.controller_capable)]
    try:
        found = dict(zip(needed, await asyncio.gather(*(placement.paths(n) for n in needed))))
    finally:
        if servers is not None:
            await servers.aclose()
    width = max(len(n) for n in TASKS)
    live = 0
    for name in sorted(TASKS):
        row = _coverage_row(name, found.get(name), TASKS[name].local)
        live += not row.startswith("neither")
        print(f"{name:<{width}}  {row}", file=out)
    print(f"{live} of {len(TASKS)} tasks can run now (provider {inf.provider or 'none'}, mode {inf.mode}"
          + (f", gateway {inf.base_url}" if inf.base_url else "") + ").", file=out)
    return 0


def _coverage_row(task: str, paths: Any, local: bool) -> str:
    """One task's row: ``providers: ...  expert server: ...``, or where else it runs, or why not."""
    if local:
        return "in-process (computed without a model)"
    if paths is None:
        return "the controller LLM ([inference] controller_tasks)"
    if paths.provider is None and paths.server is None:
        return f"neither ({paths.why_not})"
    remote = f"{paths.provider.id} on {paths.provider.where}" if paths.provider is not None else "-"
    local_model = f"{paths.server.id} on {paths.server.where}" if paths.server is not None else "-"
    return f"providers: {remote}  expert server: {local_model}"


async def _show(args: argparse.Namespace, settings: Any, out: TextIO) -> int:
    from pipeline.catalog import Catalog  # the Hub client only when the command runs
    from pipeline.catalog.placement import Placement
    from pipeline.tasks import TASKS, canonical_task

    from bot.backends import expert_servers
    task = canonical_task(args.task)
    if task is None:
        raise InputError(f"The task {args.task!r} is not a known task; known tasks: {', '.join(sorted(TASKS))}.")
    if TASKS[task].local:
        print(f"{task} is computed locally and needs no model.", file=out)
        return 0
    catalog = Catalog.load(settings.catalog.path)
    inf = settings.inference
    availability = _availability(settings, args.hub_endpoint)
    servers = expert_servers(settings, registered=await registered_servers(settings, out))
    try:
        local = await _show_servers(task, servers, out)
    finally:
        if servers is not None:
            await servers.aclose()
    placement = Placement(catalog, availability, None, mode="local" if inf.mode == "local" else "providers")
    cards = catalog.candidates(task)[: max(args.limit, 0)] if placement.uses_providers else []
    served = {c.id for c in await availability.filter(cards)}
    backend = inf.base_url and f"gateway {inf.base_url}" or (f"provider {inf.provider}" if inf.provider else "no provider")
    if not placement.uses_providers:
        backend = 'no provider ([inference] mode = "local")'
    print(f"{task}: {len(catalog.candidates(task))} models in the catalog "
          f"(snapshot {catalog.snapshot or 'unknown'}); availability for {backend}.", file=out)
    if task in set(inf.controller_tasks) and TASKS[task].controller_capable:
        print("This task is also served by the controller LLM ([inference] controller_tasks).", file=out)
    if not cards:
        print("No models." if placement.uses_providers else "Providers are not used.", file=out)
        return 0
    hub_down = availability.hub_unreachable
    if hub_down:
        print(f"The Hugging Face Hub ({args.hub_endpoint or 'huggingface.co'}) could not be reached, so whether "
              "these models are served now is unknown (shown as \"?\").", file=out)
    width = max(len(c.id) for c in cards)
    for rank, card in enumerate(cards, start=1):
        if card.providers is not None:
            providers = ",".join(card.providers) or "-"
        else:
            live = availability.looked_up(card.id)
            providers = "unknown" if live is None or hub_down else (",".join(live) or "-") + " (Hub now)"
        mark = "yes" if card.id in served else "?" if hub_down and card.providers is None else "no"
        where = _where(card.id, local.get(card.id, []), placement if card.id in served else None)
        print(f"{rank:>3}  {card.id:<{width}}  {card.downloads:>10,} dl  {card.likes:>6,} likes  "
              f"served: {mark:<3}  providers: {providers}  where: {where}", file=out)
    return 0


def _where(model: str, local: list[str], placement: Placement | None) -> str:
    """Where a catalog model runs, first place first: its expert servers, then its provider route."""
    places = [f"local {url}" for url in local]
    route = placement.provider_route(model) if placement is not None else None
    if route is not None:
        places.append(route.label)
    return ", then ".join(places) or "-"


async def registered_servers(settings: Any, out: TextIO) -> list[Any]:
    """The expert servers ``hugginggpt experts launch`` registered in the store (``[storage]``),
    shown like configured ones; when the store cannot be read, one sentence says so on ``out``
    (the details in the log) and only the configured servers are shown."""
    from bot.errors import StorageError
    from bot.store.sql.experts import read_registered

    if settings.inference.mode == "providers":
        return []
    try:
        return await read_registered(settings.storage)
    except StorageError as e:
        log.warning("the registered expert servers could not be read: %s", e)
        print(f"The expert servers registered by `hugginggpt experts launch` are left out: {e.user_message}", file=out)
        return []


async def _show_servers(task: str, servers: ExpertServers | None, out: TextIO) -> dict[str, list[str]]:
    """Print what the expert servers list for ``task`` (servable or refused, and why); returns
    model id → URLs of the servers that can serve it, in configured order."""
    if servers is None:
        return {}
    listings = await servers.listings()
    servable: dict[str, list[str]] = {}
    print(f"{task} on the expert servers (served first, in this order):", file=out)
    for listing in listings:
        if not listing.reachable:
            print(f"  {listing.url}: could not be reached; nothing is served from it now.", file=out)
            continue
        models = [m for m in listing.models if m.task == task]
        device = f" ({listing.device})" if listing.device else ""
        if not models:
            print(f"  {listing.url}{device}: lists no model for {task}.", file=out)
        for m in models:
            if m.servable:
                servable.setdefault(m.id, []).append(listing.url)
                size = f", {m.size_bytes / 1e6:,.0f} MB" if m.size_bytes else ""
                print(f"  {m.id}  {m.state}{size}  where: local {listing.url}{device}", file=out)
            else:
                print(f"  {m.id}  refused: {m.reason or 'no reason given'}  ({listing.url})", file=out)
    return servable
