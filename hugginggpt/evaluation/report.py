"""The planning benchmark's report: TaskBench's metrics overall and by graph shape, how planning
went (repairs, refusals, latency, tokens), as a JSON document and a short Markdown table."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

from .metrics import binary_counts, edit_distance, node_scores, step_rouge
from .runner import Outcome
from .taskbench import GoldRecord, Graph, covered, plan_graph, resources_for
from .toollist import ToolList, builtin

SHAPES = ("single", "chain", "dag")

_SOURCE = ("TaskBench paper (Shen et al. 2023), Table 3 / leaderboard (microsoft/JARVIS taskbench/README.md): "
           "GPT-4 on the {} tools")
PUBLISHED: dict[str, dict[str, Any]] = {
    # n-F1 = node micro F1 and e-F1 = link binary F1 (no matching); R1/R2 are ROUGE on the LLM's
    # own step texts (ours are derived from the plan, see STEPS_NOTE)
    "huggingface": {
        "source": _SOURCE.format("Hugging Face"), "model": "gpt-4", "node_f1": 0.8154, "link_f1": 0.5470,
        "argument_name_f1": 0.7731, "argument_value_f1": 0.6086, "rouge1": 0.5242, "rouge2": 0.3038,
    },
    "multimedia": {
        "source": _SOURCE.format("multimedia"), "model": "gpt-4", "node_f1": 0.9090, "link_f1": 0.6927,
        "argument_name_f1": 0.8706, "argument_value_f1": 0.7231, "rouge1": 0.6084, "rouge2": 0.4008,
    },
}
"""The published figures for the same columns, printed beside ours when the tool list is one of
TaskBench's (they are not comparable on another list)."""


def _share(n: int, total: int) -> float:
    return round(n / total, 4) if total else 0.0


def score(pairs: Sequence[tuple[Graph, Graph]], tools: ToolList) -> dict[str, Any]:
    """TaskBench's metrics for ``(gold, predicted)`` graphs (:mod:`.metrics`).

    Returns:
        ``{"node": micro precision/recall/f1/tp/fp/fn, "node_macro": {"precision", "recall",
        "f1", "tools"}, "argument_name" (t-F1), "argument_value" (v-F1), "link" (e-F1): each
        precision/recall/f1/tp/fp/fn, "edit_distance": normalised, lower is better (``None``
        without requests), "rouge": {"rouge1", "rouge2", "rougeL"} F-measure over the requests
        whose gold record has steps (``None`` when none has), "step_requests": how many}``; all
        figures in [0, 1], rounded to 4 places.
    """
    nodes = node_scores(((g.nodes, p.nodes) for g, p in pairs), tools.ids).to_json()
    ed = edit_distance(([tools.index(n) for n in g.nodes], [tools.index(n) for n in p.nodes]) for g, p in pairs)
    with_steps = [(g, p) for g, p in pairs if g.steps is not None]
    rouge = step_rouge(("\n".join(g.steps or ()), "\n".join(p.steps or ())) for g, p in with_steps)
    return {
        "node": nodes["micro"],
        "node_macro": nodes["macro"],
        "argument_name": binary_counts((g.argument_names, p.argument_names) for g, p in pairs).to_json(),
        "argument_value": binary_counts((g.argument_values, p.argument_values) for g, p in pairs).to_json(),
        "link": binary_counts((g.links, p.links) for g, p in pairs).to_json(),
        "edit_distance": None if ed is None else round(ed, 4),
        "rouge": None if rouge is None else {k: round(v, 4) for k, v in rouge.items()},
        "step_requests": len(with_steps),
    }


STEPS_NOTE = ("our plans have no step texts: each task is one line, 'tool: argument, argument' "
              "(file names and literal text; 'the output of <tool>' for a task's result)")


def _planning(statuses: Counter[str], scored: int, latencies: list[float], tokens_in: list[int],
              tokens_out: list[int]) -> dict[str, Any]:
    return {
        "planned_at_once": _share(statuses["planned"], scored),
        "planned_after_repair": _share(statuses["repaired"], scored),
        "refused": _share(statuses["refused"], scored),
        "latency_s": {
            "mean": round(statistics.fmean(latencies), 3) if latencies else None,
            "median": round(statistics.median(latencies), 3) if latencies else None,
            "p90": round(statistics.quantiles(latencies, n=10)[-1], 3) if len(latencies) > 1 else None,
        },
        "mean_prompt_tokens": round(statistics.fmean(tokens_in), 1) if tokens_in else None,
        "mean_completion_tokens": round(statistics.fmean(tokens_out), 1) if tokens_out else None,
    }


