"""Pure logic of the Discord front end: answer splitting, thread names, progress text, de-duplication,
access and attachment checks. No network."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.discord.policy import AttachmentInfo, attachment_refusal, missing_permission
from adapters.progress import Progress
from adapters.discord.render import (
    missing_permission_sentence,
    render_progress,
    split_message,
    thread_name,
)
from pipeline.types import (
    Done,
    ModelSelected,
    PlanReady,
    ResponseDelta,
    RunRecord,
    Selection,
    Task,
    TaskFailed,
    TaskFinished,
    TaskResult,
    TaskSkipped,
    TaskStarted,
)

FENCE = re.compile(r"^\s*(```|~~~)", re.M)


def _fences_balanced(chunk: str) -> bool:
    """Every code block opened in the chunk is closed in it (CommonMark: a closing fence is a bare
    run of the same fence character, at least as long as the opening one)."""
    inside: str | None = None
    for line in chunk.split("\n"):
        s = line.strip()
        if inside is None and FENCE.match(line):
            inside = s[:3]
        elif inside is not None and s[:3] == inside and s.strip(s[0]) == "":
            inside = None
    return inside is None


def _words(text: str) -> list[str]:
    return [w for line in text.split("\n") if not FENCE.match(line) for w in line.split()]


# ------------------------------------------------------------------------------------------------
# split_message


def test_short_answer_is_one_message() -> None:
    assert split_message("Hello **there**.") == ["Hello **there**."]
    assert split_message("   \n\n ") == []


def test_long_prose_breaks_between_words() -> None:
    text = " ".join(f"word{i}" for i in range(1200))  # ~9000 characters
    chunks = split_message(text)
    assert len(chunks) >= 5
    assert all(len(c) <= 2000 for c in chunks)
    assert _words("\n".join(chunks)) == text.split()  # no word cut, none lost


def test_long_code_block_is_closed_and_reopened_with_its_language() -> None:
    code = "\n".join(f"    result_{i} = compute({i})  # step {i}" for i in range(200))
    text = f"Here is the script:\n\n```python\n{code}\n```\n\nRun it with Python 3.11."
    chunks = split_message(text)
    assert len(chunks) > 1
    for c in chunks:
        assert len(c) <= 2000
        assert _fences_balanced(c), c[-80:]
    for c in chunks[1:]:
        if "result_" in c.split("\n")[1 if c.startswith("```") else 0]:
            assert c.startswith("```python\n")
    # every code line survives intact, in order
    lines = [ln for c in chunks for ln in c.split("\n") if "result_" in ln]
    assert lines == code.split("\n")
    assert chunks[-1].endswith("Run it with Python 3.11.")


def test_prefers_paragraph_breaks() -> None:
    para = ("A sentence about the detected objects in the photo. " * 12).strip()
    text = "\n\n".join([para] * 6)
    chunks = split_message(text)
    assert all(c.endswith(".") for c in chunks)
    assert all(c.startswith("A sentence") for c in chunks)


def test_a_word_longer_than_a_message_is_cut_as_last_resort() -> None:
    url = "https://example.org/" + "x" * 2500
    chunks = split_message(f"See {url} now")
    assert all(len(c) <= 2000 for c in chunks)
    assert "".join(chunks).replace(" ", "").replace("\n", "") == f"See{url}now"


markdownish = st.lists(
    st.one_of(
        st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=0, max_size=300),
        st.sampled_from(["```", "```py", "~~~", "", "    indented code", "- item", "# Title"]),
        st.builds(lambda n: "word " * n, st.integers(0, 600)),
    ),
    max_size=40,
).map("\n".join)


@settings(max_examples=150, deadline=None)
@given(markdownish, st.integers(min_value=40, max_value=2000))
def test_split_properties(text: str, limit: int) -> None:
    chunks = split_message(text, limit)
    for c in chunks:
        assert len(c) <= limit
        assert c.strip()
        assert _fences_balanced(c)
    # nothing lost: all words come back in order (words longer than a message may be cut)
    if all(len(w) < limit // 2 for w in text.split()):
        assert _words("\n".join(chunks)) == _words(text)


def test_limit_must_leave_room() -> None:
    with pytest.raises(ValueError):
        split_message("x" * 100, 10)


# ------------------------------------------------------------------------------------------------
# thread_name


def test_thread_name_from_request() -> None:
    assert thread_name("Describe **this** photo <@123> please") == "Describe this photo please"
    assert thread_name("   ") == "HuggingGPT request"
    long = thread_name("Generate an image of " + "a very large rocket " * 20)
    assert 1 <= len(long) <= 100 and long.endswith("…") and "rock…" not in long
    assert len(thread_name("x" * 300)) == 100


@given(st.text())
def test_thread_name_is_always_valid(text: str) -> None:
    name = thread_name(text)
    assert 1 <= len(name) <= 100
    assert name.strip() == name


# ------------------------------------------------------------------------------------------------
# progress


def _plan() -> tuple[Task, ...]:
    return (
        Task(1, "image-to-text", (), {"image": "image-1"}),
        Task(2, "text-to-speech", (1,), {"text": "<resource>-1"}),
        Task(3, "object-detection", (), {"image": "image-1"}),
    )


def test_progress_shows_plan_models_states_and_reasons() -> None:
    p = Progress(started=0.0)
    assert "Planning" in render_progress(p, now=0.0)
    p.apply(PlanReady(_plan()), now=0.5)
    text = render_progress(p, now=0.5)
    assert "3 tasks" in text and "#2 text-to-speech** (after #1)" in text and text.count("waiting") == 3
    p.apply(ModelSelected(Selection(1, "Salesforce/blip-image-captioning-large", "top")), now=1)
    p.apply(TaskStarted(1, "Salesforce/blip-image-captioning-large"), now=1.0)
    p.apply(TaskStarted(3, "facebook/detr-resnet-50"), now=1.0)
    text = render_progress(p, now=3.0)
    assert "`Salesforce/blip-image-captioning-large` · running 2 s" in text
    p.apply(TaskFinished(TaskResult(1, "ok", model="Salesforce/blip-image-captioning-large")), now=4.0)
    p.apply(TaskFailed(TaskResult(3, "failed", error="The model is still loading; try again in a minute.",
                                          model="facebook/detr-resnet-50")), now=4.0)
    p.apply(TaskSkipped(TaskResult(2, "skipped", error="Task 1 failed.")), now=4.0)
    text = render_progress(p, now=4.0)
    assert "✅ **#1 image-to-text** · `Salesforce/blip-image-captioning-large` · done in 3.0 s" in text
    assert "❌ **#3 object-detection** · `facebook/detr-resnet-50` · failed: The model is still loading" in text
    assert "⏭️ **#2 text-to-speech** (after #1) · skipped: Task 1 failed." in text
    p.apply(ResponseDelta("The photo shows"), now=4.5)
    assert "Writing the answer" in render_progress(p, now=4.5)
    p.apply(Done(RunRecord(request="x", response="The photo shows a cat.")), now=6.0)
    assert "Finished in 6.0 s" in render_progress(p, now=6.0)


def test_progress_error_and_limit() -> None:
    p = Progress(started=0.0)
    p.apply(PlanReady(tuple(Task(i, "image-to-text", (), {"image": "image-1"}) for i in range(1, 200))), now=0)
    text = render_progress(p, now=0)
    assert len(text) <= 2000 and "more tasks" in text
    p.apply(Done(RunRecord(request="x", status="error", error="The controller LLM is unreachable.")), now=1)
    text = render_progress(p, now=1)
    assert len(text) <= 2000 and "Stopped in 1.0 s: The controller LLM is unreachable." in text


def test_permission_sentence_names_the_permission() -> None:
    s = missing_permission_sentence("create_public_threads")
    assert "**Create Public Threads**" in s


# ------------------------------------------------------------------------------------------------
# policy



def test_attachment_refusals() -> None:
    ok = AttachmentInfo("cat.png", 1000, "image/png")
    assert attachment_refusal([ok], max_bytes=2000, max_files=3) is None
    big = attachment_refusal([AttachmentInfo("big.wav", 30 * 1024 * 1024, "audio/wav")], max_bytes=25 * 1024 * 1024,
                             max_files=3)
    assert big == "big.wav is 30.0 MB, over the 25.0 MB limit for files I read; please send a smaller file."
    pdf = attachment_refusal([AttachmentInfo("cv.pdf", 10, "application/pdf")], max_bytes=100, max_files=3)
    assert pdf == ("cv.pdf is application/pdf; I can only work with images, audio, video and text files "
                   "(.txt, .md, .csv, .json).")
    for name, ctype in (("notes.txt", "text/plain; charset=utf-8"), ("data.json", "application/json"), ("t.csv", None)):
        assert attachment_refusal([AttachmentInfo(name, 10, ctype)], max_bytes=100, max_files=3) is None
    assert attachment_refusal([AttachmentInfo("page.html", 10, "text/html")], max_bytes=100, max_files=3)
    assert "at most 1 files" in attachment_refusal([ok, ok], max_bytes=2000, max_files=1)


def test_missing_permission_order() -> None:
    everything = {"view_channel", "send_messages", "create_public_threads", "send_messages_in_threads",
                  "attach_files", "read_message_history"}
    assert missing_permission(everything, in_thread=False) is None
    assert missing_permission(everything - {"attach_files"}, in_thread=False) == "attach_files"
    assert missing_permission(everything - {"create_public_threads"}, in_thread=True) is None
