"""The Hub crawl behind ``hugginggpt catalog refresh``: rebuild the model catalog from the Hub.

The paper (HuggingGPT §3.2) picks candidates per task from the Hub, ranked by downloads. Which
models are *served* changes over time, so ``refresh`` records, per model, the Inference Providers
with a live mapping (``HfApi.list_models(expand=["inferenceProviderMapping", ...])``); the loader
(:class:`pipeline.catalog.Catalog`) and :class:`pipeline.catalog.Availability` read them back.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CatalogError, HubError
from ..tasks import CONTROLNET_CONDITIONS, TASKS, canonical_task
from .models import Catalog, ModelCard, clean_tags, condense_description

log = logging.getLogger(__name__)

EXPAND = ["downloads", "likes", "pipeline_tag", "inferenceProviderMapping", "cardData", "tags"]
"""Properties asked of ``/api/models`` (``HfApi.list_models(expand=...)``)."""

README_BYTES = 64 * 1024
"""Bytes of a README read for a description."""

# Hub queries per task whose pipeline tag differs from the task name. "conversational" is no
# longer a Hub pipeline tag: chat models are "text-generation" models tagged "conversational".
_HUB_QUERY: dict[str, dict[str, Any]] = {
    "conversational": {"pipeline_tag": "text-generation", "filter": "conversational"},
}

# Fixed ControlNet entries of the reference implementation (condition extractors), added when the
# Hub search does not return them: "<cond>-control" ran lllyasviel/Annotators / lllyasviel/ControlNet.
_CONTROL_REPOS = ("lllyasviel/Annotators", "lllyasviel/ControlNet")


@dataclass
class RefreshSummary:
    """What :func:`refresh_catalog` wrote.

    Attributes:
        path: the catalog file written.
        snapshot: its snapshot date (``YYYY-MM-DD``, UTC).
        source: the Hub endpoint read.
        models: number of records written.
        per_task: task → number of models.
        missing: tasks for which the Hub returned no model (they will have no candidates).
        readmes: number of descriptions taken from a README.
    """

    path: Path
    snapshot: str
    source: str
    models: int
    per_task: dict[str, int] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    readmes: int = 0


def hub_tasks() -> list[str]:
    """Catalog tasks that come from a Hub pipeline tag (every non-ControlNet task)."""
    return [name for name, s in TASKS.items() if s.domain != "controlnet" and not s.local]


def controlnet_tasks() -> list[str]:
    """ControlNet tasks that need a model (``canny-control`` is local)."""
    return [name for name, s in TASKS.items() if s.domain == "controlnet" and not s.local]


def _live(info: Any) -> list[str]:
    return [m.provider for m in (info.inference_provider_mapping or []) if getattr(m, "status", None) == "live"]


def _card_description(info: Any) -> str:
    """A short description from card metadata, used when no README is read."""
    card = info.card_data
    data = card.to_dict() if card is not None and hasattr(card, "to_dict") else {}
    parts: list[str] = []
    for key, label in (("language", "languages"), ("license", "license"), ("datasets", "datasets"), ("base_model", "base model")):
        value = data.get(key)
        if isinstance(value, list):
            value = ", ".join(str(v) for v in value[:5])
        if value:
            parts.append(f"{label}: {value}")
    return "; ".join(parts)


def _condition_in(model_id: str, cond: str) -> bool:
    """Whether ``model_id``'s name mentions ControlNet condition ``cond`` as a word."""
    name = model_id.split("/")[-1].lower()
    return re.search(rf"(^|[^a-z]){re.escape(cond)}([^a-z]|$)", name) is not None