def _record_row(record: GoldRecord, outcome: Outcome, predicted: Graph) -> dict[str, Any]:
    return {
        "id": record.id, "shape": record.shape, "status": outcome.status,
        "gold": list(record.graph.nodes), "predicted": list(predicted.nodes),
        "gold_links": [list(x) for x in record.graph.links], "predicted_links": [list(x) for x in predicted.links],
        "gold_arguments": [list(x) for x in record.graph.arguments],
        "predicted_arguments": [list(x) for x in predicted.arguments],
        "predicted_steps": list(predicted.steps or ()),
        "problem": outcome.problem, "latency_s": outcome.latency_s, "cached": outcome.cached,
    }


def _published(tools: ToolList) -> dict[str, Any] | None:
    """The leaderboard's figures for ``tools`` when it is one of TaskBench's lists (by content, so a
    copy of its ``tool_desc.json`` counts), else ``None``."""
    return next((PUBLISHED[name] for name in PUBLISHED if tools.ids == builtin(name).ids), None)


def _by_shape(pairs: Sequence[tuple[str, Graph, Graph]], tools: ToolList) -> dict[str, dict[str, Any]]:
    """Shape → :func:`score` of its ``(shape, gold, predicted)`` pairs plus ``"requests"``, shapes
    in :data:`SHAPES` order, unknown shapes after them alphabetically."""
    shapes = {shape for shape, _, _ in pairs}
    ordered = [s for s in SHAPES if s in shapes] + sorted(s for s in shapes if s not in SHAPES)
    return {
        s: {"requests": sum(shape == s for shape, _, _ in pairs), **score([(g, p) for shape, g, p in pairs if shape == s], tools)}
        for s in ordered
    }


def build_report(
    records: Sequence[GoldRecord], outcomes: Sequence[Outcome], tools: ToolList, meta: dict[str, Any]
) -> dict[str, Any]:
    """Score ``outcomes`` against ``records`` (same order).

    Args:
        tools: the tool list scored against (nodes named otherwise are not scored, as in TaskBench).
        meta: what was evaluated (data file, controller, prompt version…), copied into the report.

    Returns:
        ``{..meta, "tools": {"name", "source", "size", "gold_nodes", "gold_nodes_outside"},
        "requests", "scored", "controller_errors", "overall": :func:`score`, "by_shape": {shape:
        :func:`score` + "requests"}, "published": the leaderboard's figures (Hugging Face list
        only, else ``None``), "steps": how our step lines are made, "planning": shares of planned /
        repaired / refused, latency seconds (mean, median, p90), mean tokens,
        "gold_tools_we_lack" and "gold_tools_unknown" (name → count), "records": one entry per
        request}``. Records whose planning failed at the controller are listed but not scored.
    """
    pairs: list[tuple[str, Graph, Graph]] = []
    statuses: Counter[str] = Counter()
    lacking: Counter[str] = Counter()
    unknown: Counter[str] = Counter()
    latencies: list[float] = []
    tokens_in: list[int] = []
    tokens_out: list[int] = []
    rows: list[dict[str, Any]] = []
    ours = covered(tools)
    for record, outcome in zip(records, outcomes, strict=True):
        statuses[outcome.status] += 1
        files = {r.id: r.name or r.id for r in resources_for(record.request)}
        predicted = plan_graph(outcome.plan(), tools, files)
        rows.append(_record_row(record, outcome, predicted))
        if outcome.status == "error":
            continue
        pairs.append((record.shape, record.graph, predicted))
        unknown.update(record.unknown_tools)
        lacking.update(n for n in record.graph.nodes if n in tools and n not in ours)
        if not outcome.cached or outcome.latency_s:
            latencies.append(outcome.latency_s)
        tokens_in.append(outcome.prompt_tokens)
        tokens_out.append(outcome.completion_tokens)
    scored = len(records) - statuses["error"]
    gold_nodes = [n for r in records for n in r.graph.nodes]
    return {
        **meta,
        "tools": {**tools.describe(), **meta.get("tools", {}),
                  "gold_nodes": len(gold_nodes), "gold_nodes_outside": tools.outside(gold_nodes)},
        "requests": len(records),
        "scored": scored,
        "controller_errors": statuses["error"],
        "overall": score([(g, p) for _, g, p in pairs], tools),
        "by_shape": _by_shape(pairs, tools),
        "published": _published(tools),
        "steps": STEPS_NOTE,
        "planning": _planning(statuses, scored, latencies, tokens_in, tokens_out),
        "gold_tools_we_lack": dict(lacking.most_common()),
        "gold_tools_unknown": dict(unknown.most_common()),
        "records": rows,
    }


