"""What a run costs in US dollars: the price table, the estimate of a plan and the actual cost of
a run.

* The price table (:class:`PriceTable`): the controller's tokens (``[llm] price_input_per_million``
  and ``price_output_per_million``) and each expert call by provider, task and model (per call,
  per second of compute, per generated image, per generated second of video), from the shipped
  defaults (``pipeline/data/prices.toml``, team-editable) with the team's file over them
  (``[prices] file``).
* :func:`estimate_plan`: what a plan will cost, made after planning and after each re-planning
  round, before its tasks run (what budgets reserve and approval shows).
* :func:`actual_cost`: what a run cost, from what was really called: the tokens the controller
  reported (``usage``), the calls that answered, and the seconds of compute billed where the
  provider reported them (the ``x-compute-time`` header of Hugging Face inference replies,
  :attr:`pipeline.types.Output.billed_seconds`).

A price that is missing is *unknown*: a line's ``usd`` is ``None`` and so is the total, never
zero. :attr:`Cost.known_usd` adds up the lines whose price is known (what budgets count).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .tasks import TASKS
from .types import Cost, CostLine, RunRecord, Task

if TYPE_CHECKING:
    from .llm import Usage

SHIPPED_PRICES = Path(__file__).parent / "data" / "prices.toml"
"""The price table this bot ships with (team-editable defaults, sources in the file)."""
PRICE_FIELDS = ("per_call", "per_second", "per_image", "per_video_second")
"""The fields of a price rule, each in US dollars."""
ASSUMPTIONS = ("call_seconds", "video_seconds", "response_prompt_tokens", "response_completion_tokens",
               "replan_prompt_tokens", "replan_completion_tokens")
"""What an estimate assumes before anything ran (``[assumptions]`` of the price table)."""
MILLION = 1_000_000


class PriceFileError(ValueError):
    """A price file that cannot be used; the message is one sentence naming the file and the key."""


@dataclass(frozen=True)
class Rule:
    """The price of one expert call (US dollars; ``None``: not priced by that measure)."""

    per_call: float | None = None
    per_second: float | None = None
    per_image: float | None = None
    per_video_second: float | None = None

    def price(self, *, seconds: float, images: int, video_seconds: float) -> float | None:
        """Dollars for one call that took ``seconds`` of compute and generated ``images`` images
        and ``video_seconds`` seconds of video; ``None`` when the rule names no price at all."""
        parts = (self.per_call, self.per_second, self.per_image, self.per_video_second)
        if all(p is None for p in parts):
            return None
        return ((self.per_call or 0.0) + (self.per_second or 0.0) * seconds + (self.per_image or 0.0) * images
                + (self.per_video_second or 0.0) * video_seconds)

    def basis(self) -> str:
        """The measures the rule prices, e.g. ``"per image"``."""
        return ", ".join(f.replace("_", " ") for f in PRICE_FIELDS if getattr(self, f))


def dollars(usd: float | None) -> str:
    """``"$0.0123"`` (4 decimals under a dollar, else 2), ``"unknown"`` for ``None``."""
    if usd is None:
        return "unknown"
    return f"${usd:,.4f}" if usd < 1 else f"${usd:,.2f}"


@dataclass(frozen=True)
class PriceTable:
    """The prices a run is estimated and charged with.

    Attributes:
        providers: provider name → its table (price fields, ``tasks``, ``models``), as in
            ``pipeline/data/prices.toml``.
        assumptions: :data:`ASSUMPTIONS` name → value (seconds, tokens).
        input_per_million, output_per_million: US dollars per million controller tokens read and
            written (``[llm] price_input_per_million`` / ``price_output_per_million``), ``None``:
            unknown.
    """

    providers: Mapping[str, Mapping[str, Any]]
    assumptions: Mapping[str, float]
    input_per_million: float | None = None
    output_per_million: float | None = None

    @classmethod
    def load(cls, extra: Path | None = None, *, input_per_million: float | None = None,
             output_per_million: float | None = None) -> PriceTable:
        """The shipped table with ``extra`` (a TOML file of the same shape) over it, key by key.

        Raises:
            PriceFileError: ``extra`` cannot be read, is not TOML, or holds a key or value the
                table does not know (a price below zero, a field of another name).
        """
        data = _read(SHIPPED_PRICES)
        if extra is not None:
            data = _merge(data, _read(extra))
        providers = data.get("providers", {})
        _check(providers, data.get("assumptions", {}), extra or SHIPPED_PRICES)
        return cls(providers, dict(data.get("assumptions", {})), input_per_million, output_per_million)

    def rule(self, task: str, provider: str, model: str | None = None) -> Rule | None:
        """The rule of ``task`` on ``model`` at ``provider``: the provider's, refined by the task's
        then the model's entries; ``None`` when the provider has no entry (unknown)."""
        entry = self.providers.get(provider)
        if entry is None:
            return None
        fields = {f: entry[f] for f in PRICE_FIELDS if f in entry}
        fields.update({f: v for f, v in entry.get("tasks", {}).get(task, {}).items() if f in PRICE_FIELDS})
        if model is not None:
            fields.update({f: v for f, v in entry.get("models", {}).get(model, {}).items() if f in PRICE_FIELDS})
        return Rule(**{f: float(v) for f, v in fields.items()})

    def tokens(self, prompt: int, completion: int) -> float | None:
        """US dollars for ``prompt`` tokens read and ``completion`` tokens written by the
        controller; ``None`` when a price that is needed is unknown."""
        if (prompt and self.input_per_million is None) or (completion and self.output_per_million is None):
            return None
        return (prompt * (self.input_per_million or 0.0) + completion * (self.output_per_million or 0.0)) / MILLION


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise PriceFileError(f"The price file {path} cannot be read ({e.strerror or e}).") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise PriceFileError(f"The price file {path} is not valid TOML ({e}).") from None


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), dict) else v
    return out


