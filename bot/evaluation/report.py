"""The planning benchmark's report: TaskBench's metrics overall and by graph shape, how planning
went (repairs, refusals, latency, tokens), as a JSON document and a short Markdown table."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

from .metrics import GraphScores
from .runner import Outcome
from .taskbench import TOOL_TASKS, GoldRecord, plan_graph

SHAPES = ("single", "chain", "dag")


def _share(n: int, total: int) -> float:
    return round(n / total, 4) if total else 0.0


def build_report(
    records: Sequence[GoldRecord], outcomes: Sequence[Outcome], tools: frozenset[str], meta: dict[str, Any]
) -> dict[str, Any]:
    """Score ``outcomes`` against ``records`` (same order).

    Args:
        tools: the domain's tool names (nodes named otherwise are not scored, as in TaskBench).
        meta: what was evaluated (data file, controller, prompt version…), copied into the report.

    Returns:
        ``{..meta, "requests", "scored", "controller_errors", "overall": {"node", "link",
        "argument"} (each precision/recall/f1/tp/fp/fn), "by_shape": {shape: same + "requests"},
        "planning": shares of planned / repaired / refused, latency seconds (mean, median, p90),
        mean tokens, "gold_tools_we_lack" and "gold_tools_unknown" (name → count), "records": one
        entry per request}``. Records whose planning failed at the controller are listed but not
        scored.
    """
    overall = GraphScores.empty()
    by_shape: dict[str, GraphScores] = {}
    shape_counts: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    lacking: Counter[str] = Counter()
    unknown: Counter[str] = Counter()
    latencies: list[float] = []
    tokens_in: list[int] = []
    tokens_out: list[int] = []
    rows: list[dict[str, Any]] = []
    for record, outcome in zip(records, outcomes, strict=True):
        statuses[outcome.status] += 1
        predicted = plan_graph(outcome.plan())
        rows.append({
            "id": record.id, "shape": record.shape, "status": outcome.status,
            "gold": list(record.graph.nodes), "predicted": list(predicted.nodes),
            "gold_links": [list(x) for x in record.graph.links], "predicted_links": [list(x) for x in predicted.links],
            "problem": outcome.problem, "latency_s": outcome.latency_s, "cached": outcome.cached,
        })
        if outcome.status == "error":
            continue
        gold = (record.graph.nodes, record.graph.links, record.graph.arguments)
        pred = (predicted.nodes, predicted.links, predicted.arguments)
        overall.add(tools, gold, pred)
        by_shape.setdefault(record.shape, GraphScores.empty()).add(tools, gold, pred)
        shape_counts[record.shape] += 1
        unknown.update(record.unknown_tools)
        lacking.update(n for n in record.graph.nodes if n in tools and n not in TOOL_TASKS)
        if not outcome.cached or outcome.latency_s:
            latencies.append(outcome.latency_s)
        tokens_in.append(outcome.prompt_tokens)
        tokens_out.append(outcome.completion_tokens)
    scored = len(records) - statuses["error"]
    ordered = [s for s in SHAPES if s in by_shape] + sorted(s for s in by_shape if s not in SHAPES)
    return {
        **meta,
        "requests": len(records),
        "scored": scored,
        "controller_errors": statuses["error"],
        "overall": overall.to_json(),
        "by_shape": {s: {"requests": shape_counts[s], **by_shape[s].to_json()} for s in ordered},
        "planning": {
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
        },
        "gold_tools_we_lack": dict(lacking.most_common()),
        "gold_tools_unknown": dict(unknown.most_common()),
        "records": rows,
    }


def markdown(report: dict[str, Any]) -> str:
    """The report's figures as a short Markdown table, with one line on planning."""
    lines = [
        "| graphs | requests | node P | node R | node F1 | link F1 | argument F1 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]

    def row(name: str, n: int, s: dict[str, Any]) -> str:
        node = s["node"]
        return (f"| {name} | {n} | {node['precision']:.3f} | {node['recall']:.3f} | {node['f1']:.3f} | "
                f"{s['link']['f1']:.3f} | {s['argument']['f1']:.3f} |")

    lines.append(row("all", report["scored"], report["overall"]))
    for shape, s in report["by_shape"].items():
        lines.append(row(shape, s["requests"], s))
    p = report["planning"]
    lat = p["latency_s"]
    lines.append("")
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
        lines.append(f"Gold nodes naming tools outside the domain, not scored (as in TaskBench): {names}.")
    if report["gold_tools_we_lack"]:
        names = ", ".join(f"{k} ({v})" for k, v in report["gold_tools_we_lack"].items())
        lines.append(f"Gold tools with no task of ours, counted as misses: {names}.")
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"