def _hub_error(e: BaseException, endpoint: str) -> CatalogError:
    """One sentence for an operator from a Hub failure."""
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(e, HfHubHTTPError) and e.response is not None:
        status = e.response.status_code
        if status in (401, 403):
            return CatalogError(
                f"The Hugging Face Hub at {endpoint} refused the token ({status}); check HF_TOKEN or [inference] token.",
                str(e),
            )
        return HubError(f"The Hugging Face Hub at {endpoint} answered {status}; try again later.", str(e))
    return HubError(
        f"The Hugging Face Hub at {endpoint} cannot be reached ({e.__class__.__name__}); check the network and HF_ENDPOINT.",
        str(e),
    )


async def refresh_catalog(
    out: Path,
    *,
    hub_endpoint: str | None,
    token: str | None,
    tasks: list[str] | None = None,
    per_task: int = 30,
    provider: str | None = "all",
    readmes: int = 5,
    concurrency: int = 8,
    timeout: float = 30.0,
) -> RefreshSummary:
    """Rebuild the catalog from the Hub and write it atomically to ``out`` (our format).

    For each task, ``HfApi.list_models(pipeline_tag=..., inference_provider=provider,
    sort="downloads", limit=per_task, expand=EXPAND)``; for ControlNet tasks, a search for
    ``controlnet`` models whose id names the condition (no provider filter: these usually run on
    dedicated endpoints or a gateway). Each record keeps the model's live providers.

    Args:
        out: file to write (parent directories are created).
        hub_endpoint: Hub URL; None: ``huggingface_hub``'s default (honours ``HF_ENDPOINT``).
        token: Hugging Face token, or None (library default).
        tasks: task names to fetch (default: every task that needs a model).
        per_task: models per task (the paper's candidate pool; top-K is chosen later).
        provider: ``"all"`` (or ``"auto"``): models served by at least one Inference Provider; a provider name:
            models served by it; ``None``: no provider filter (for gateways/endpoints; models
            without a live mapping are kept with ``providers=[]``).
        readmes: for the first ``readmes`` models of each task, the description is a README
            excerpt (one GET each, at most ``concurrency`` at once); 0 = card metadata only.
        concurrency: Hub requests in flight at once.
        timeout: seconds per Hub request.

    Returns:
        A :class:`RefreshSummary`.

    Raises:
        CatalogError: unknown task name; Hub unreachable, token refused (401/403), other Hub error.
        CatalogError: ``out`` cannot be written.
    """
    from huggingface_hub import HfApi

    if provider == "auto":  # the client's "auto" = any provider = the Hub's "all"
        provider = "all"
    if per_task < 1:
        raise CatalogError("--per-task must be at least 1.")
    wanted = _wanted_tasks(tasks)
    api = HfApi(endpoint=hub_endpoint, token=token)
    hub = _Hub(api, api.endpoint.rstrip("/"), token, timeout, per_task, asyncio.Semaphore(concurrency))
    await hub.check()
    queries = _queries(wanted, provider)
    # gather: the first Hub error propagates as our CatalogError (not an ExceptionGroup).
    answers = await asyncio.gather(*(hub.fetch(**q) for q in queries.values()))
    results = dict(zip(queries, answers))
    records = _served_records(results, wanted, provider)
    records.update(_controlnet_records(results, [t for t in wanted if TASKS[t].domain == "controlnet"], per_task))
    readme_text = await _readme_descriptions(hub, records, readmes)

    return _write(out, Catalog(_cards(records, readme_text)), hub.endpoint, provider, per_task, wanted, readme_text)


def _write(out: Path, catalog: Catalog, endpoint: str, provider: str | None, per_task: int, wanted: list[str],
           readme_text: dict[str, str]) -> RefreshSummary:
    """Write ``catalog`` to ``out`` under a ``_catalog`` header (snapshot date, source, time,
    provider filter, models per task) and sum up what was written."""
    snapshot = dt.datetime.now(dt.UTC).date().isoformat()
    header = {
        "_catalog": {
            "snapshot": snapshot,
            "source": endpoint,
            "generated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "provider": provider,
            "per_task": per_task,
        }
    }
    write_catalog(out, catalog, header)
    per = {task: len(catalog.candidates(task)) for task in wanted}
    return RefreshSummary(
        path=out,
        snapshot=snapshot,
        source=endpoint,
        models=len(catalog),
        per_task=per,
        missing=[t for t, n in per.items() if n == 0],
        readmes=sum(1 for c in catalog.cards() if c.id in readme_text),
    )


