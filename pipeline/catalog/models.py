"""The model catalog: where model selection (HuggingGPT §3.2) finds its candidates.

The paper ranks the Hugging Face models of a task by downloads and gives the top-K, with their
descriptions, to the controller. :class:`Catalog` holds those models per task, read from a
JSON-lines file; :class:`Availability` keeps only the models the configured backends can run now
(a gateway, a dedicated endpoint, or an Inference Provider with a live mapping on the Hub).

File formats read by :meth:`Catalog.load`, one JSON object per line:

* ours (written by ``hugginggpt catalog refresh``): an optional first header line
  ``{"_catalog": {"snapshot": ..., "source": ..., "generated_at": ...}}``, then
  ``{"id", "task", "downloads", "likes", "description", "providers": [...] | null, "tags": [...]}``;
  ``providers`` lists the Inference Providers with a live mapping at refresh time, ``null`` means
  unknown (looked up on the Hub at run time);
* the reference implementation's ``p0_models.jsonl``: ``id``, ``task``, ``pipeline_tag``,
  ``downloads`` and ``likes`` (numbers or numeric strings), ``meta`` (a dict, a Python-repr dict
  string, or null) and a long Markdown ``description``. Its availability is unknown.
"""

from __future__ import annotations

import ast
import html
import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CatalogError
from ..tasks import canonical_task

log = logging.getLogger(__name__)

SHIPPED_CATALOG = Path(__file__).parent.parent / "data" / "catalog.jsonl"
"""The catalog shipped with the package (built by ``scripts/build_shipped_catalog.py``)."""

DESCRIPTION_CHARS = 600
"""Maximum length of :attr:`ModelCard.description`, in characters."""
PROMPT_DESCRIPTION_CHARS = 300
"""Maximum length of the description in :meth:`ModelCard.prompt_view`, in characters."""
PROMPT_TAGS = 5
"""Number of tags in :meth:`ModelCard.prompt_view`."""
MAX_TAGS = 8
"""Number of tags kept per card."""

# Provider mapping states of the Hub (huggingface_hub ``InferenceProviderMapping.status``): only
# "live" is callable by everyone; "staging" is visible to the provider's own organisation only.
LIVE = "live"


@dataclass(frozen=True)
class ModelCard:
    """One model of the catalog.

    Attributes:
        id: Hub repository id, e.g. ``"facebook/detr-resnet-50"``.
        task: canonical task name (:func:`pipeline.tasks.canonical_task`).
        downloads: Hub download count at snapshot time (the paper's ranking key).
        likes: Hub likes at snapshot time (tie-breaker).
        description: plain text, Markdown/HTML stripped, at most :data:`DESCRIPTION_CHARS` characters.
        providers: Inference Providers with a live mapping for this model at snapshot time
            (``()`` = none), or ``None`` when unknown (looked up at run time by :class:`Availability`).
        tags: a few descriptive Hub tags (``"sentiment-analysis"``, ``"en"``, ...).
    """

    id: str
    task: str
    downloads: int
    likes: int
    description: str
    providers: tuple[str, ...] | None
    tags: tuple[str, ...] = ()

    def prompt_view(self) -> dict[str, Any]:
        """The JSON-able view the controller sees when it selects a model (paper §3.2).

        Returns:
            ``{"id", "downloads", "likes", "description", "tags"}``; ``description`` shortened to
            :data:`PROMPT_DESCRIPTION_CHARS` characters, ``tags`` to :data:`PROMPT_TAGS` entries.
        """
        return {
            "id": self.id,
            "downloads": self.downloads,
            "likes": self.likes,
            "description": shorten(self.description, PROMPT_DESCRIPTION_CHARS),
            "tags": list(self.tags[:PROMPT_TAGS]),
        }

    def to_record(self) -> dict[str, Any]:
        """The JSON object of this card in our catalog format (one line of the file)."""
        return {
            "id": self.id,
            "task": self.task,
            "downloads": self.downloads,
            "likes": self.likes,
            "description": self.description,
            "providers": None if self.providers is None else list(self.providers),
            "tags": list(self.tags),
        }


def _rank_key(card: ModelCard) -> tuple[int, int, str]:
    return (-card.downloads, -card.likes, card.id)


