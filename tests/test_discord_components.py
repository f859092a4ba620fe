"""The Components V2 builders without a network: every layout stays within Discord's documented
limits (checked by the stand-in's own validator, the same that answers 400 in the end-to-end
tests), whatever the plan's size or the answer's length."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.discord.components import MediaItem, media_view, progress_texts, progress_view, stop_custom_id
from adapters.progress import Progress
from pipeline.types import Done, PlanReady, ResponseDelta, RunRecord, Task, TaskStarted
from sandbox.discord_messages import IS_COMPONENTS_V2, component_problem, components_text, walk_components


def _progress(n_tasks: int, answer: str = "", task_name: str = "image-to-text") -> Progress:
    p = Progress(started=0.0)
    p.apply(PlanReady([Task(task=task_name, id=i, dep=[-1], args={"image": "image-1"}) for i in range(n_tasks)]), now=0.1)
    for i in range(n_tasks):
        p.apply(TaskStarted(task_id=i, model=f"org/model-{i}-" + "x" * 60), now=0.2)
    if answer:
        p.apply(ResponseDelta(answer), now=0.3)
    return p


def _payload(view) -> dict:
    return {"flags": IS_COMPONENTS_V2, "components": view.to_components()}


async def test_progress_view_lists_tasks_with_models_and_a_stop_button() -> None:
    view = progress_view(_progress(2), run_id="ab12")
    body = _payload(view)
    assert component_problem(body, IS_COMPONENTS_V2, set()) is None
    text = components_text(body["components"])
    assert "**#0 image-to-text**" in text and "`org/model-1-" in text and "· running" in text
    [button] = [c for c in walk_components(body["components"]) if c["type"] == 2]
    assert button["custom_id"] == "hgpt:stop:ab12" and button["label"] == "Stop"
    assert view.is_finished()  # not kept by discord.py's view store


async def test_a_finished_run_has_no_stop_button() -> None:
    p = _progress(1)
    p.apply(Done(RunRecord(request="x", tasks=list(t.task for t in p.tasks.values()), response="ok")), now=1.0)
    body = _payload(progress_view(p, run_id="ab12"))
    assert not [c for c in walk_components(body["components"]) if c["type"] == 2]
    assert "🏁 Finished" in components_text(body["components"])


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 300), answer=st.text(max_size=6000), title=st.text(max_size=500))
async def test_progress_view_always_within_discord_limits(n: int, answer: str, title: str) -> None:
    p = _progress(n, answer)
    p.stage = "responding" if answer.strip() else p.stage
    body = _payload(progress_view(p, run_id="0f", title=title or None))
    assert component_problem(body, IS_COMPONENTS_V2, set()) is None
    if n > 60:
        assert "more tasks" in components_text(body["components"])


def test_texts_share_the_4000_characters() -> None:
    head, tasks, tail = progress_texts(_progress(200, "word " * 2000), title="t" * 1000)
    assert len(head) + len(tasks) + len(tail) <= 4000
    assert tail.startswith("✍️ Writing the answer…\n…")


async def test_media_view_puts_images_in_a_gallery_and_other_files_as_file_components() -> None:
    items = [MediaItem(b"png", f"image-{i}.png", "image/png", f"text-to-image output of task {i}") for i in range(3)]
    items.append(MediaItem(b"wav", "audio-1.wav", "audio/wav", "text-to-speech output of task 3"))
    view, files = media_view(items, "📎 one file was re-encoded")
    body = _payload(view)
    assert component_problem(body, IS_COMPONENTS_V2, {f.filename for f in files}) is None
    comps = walk_components(body["components"])
    [gallery] = [c for c in comps if c["type"] == 12]
    assert [i["description"] for i in gallery["items"]] == [f"text-to-image output of task {i}" for i in range(3)]
    assert [c["file"]["url"] for c in comps if c["type"] == 13] == ["attachment://audio-1.wav"]
    with pytest.raises(ValueError):
        media_view(items * 3)


def test_stop_custom_id_is_checked() -> None:
    assert stop_custom_id("0123abcd") == "hgpt:stop:0123abcd"
    with pytest.raises(ValueError):
        stop_custom_id("not hex")


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 40), name=st.sampled_from(["image-to-text", "x" * 120]))
async def test_a_waiting_plans_components_stay_within_discord_limits(n: int, name: str) -> None:
    """Run, Cancel and a "Run without steps…" select of at most 25 steps, never all of them."""
    from adapters.discord.components import approval_view
    from bot.approval import ApprovalNeeded

    tasks = tuple(Task(task=name, id=i, dep=[-1], args={"text": "a"}) for i in range(n))
    body = {"components": approval_view(ApprovalNeeded("0123456789abcdef", tasks, 0.5, 4e9, "U1")).to_components()}
    assert component_problem(body, 0, set()) is None
    every = walk_components(body["components"])
    assert [c["label"] for c in every if c["type"] == 2] == ["Run", "Cancel"]
    selects = [c for c in every if c["type"] == 3]
    assert len(selects) == (n > 1)
    for select in selects:
        assert len(select["options"]) == min(n, 25) and select["max_values"] == min(n - 1, 25)
        assert select["custom_id"] == "hgpt:plan:without:0123456789abcdef"


def test_the_stand_in_refuses_a_select_discord_would_refuse() -> None:
    row = {"type": 1, "components": [{"type": 3, "custom_id": "s", "max_values": 1,
                                      "options": [{"label": str(i), "value": str(i)} for i in range(26)]}]}
    assert component_problem({"components": [row]}, 0, set()) == "a select holds 1 to 25 options, not 26"
    row["components"] = [{"type": 3, "custom_id": "s", "max_values": 3, "options": [{"label": "a", "value": "a"}]}]
    assert "max_values 3" in component_problem({"components": [row]}, 0, set())
    row["components"] = [{"type": 3, "custom_id": "s", "options": [{"label": "a", "value": "a"}]},
                         {"type": 2, "custom_id": "b", "label": "b", "style": 1}]
    assert component_problem({"components": [row]}, 0, set()) == "an action row with a select holds nothing else"