def _wanted_tasks(tasks: list[str] | None) -> list[str]:
    """The catalog tasks to fetch, canonical and deduplicated, local tasks left out (default:
    every task that needs a model).

    Raises:
        CatalogError: a name that is not a known task.
    """
    wanted = hub_tasks() + controlnet_tasks() if tasks is None else []
    for name in tasks or []:
        canon = canonical_task(name)
        if canon is None:
            raise CatalogError(f"The task {name!r} is not a known task.")
        if TASKS[canon].local:
            continue
        wanted.append(canon)
    return list(dict.fromkeys(wanted))


@dataclass(frozen=True)
class _Hub:
    """The Hub as the crawl reads it: one :class:`huggingface_hub.HfApi`, its endpoint, and a
    semaphore bounding the requests in flight."""

    api: Any
    endpoint: str
    token: str | None
    timeout: float
    per_task: int
    sem: asyncio.Semaphore

    def probe(self) -> None:
        """One ``/api/models`` request without retries: ``http_backoff`` inside ``list_models``
        would retry a dead Hub for ~20 s before failing."""
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        r = get_session().get(
            f"{self.endpoint}/api/models", params={"limit": 1}, headers=build_hf_headers(token=self.token),
            timeout=self.timeout,
        )
        hf_raise_for_status(r)

    async def check(self) -> None:
        """:meth:`probe` off the event loop; :class:`CatalogError` when the Hub fails it."""
        try:
            await asyncio.to_thread(self.probe)
        except Exception as e:
            raise _hub_error(e, self.endpoint) from None

    def _listing(self, **kw: Any) -> list[Any]:
        return list(self.api.list_models(sort="downloads", limit=self.per_task, expand=EXPAND, **kw))

    async def fetch(self, **kw: Any) -> list[Any]:
        """``list_models(**kw)`` by downloads, ``per_task`` of them (:class:`CatalogError` on failure)."""
        async with self.sem:
            try:
                return await asyncio.to_thread(self._listing, **kw)
            except Exception as e:
                raise _hub_error(e, self.endpoint) from None

    def readme(self, model_id: str) -> str | None:
        """The first :data:`README_BYTES` of ``model_id``'s README, or ``None`` when it cannot be
        read (a missing description is not worth failing the refresh)."""
        from huggingface_hub import hf_hub_url
        from huggingface_hub.utils import build_hf_headers, get_session

        url = hf_hub_url(model_id, "README.md", endpoint=self.endpoint)
        try:
            r = get_session().get(url, headers=build_hf_headers(token=self.token), timeout=self.timeout,
                                  follow_redirects=True)
        except Exception as e:
            log.info("catalog refresh: README of %s not read (%s)", model_id, e.__class__.__name__)
            return None
        if r.status_code != 200:
            return None
        return r.content[:README_BYTES].decode("utf-8", errors="replace")


def _queries(wanted: list[str], provider: str | None) -> dict[str, dict[str, Any]]:
    """Key → ``list_models`` arguments: one per Hub task (``task``), and for ControlNet tasks one
    search per condition (``controlnet:<cond>``) and per fixed repository (``repo:<id>``)."""
    queries: dict[str, dict[str, Any]] = {}
    for task in wanted:
        if TASKS[task].domain == "controlnet":
            continue
        query = dict(_HUB_QUERY.get(task, {"pipeline_tag": task}))
        if provider is not None:
            query["inference_provider"] = provider
        queries[task] = query
    if any(TASKS[t].domain == "controlnet" for t in wanted):
        for cond in CONTROLNET_CONDITIONS:
            queries[f"controlnet:{cond}"] = {"search": cond, "filter": "controlnet"}
        for repo in _CONTROL_REPOS:
            owner, name = repo.split("/")
            queries[f"repo:{repo}"] = {"search": name, "author": owner}
    return queries