def _check(providers: Any, assumptions: Any, path: Path) -> None:
    """Refuse a table with unknown keys or prices that are not finite numbers >= 0.

    Raises:
        PriceFileError: naming the file and the key.
    """
    def number(where: str, v: Any) -> None:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise PriceFileError(f"The price file {path} gives {where} the value {v!r}, not a number of 0 or more.")

    def rule(where: str, table: Any, nested: bool) -> None:
        if not isinstance(table, Mapping):
            raise PriceFileError(f"The price file {path} has {where} that is not a table.")
        for k, v in table.items():
            if k in PRICE_FIELDS:
                number(f"{where}.{k}", v)
            elif nested and k in ("tasks", "models") and isinstance(v, Mapping):
                for name, sub in v.items():
                    rule(f"{where}.{k}.{name}", sub, False)
            else:
                raise PriceFileError(f"The price file {path} has the unknown key {where}.{k} "
                                     f"(a rule holds {', '.join(PRICE_FIELDS)}, tasks and models).")

    if not isinstance(providers, Mapping) or not isinstance(assumptions, Mapping):
        raise PriceFileError(f"The price file {path} needs [providers.NAME] and [assumptions] tables.")
    for name, table in providers.items():
        rule(f"providers.{name}", table, True)
    for k, v in assumptions.items():
        if k not in ASSUMPTIONS:
            raise PriceFileError(f"The price file {path} has the unknown key assumptions.{k} (known: {', '.join(ASSUMPTIONS)}).")
        number(f"assumptions.{k}", v)


# -- estimate and actual ------------------------------------------------------------------------------

def provider_of(where: str | None) -> str:
    """The price table's provider for a result's ``where`` (:attr:`pipeline.types.Output.where`):
    ``"provider fal-ai"`` → ``"fal-ai"``, ``"provider auto:fastest"`` → ``"auto"``, an expert
    server or an in-process task → ``"local"``, ``"endpoint …"`` / ``"gateway …"`` →
    ``"endpoint"`` / ``"gateway"``, the controller → ``"controller"``."""
    if not where:
        return "auto"
    kind, _, target = where.partition(" ")
    if kind == "provider":
        return target.partition(":")[0] or "auto"
    if kind in ("local", "in-process"):
        return "local"
    return kind


def likely_provider(task: str, *, provider: str | None, per_task: Mapping[str, str], mode: str,
                    controller_tasks: Iterable[str]) -> str:
    """The price table's provider ``task`` will likely run on, before a model is chosen:
    ``"controller"`` for a task the controller answers (``[inference] controller_tasks``),
    ``"local"`` for an in-process task or in ``mode`` ``"local"``, else the task's provider
    (``[inference] providers``, a ``model:provider`` pin's provider) or ``provider``: a policy
    (``auto``, ``fastest`` ...) is the router's choice, ``"auto"``; no provider: ``"gateway"``.
    In ``"hybrid"`` mode the provider's price is assumed (an expert server may make it cheaper)."""
    spec = TASKS.get(task)
    if task in controller_tasks:
        return "controller"
    if (spec is not None and spec.local) or mode == "local":
        return "local"
    choice = per_task.get(task, provider)
    if choice is None:
        return "gateway"
    name = choice.rpartition(":")[2] if ":" in choice else choice
    return "auto" if name in ("auto", "fastest", "cheapest", "preferred") else name


def _outputs(task: str) -> tuple[int, int]:
    """``(images, videos)`` one call of ``task`` generates (from the registry's outputs)."""
    spec = TASKS.get(task)
    outs = spec.outputs if spec is not None else ()
    return int("image" in outs), int("video" in outs)