COLUMNS = "| graphs | requests | node P | node R | n-F1 | node macro F1 | t-F1 | v-F1 | e-F1 (link) | NED ↓ | ROUGE-1 | ROUGE-2 | ROUGE-L |"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}"


def _row(name: str, n: int | str, s: dict[str, Any]) -> str:
    rouge = s["rouge"] or {}
    ed = "n/a" if s["edit_distance"] is None else f"{s['edit_distance']:.4f}"
    cells = [name, str(n), _pct(s["node"]["precision"]), _pct(s["node"]["recall"]), _pct(s["node"]["f1"]),
             _pct(s["node_macro"]["f1"]), _pct(s["argument_name"]["f1"]), _pct(s["argument_value"]["f1"]),
             _pct(s["link"]["f1"]), ed, _pct(rouge.get("rouge1")), _pct(rouge.get("rouge2")), _pct(rouge.get("rougeL"))]
    return "| " + " | ".join(cells) + " |"


def _published_row(p: dict[str, Any]) -> str:
    cells = [f"{p['model']} (published)", "", "", "", _pct(p["node_f1"]), "", _pct(p["argument_name_f1"]),
             _pct(p["argument_value_f1"]), _pct(p["link_f1"]), "", _pct(p["rouge1"]), _pct(p["rouge2"]), ""]
    return "| " + " | ".join(cells) + " |"


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: the tool list, a table of TaskBench's metrics (in %, as TaskBench
    prints them; NED as a fraction, lower is better) overall and by shape with the published
    figures beside ours, then one paragraph on planning."""
    t = report["tools"]
    default = " (the default)" if t.get("default") else ""
    lines = [
        f"Tool list: {t['name']}{default}, {t['size']} tools ({t['source']}); "
        f"{t['gold_nodes_outside']} of {t['gold_nodes']} gold nodes are outside it.",
        "",
        COLUMNS,
        "|---|" + "---:|" * (COLUMNS.count("|") - 2),
        _row("all", report["scored"], report["overall"]),
    ]
    for shape, s in report["by_shape"].items():
        lines.append(_row(shape, s["requests"], s))
    if report["published"]:
        lines.append(_published_row(report["published"]))
    lines.append("")
    if report["published"]:
        lines.append(f"Published: {report['published']['source']}.")
    if report["overall"]["rouge"] is None:
        lines.append("ROUGE: n/a, the gold records have no steps (tool_steps).")
    else:
        lines.append(f"ROUGE on {report['overall']['step_requests']} requests with gold steps; {report['steps']}.")
    p = report["planning"]
    lat = p["latency_s"]
    lines.append(
        f"Planned at once {p['planned_at_once']:.0%}, after a repair round {p['planned_after_repair']:.0%}, "
        f"refused {p['refused']:.0%}; planning latency mean {_seconds(lat['mean'])}, median "
        f"{_seconds(lat['median'])}, p90 {_seconds(lat['p90'])}; mean tokens {p['mean_prompt_tokens']} in, "
        f"{p['mean_completion_tokens']} out."
    )
    if report["controller_errors"]:
        lines.append(f"{report['controller_errors']} requests failed at the controller and are not scored (see the log).")
    if report["gold_tools_unknown"]:
        names = ", ".join(f"{k} ({v})" for k, v in report["gold_tools_unknown"].items())
        lines.append(f"Gold nodes naming tools outside the list, not scored (as in TaskBench): {names}.")
    if report["gold_tools_we_lack"]:
        names = ", ".join(f"{k} ({v})" for k, v in report["gold_tools_we_lack"].items())
        lines.append(f"Gold tools with no task of ours, counted as misses: {names}.")
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"