def _served_records(results: dict[str, list[Any]], wanted: list[str], provider: str | None) -> dict[str, list[tuple[Any, list[str]]]]:
    """Hub task → ``(model info, live providers)`` of the models served as ``provider`` asks
    (``"all"``: by any provider; a name: by that one; ``None``: every model)."""
    records: dict[str, list[tuple[Any, list[str]]]] = {}
    for task in wanted:
        if TASKS[task].domain == "controlnet":
            continue
        keep = []
        for info in results[task]:
            live = _live(info)
            if provider not in (None, "all") and provider not in live:
                continue  # mapped but not live for this provider
            if provider == "all" and not live:
                continue
            keep.append((info, live))
        records[task] = keep
    return records


def _controlnet_records(results: dict[str, list[Any]], cn_wanted: list[str], per_task: int) -> dict[str, list[tuple[Any, list[str]]]]:
    """ControlNet task → ``(model info, live providers)``: models naming the condition for
    ``<cond>-text-to-image``, the fixed repositories for ``<cond>-control``."""
    if not cn_wanted:
        return {}
    control_repos = [info for repo in _CONTROL_REPOS for info in results[f"repo:{repo}"] if info.id == repo]
    records: dict[str, list[tuple[Any, list[str]]]] = {}
    for task in cn_wanted:
        cond = task.split("-", 1)[0]
        if task.endswith("-text-to-image"):
            found = [i for i in results[f"controlnet:{cond}"] if _condition_in(i.id, cond)]
        else:
            found = list(control_repos)
        records[task] = [(info, _live(info)) for info in found[:per_task]]
    return records


async def _readme_descriptions(hub: _Hub, records: dict[str, list[tuple[Any, list[str]]]], readmes: int) -> dict[str, str]:
    """Model id → description condensed from its README, for the first ``readmes`` models of
    each task (at most the semaphore's count of GETs at once)."""
    readme_text: dict[str, str] = {}
    if readmes <= 0:
        return readme_text
    ids = list(dict.fromkeys(info.id for rows in records.values() for info, _ in rows[:readmes]))

    async def one(model_id: str) -> None:
        async with hub.sem:
            text = await asyncio.to_thread(hub.readme, model_id)
        if text:
            desc = condense_description(text)
            if desc:
                readme_text[model_id] = desc

    await asyncio.gather(*(one(model_id) for model_id in ids))
    return readme_text


def _cards(records: dict[str, list[tuple[Any, list[str]]]], readme_text: dict[str, str]) -> list[ModelCard]:
    """One :class:`ModelCard` per record, described by its README excerpt or else its card data."""
    return [
        ModelCard(
            id=info.id,
            task=task,
            downloads=int(info.downloads or 0),
            likes=int(info.likes or 0),
            description=readme_text.get(info.id) or condense_description(_card_description(info)),
            providers=tuple(live),
            tags=clean_tags(info.tags or []),
        )
        for task, rows in records.items()
        for info, live in rows
    ]


def write_catalog(out: Path, catalog: Catalog, header: dict[str, Any]) -> None:
    """Write ``header`` and every card of ``catalog`` as JSON lines to ``out``, atomically
    (temporary file in the same directory, then ``os.replace``).

    Raises:
        CatalogError: the directory or file cannot be written.
    """
    out = Path(out)
    tmp: str | None = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=out.name + ".", suffix=".tmp", dir=out.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(header, ensure_ascii=False) + "\n")
            for card in catalog.cards():
                f.write(json.dumps(card.to_record(), ensure_ascii=False) + "\n")
        os.replace(tmp, out)
        tmp = None
    except OSError as e:
        raise CatalogError(f"The catalog cannot be written to {out} ({e.strerror or e.__class__.__name__}).", str(e)) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