def _expert_line(prices: PriceTable, task_id: int, task: str, provider: str, model: str | None, *,
                 seconds: float | None, images: int, videos: int) -> CostLine:
    """One expert call's line; ``seconds`` ``None``: not reported (the assumption is used)."""
    what = f"task {task_id} ({task}) on {provider}"
    rule = prices.rule(task, provider, model)
    if rule is None:
        return CostLine(what, None, task_id, "no price")
    a = prices.assumptions
    billed = seconds if seconds is not None else a.get("call_seconds", 0.0)
    usd = rule.price(seconds=billed, images=images, video_seconds=videos * a.get("video_seconds", 0.0))
    basis = rule.basis() or "no price"
    if rule.per_second:
        basis += f", {billed:.2f} s {'billed' if seconds is not None else 'assumed'}"
    return CostLine(what, usd, task_id, basis)


def _controller_line(prices: PriceTable, prompt: int, completion: int, what: str = "controller") -> CostLine:
    return CostLine(what, prices.tokens(prompt, completion), None, f"{prompt} in, {completion} out tokens")


def estimate_plan(tasks: Iterable[Task], prices: PriceTable, provider_for: Callable[[str], str], *,
                  usage: Usage | None = None, replans_left: int = 0, answer: bool = True) -> Cost:
    """What running ``tasks`` will cost, before they run.

    Args:
        tasks: the plan (or a re-planning round's further tasks).
        prices: the price table.
        provider_for: task name → the price table's provider it will likely run on (the
            configured provider or policy: ``"auto"``, a provider name, ``"local"``).
        usage: the run's controller use so far (the planning tokens already spent are a line);
            ``None``: none.
        replans_left: re-planning rounds that may still follow (each one controller call at
            ``[assumptions] replan_*_tokens``; counted only when a task may fail, i.e. always
            when ``> 0``).
        answer: the answer is still to be written (``[assumptions] response_*_tokens``).

    Returns:
        :class:`Cost` with one line per task, then the controller's.
    """
    lines = []
    for t in tasks:
        provider = provider_for(t.task)
        if provider == "controller":
            continue  # the controller answers it: its tokens are in the controller line
        images, videos = _outputs(t.task)
        lines.append(_expert_line(prices, t.id, t.task, provider, None, seconds=None, images=images, videos=videos))
    a = prices.assumptions
    prompt = (usage.prompt_tokens if usage else 0) + int(answer) * int(a.get("response_prompt_tokens", 0))
    completion = (usage.completion_tokens if usage else 0) + int(answer) * int(a.get("response_completion_tokens", 0))
    prompt += replans_left * int(a.get("replan_prompt_tokens", 0))
    completion += replans_left * int(a.get("replan_completion_tokens", 0))
    lines.append(_controller_line(prices, prompt, completion))
    return Cost(tuple(lines))


def actual_cost(record: RunRecord, usage: Usage, prices: PriceTable) -> Cost:
    """What the run of ``record`` cost: each call that answered (on the provider it answered at,
    with the seconds it billed when reported), and the controller's reported tokens.

    Calls that failed are not charged (Inference Providers bill the calls that answer).
    """
    lines = []
    for task_id, result in sorted(record.results.items()):
        out = result.output
        if result.status != "ok" or out is None or out.where == "controller":
            continue
        task = next((t.task for t in record.tasks if t.id == task_id), "")
        selection = record.selections.get(task_id)
        if selection is not None and selection.runs_as is not None:
            task = selection.runs_as
        images = sum(1 for f in out.files if f.kind == "image")
        videos = sum(1 for f in out.files if f.kind == "video")
        lines.append(_expert_line(prices, task_id, task, provider_of(out.where), result.model,
                                  seconds=out.billed_seconds, images=images, videos=videos))
    lines.append(_controller_line(prices, usage.prompt_tokens, usage.completion_tokens))
    return Cost(tuple(lines))


@dataclass(frozen=True)
class Pricing:
    """A price table and where tasks will likely run: what a pipeline estimates and charges with.

    Attributes:
        table: the prices.
        provider_for: task name → the table's provider it will likely run on (``"controller"``
            for a task the controller answers; its tokens are then in the controller's line).
    """

    table: PriceTable
    provider_for: Callable[[str], str]

    def estimate(self, tasks: Iterable[Task], usage: Usage | None = None, *, answer: bool = True) -> Cost:
        """:func:`estimate_plan` of ``tasks`` with this table."""
        return estimate_plan(tasks, self.table, self.provider_for, usage=usage, answer=answer)

    def actual(self, record: RunRecord, usage: Usage) -> Cost:
        """:func:`actual_cost` of the run of ``record``."""
        return actual_cost(record, usage, self.table)