class Catalog:
    """Models per task, ranked by downloads (descending; ties: likes descending, then id).

    Build with :meth:`load`, or directly from cards (tests, refresh). Immutable once built.

    Attributes:
        snapshot: date of the data as given by the file's header (``None`` if it has none).
        source: where the data came from (Hub endpoint or file), ``None`` if unknown.
        path: the file it was read from, ``None`` if built from cards.
    """

    def __init__(
        self,
        cards: Iterable[ModelCard],
        *,
        snapshot: str | None = None,
        source: str | None = None,
        path: Path | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.source = source
        self.path = path
        by_task: dict[str, dict[str, ModelCard]] = {}
        by_id: dict[str, ModelCard] = {}
        for card in cards:
            models = by_task.setdefault(card.task, {})
            if card.id in models:
                log.debug("catalog: duplicate %s for %s ignored", card.id, card.task)
                continue
            models[card.id] = card
            by_id.setdefault(card.id, card)
        # Ranking is computed once here; candidates() only copies.
        self._ranked: dict[str, tuple[ModelCard, ...]] = {
            task: tuple(sorted(models.values(), key=_rank_key)) for task, models in by_task.items()
        }
        self._by_task = by_task
        self._by_id = by_id

    @classmethod
    def load(cls, path: Path | str | None = None) -> Catalog:
        """Read a catalog file (our format or the reference implementation's, see module doc).

        Args:
            path: JSON-lines file; ``None`` reads the shipped catalog (:data:`SHIPPED_CATALOG`).

        Returns:
            The catalog. Records whose task is unknown to :mod:`pipeline.tasks` are skipped
            (debug log).

        Raises:
            CatalogError: the file is missing or unreadable, or a line is not a valid record; the
                message names the file and the line number.
        """
        file = SHIPPED_CATALOG if path is None else Path(path)
        try:
            text = file.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise CatalogError(f"The model catalog {file} does not exist.") from None
        except (OSError, UnicodeDecodeError) as e:
            raise CatalogError(f"The model catalog {file} cannot be read ({e.__class__.__name__}).", str(e)) from None

        header: dict[str, Any] = {}
        cards: list[ModelCard] = []
        skipped: dict[str, int] = {}
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise CatalogError(
                    f"The model catalog {file} has invalid JSON on line {lineno}.", f"{file}:{lineno}: {e}"
                ) from None
            if not isinstance(record, dict):
                raise CatalogError(f"The model catalog {file} has a record on line {lineno} that is not an object.")
            if "_catalog" in record:
                if cards or header:
                    raise CatalogError(f"The model catalog {file} has a header record on line {lineno}, not on line 1.")
                header = record["_catalog"] if isinstance(record["_catalog"], dict) else {}
                continue
            try:
                card = card_from_record(record)
            except ValueError as e:
                raise CatalogError(f"The model catalog {file} has an invalid record on line {lineno}: {e}.") from None
            if card is None:
                name = str(record.get("task") or record.get("pipeline_tag"))
                skipped[name] = skipped.get(name, 0) + 1
                continue
            cards.append(card)
        if skipped:
            log.debug("catalog %s: skipped records of unknown tasks %s", file, skipped)
        snapshot = header.get("snapshot")
        source = header.get("source")
        return cls(
            cards,
            snapshot=str(snapshot) if snapshot is not None else None,
            source=str(source) if source is not None else str(file),
            path=file,
        )

    def candidates(self, task: str) -> list[ModelCard]:
        """The models of ``task`` ranked by downloads (ties: likes, then id); ``[]`` if none.

        ``task`` may be any name :func:`pipeline.tasks.canonical_task` understands.
        """
        key = canonical_task(task) or task
        return list(self._ranked.get(key, ()))

    def tasks(self) -> set[str]:
        """The canonical task names that have at least one model."""
        return set(self._ranked)

    def get(self, model_id: str, task: str | None = None) -> ModelCard | None:
        """The card of ``model_id`` (for ``task`` if given: one model may serve several
        ControlNet tasks), or ``None``."""
        if task is None:
            return self._by_id.get(model_id)
        key = canonical_task(task) or task
        return self._by_task.get(key, {}).get(model_id)

    def cards(self) -> list[ModelCard]:
        """Every card, grouped by task (sorted by name), ranked within a task."""
        return [card for task in sorted(self._ranked) for card in self._ranked[task]]

    def __len__(self) -> int:
        return sum(len(v) for v in self._ranked.values())

    def __repr__(self) -> str:
        return f"Catalog({len(self)} models, {len(self._ranked)} tasks, snapshot={self.snapshot!r})"


# ---------------------------------------------------------------------------------------------
# Record parsing (pure)


def _count(value: Any, field: str) -> int:
    if value is None or value == "":
        return 0
    if isinstance(value, bool):
        raise ValueError(f"{field} is not a number")
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        try:
            return int(float(value.strip().replace(",", "").replace("_", "")))
        except ValueError:
            raise ValueError(f"{field} {value[:20]!r} is not a number") from None
    raise ValueError(f"{field} is not a number")


def _meta(value: Any) -> dict[str, Any]:
    """The reference ``meta`` field: a dict, a Python-repr dict string, or null."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.strip():
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError:
                return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


_NOISE_TAGS = frozenset(
    {
        "transformers", "pytorch", "tf", "jax", "safetensors", "onnx", "tensorboard", "diffusers",
        "endpoints_compatible", "autotrain_compatible", "text-generation-inference", "has_space",
        "model-index", "inference", "deploy:azure", "keras", "coreml", "rust", "tflite", "openvino",
        "timm", "sentence-transformers", "flax",
    }
)


def clean_tags(tags: Any, limit: int = MAX_TAGS) -> tuple[str, ...]:
    """A few descriptive tags: Hub bookkeeping (``region:us``, ``license:mit``, framework
    names) dropped, duplicates removed, order kept, at most ``limit``."""
    if isinstance(tags, str):
        tags = [tags]
    if not isinstance(tags, (list, tuple)):
        return ()
    out: list[str] = []
    for tag in tags:
        if not isinstance(tag, str):
            continue
        tag = tag.strip()
        if not tag or ":" in tag or tag.lower() in _NOISE_TAGS or tag in out or len(tag) > 40:
            continue
        out.append(tag)
        if len(out) >= limit:
            break
    return tuple(out)


def card_from_record(record: dict[str, Any]) -> ModelCard | None:
    """One catalog line (either format) as a :class:`ModelCard`.

    Returns:
        The card, or ``None`` when its task is unknown to :mod:`pipeline.tasks`.

    Raises:
        ValueError: ``id`` is missing, or ``downloads``/``likes``/``providers`` are malformed.
    """
    model_id = record.get("id")
    if not isinstance(model_id, str) or not model_id.strip():
        raise ValueError("the model id is missing")
    raw_task = record.get("task") or record.get("pipeline_tag")
    task = canonical_task(raw_task) if isinstance(raw_task, str) else None
    if task is None:
        return None
    providers: tuple[str, ...] | None = None
    if record.get("providers") is not None:
        value = record["providers"]
        if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
            raise ValueError("providers is not a list of names")
        providers = tuple(value)
    if "tags" in record:
        tags = clean_tags(record.get("tags"))
    else:
        meta = _meta(record.get("meta"))
        tags = clean_tags(meta.get("tags"))
    description = record.get("description")
    return ModelCard(
        id=model_id.strip(),
        task=task,
        downloads=_count(record.get("downloads"), "downloads"),
        likes=_count(record.get("likes"), "likes"),
        description=condense_description(description) if isinstance(description, str) else "",
        providers=providers,
        tags=tags,
    )


# ---------------------------------------------------------------------------------------------
# Description condensing (pure)

_FRONT_MATTER = re.compile(r"\A\s*---\s*\n.*?\n---\s*(\n|\Z)", re.DOTALL)
_CODE_FENCE = re.compile(r"```.*?(```|\Z)|~~~.*?(~~~|\Z)", re.DOTALL)
_HTML_COMMENT = re.compile(r"<!--.*?(-->|\Z)", re.DOTALL)
_HTML_TAG = re.compile(r"</?[A-Za-z][^>]*>")
_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_REF_LINK = re.compile(r"\[([^\]]*)\]\[[^\]]*\]")
_URL = re.compile(r"https?://\S+")
_INLINE_CODE = re.compile(r"`([^`]*)`")
_EMPHASIS = re.compile(r"(\*\*|__|\*|_)(?=\S)(.+?)(?<=\S)\1")
_LIST_MARK = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_SPACE = re.compile(r"\s+")


def shorten(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters at a sentence or word end, with ``…``."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    sentence = max(cut.rfind(". "), cut.rfind("! "), cut.rfind("? "))
    if sentence >= limit // 2:
        return cut[: sentence + 1]
    space = cut.rfind(" ")
    if space >= limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:-") + "…"


def condense_description(markdown: str, limit: int = DESCRIPTION_CHARS) -> str:
    """A model card's Markdown/HTML as one paragraph of plain text, at most ``limit`` characters.

    Drops YAML front matter, code blocks, HTML tags and comments, images, URLs, headings and
    table rows; keeps link texts and list items; collapses white space.
    """
    text = _FRONT_MATTER.sub("", markdown)
    text = _CODE_FENCE.sub(" ", text)
    text = _HTML_COMMENT.sub(" ", text)
    text = _IMAGE.sub(" ", text)
    text = _LINK.sub(r"\1", text)
    text = _REF_LINK.sub(r"\1", text)
    text = _HTML_TAG.sub(" ", text)
    text = _URL.sub("", text)
    kept: list[str] = []
    size = 0
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "|", ">", "[")) or set(stripped) <= set("-=*_|: "):
            continue
        stripped = _LIST_MARK.sub("", stripped)
        kept.append(stripped)
        size += len(stripped) + 1
        if size > limit * 2:
            break
    text = " ".join(kept)
    text = _INLINE_CODE.sub(r"\1", text)
    text = _EMPHASIS.sub(r"\2", text)
    text = html.unescape(text)
    text = _SPACE.sub(" ", text).strip()
    return shorten(text, limit)
