"""The sandbox's keyword planner on real TaskBench requests (issue 15, "The sandbox as a first
impression"): TaskBench's plain phrasings reach the tasks it offers, obvious chains chain, and its
score on the 55 gold records stays at its floor or above (``hugginggpt eval taskbench --sandbox``
prints the same figures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hugginggpt.evaluation.metrics import binary_counts, node_scores
from hugginggpt.evaluation.taskbench import load_records, plan_graph, resources_for
from hugginggpt.evaluation.toollist import builtin
from sandbox.planning import plan_tasks
from pipeline.planning import validate_plan
from pipeline.tasks import TASKS

GOLD = Path(__file__).parent / "fixtures" / "taskbench" / "gold_huggingface.jsonl"
TOOLS = builtin("huggingface")
RECORDS = {r.id: r for r in load_records(GOLD, TOOLS)}

# Thirty requests whose sandbox plan is TaskBench's gold graph: the same tools and the same links.
MATCHING = [
    "33446682", "17990278", "27766469", "15614709", "21898083", "28976968", "22906489", "57993067", "15484080",
    "14030108", "42488832", "26520360", "24823981", "15511675", "30553995", "11826876", "21449991", "26420392",
    "21293761", "11096083", "29292287", "17464978", "37219757", "18150561", "14498406", "24572211", "29146936",
    "25433722", "17131938", "18230114",
]


def sandbox_plan(request: str, files: str = ""):
    resources = resources_for(files or request)  # the files named, or attached, as the conversation's
    raw = plan_tasks(request, [r.prompt_view() for r in resources], sorted(TASKS))
    return validate_plan(raw, available=set(TASKS), resources=resources, request_text=request)


@pytest.mark.parametrize("record_id", MATCHING)
def test_plain_taskbench_phrasings_get_the_gold_plan(record_id):
    record = RECORDS[record_id]
    graph = plan_graph(sandbox_plan(record.request), TOOLS)
    assert set(graph.nodes) == set(record.graph.nodes), record.request
    assert set(graph.links) == set(record.graph.links), record.request


def test_the_sandbox_floor_on_the_gold_sample():
    pairs = [(record.graph, plan_graph(sandbox_plan(record.request), TOOLS)) for record in RECORDS.values()]
    nodes = node_scores(((g.nodes, p.nodes) for g, p in pairs), TOOLS.ids).micro
    links = binary_counts((g.links, p.links) for g, p in pairs)
    print(f"sandbox on {len(RECORDS)} gold records: node F1 {nodes.f1:.3f}, link F1 {links.f1:.3f}")
    assert nodes.f1 >= 0.7  # the issue's target is 0.6; 0.767 when this was written
    assert links.f1 >= 0.2


@pytest.mark.parametrize(
    "request_text,files,expected",
    [
        ("Generate natural sounding speech from this text: 'Good morning, everyone.'", [], ["text-to-speech"]),
        ("How similar are these two sentences: 'I love cats' and 'I adore cats'?", [], ["sentence-similarity"]),
        ("Colorize this photo", ["photo.jpg"], ["image-to-image"]),
        ("Transcribe this recording and draw a picture of what it describes", ["memo.wav"],
         ["automatic-speech-recognition", "text-to-image"]),
        ("Summarize example.txt and read the summary aloud", ["example.txt"], ["summarization", "text-to-speech"]),
    ],
)
def test_the_issues_examples(request_text, files, expected):
    tasks = sandbox_plan(request_text, " ".join(files))
    assert [t.task for t in tasks] == expected
    if len(tasks) == 2:
        assert tasks[1].dep == (0,)  # the obvious chain chains
