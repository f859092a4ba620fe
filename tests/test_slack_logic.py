"""Pure logic of the Slack front end: dedup, message classification, splitting, text conversion,
progress rendering, rate limits."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from adapters.progress import Progress
from adapters.slack.logic import (
    MESSAGE_LIMIT_BYTES,
    render_status,
    classify_message,
    missing_scope_sentence,
    split_text,
    strip_mentions,
    to_mrkdwn,
    unescape_slack,
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

FIXTURES = Path(__file__).parent / "fixtures"


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


# ------------------------------------------------------------------------------ dedup


# ------------------------------------------------------------------------------ classification

BOT = "U0BOT"


def ev(**kw):
    base = {"type": "message", "user": "U1", "text": "hi", "ts": "1.0", "channel": "C1", "channel_type": "channel"}
    base.update(kw)
    return base


def test_classify():
    assert classify_message(ev(type="app_mention", text=f"<@{BOT}> draw"), bot_user_id=BOT).verdict == "request"
    assert classify_message(ev(text=f"<@{BOT}> draw"), bot_user_id=BOT).verdict == "request"
    assert classify_message(ev(text="chatter"), bot_user_id=BOT).verdict == "ignore"
    assert classify_message(ev(channel_type="im"), bot_user_id=BOT).reason == "direct message"
    d = classify_message(ev(thread_ts="0.5"), bot_user_id=BOT)
    assert d.verdict == "request" and d.needs_thread_check
    assert classify_message(ev(thread_ts="0.5"), bot_user_id=BOT, followups_need_mention=True).verdict == "ignore"
    # a thread parent (thread_ts == ts) without a mention is not a follow-up
    assert classify_message(ev(thread_ts="1.0"), bot_user_id=BOT).verdict == "ignore"
    # own messages, bot messages, edits
    assert classify_message(ev(user=BOT, text=f"<@{BOT}>"), bot_user_id=BOT).reason == "own message"
    assert classify_message(ev(bot_id="B0BOT", user=BOT), bot_user_id=BOT, bot_id="B0BOT").reason == "own message"
    assert classify_message(ev(bot_id="B9", user="U9", text=f"<@{BOT}>"), bot_user_id=BOT).reason == "bot message"
    edit = {"type": "message", "subtype": "message_changed", "channel": "C1", "message": {"text": f"<@{BOT}> x", "user": "U1"}}
    assert classify_message(edit, bot_user_id=BOT).verdict == "ignore"
    assert classify_message(ev(subtype="file_share", text=f"<@{BOT}> look"), bot_user_id=BOT).verdict == "request"


# ------------------------------------------------------------------------------ text in/out


def test_strip_mentions_and_unescape():
    assert strip_mentions(f"<@{BOT}> draw a cat", BOT) == "draw a cat"
    assert strip_mentions(f"<@{BOT}|hugginggpt>  hi <@U2>", BOT) == "hi <@U2>"
    assert unescape_slack("is 1 &lt; 2 &amp;&amp; 3 &gt; 2?") == "is 1 < 2 && 3 > 2?"
    assert unescape_slack("&amp;lt;") == "&lt;"
    assert unescape_slack("see <https://x.org/a?b=1|the page> and <https://y.org>") == "see the page (https://x.org/a?b=1) and https://y.org"
    assert unescape_slack("<!here> hi") == "@here hi"


def test_to_mrkdwn():
    md = "# Result\n**A cat** sits on *a mat*. See [docs](https://hf.co).\n\n- one\n- two\n\n`x < y` & ~~no~~"
    out = to_mrkdwn(md)
    assert "*Result*" in out and "*A cat*" in out and "_a mat_" in out
    assert "<https://hf.co|docs>" in out
    assert re.search(r"•\s+one", out)
    assert "x &lt; y" in out and "&amp;" in out and "~no~" in out
    assert to_mrkdwn("> quoted\n\nplain").startswith(">")
    # nothing in an answer may turn into a Slack control sequence (notify everyone, mention users)
    risky = to_mrkdwn("ping <!channel> and <@U123> `<!here>`\n\n```\n<!everyone>\n```")
    assert "<!" not in risky and "<@" not in risky and "&lt;!channel&gt;" in risky


def _strip_fences(chunks: list[str]) -> str:
    return "".join("".join(c.split("```")) for c in chunks)


def test_split_short_and_blank():
    assert split_text("hello") == ["hello"]
    assert split_text("  \n\n ") == []


def test_split_long_answer_keeps_words_and_code():
    words = " ".join(f"word{i}" for i in range(1500))
    code = "```python\n" + "\n".join(f"print({i})  # line {i}" for i in range(400)) + "\n```"
    text = f"Intro paragraph.\n\n{words}\n\n{code}\n\nOutro."
    chunks = split_text(text)
    assert len(chunks) > 3
    for c in chunks:
        assert len(c.encode()) <= MESSAGE_LIMIT_BYTES
        assert c.count("```") % 2 == 0, c[:80]
    # every word survives whole
    joined = " ".join(chunks)
    for i in (0, 777, 1499):
        assert f"word{i} " in joined + " " or f"word{i}\n" in joined
    tokens = set(joined.replace("\n", " ").split(" "))
    assert all(f"word{i}" in tokens for i in range(1500))
    # every code line survives inside a code block
    for i in (0, 200, 399):
        line = f"print({i})  # line {i}"
        holder = next(c for c in chunks if line in c)
        assert holder.index("```") < holder.index(line)


def test_split_multibyte_and_giant_word():
    text = "ж" * 5000 + " end"
    chunks = split_text(text, 1000)
    assert all(len(c.encode()) <= 1000 for c in chunks)
    assert "".join(chunks).replace(" ", "") == ("ж" * 5000 + "end")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.text(min_size=0, max_size=300), st.just("```"), st.just("```py")), max_size=40),
       st.integers(min_value=64, max_value=600))
def test_split_property(lines, limit):
    text = "\n".join(lines)
    chunks = split_text(text, limit)
    for c in chunks:
        assert len(c.encode()) <= limit
        assert c.strip()
    # nothing but whitespace and added fences is lost or invented
    src = "".join(text.split("```"))
    got = _strip_fences(chunks)
    assert "".join(got.split()) == "".join(src.split())


def test_taskbench_request_texts_survive_roundtrip():
    path = FIXTURES / "taskbench" / "data_multimedia_requests.jsonl"
    reqs = [json.loads(line) for line in path.read_text().splitlines()[:50] if line.strip()]
    for r in reqs:
        text = r.get("user_request") or r.get("request") or r.get("instruction") or ""
        slack = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        got = strip_mentions(unescape_slack(f"<@{BOT}> {slack}"), BOT)
        assert " ".join(got.split()) == " ".join(text.split())
    assert len(reqs) == 50


def test_missing_scope_sentence_names_scope():
    s = missing_scope_sentence("files:write", "upload the generated files")
    assert "`files:write`" in s and "reinstall" in s


# ------------------------------------------------------------------------------ progress


def test_progress_view_from_events():
    v = Progress()
    assert "Planning" in render_status(v)
    tasks = (Task(1, "image-to-text", (), {"image": "image-1"}), Task(2, "text-to-speech", (1,), {"text": "<resource>-1"}),
             Task(3, "object-detection", (), {"image": "image-1"}))
    assert v.apply(PlanReady(tasks))
    assert "Running 3 tasks" in render_status(v) and "(after 1)" in render_status(v)
    v.apply(ModelSelected(Selection(1, "nlpconnect/vit-gpt2-image-captioning", "most downloads")))
    v.apply(TaskStarted(1, "nlpconnect/vit-gpt2-image-captioning"))
    text = render_status(v)
    assert ":hourglass_flowing_sand: 1. `image-to-text` with `nlpconnect/vit-gpt2-image-captioning`: running" in text
    v.apply(TaskFinished(TaskResult(1, "ok", model="nlpconnect/vit-gpt2-image-captioning")))
    v.apply(TaskFailed(TaskResult(3, "failed", model="facebook/detr-resnet-50", error="The model is rate-limited.")))
    v.apply(TaskSkipped(TaskResult(2, "skipped", error="Task 1 failed.")))
    assert v.apply(ResponseDelta("A")) and not v.apply(ResponseDelta("B"))
    text = render_status(v)
    assert "Writing the answer" in text and ":x: 3." in text and "rate-limited" in text and ":white_check_mark: 1." in text
    rec = RunRecord("r", status="ok", timings_ms={"total": 2500})
    v.apply(Done(rec))
    assert render_status(v).startswith(":white_check_mark: Done in 2.5 s.")
    v2 = Progress()
    v2.apply(Done(RunRecord("r", status="error", error="The controller is unreachable <now>.")))
    assert "Stopped: The controller is unreachable &lt;now&gt;." in render_status(v2)


def test_progress_view_with_many_tasks_stays_under_limit():
    v = Progress()
    v.apply(PlanReady(tuple(Task(i, "image-to-text", (), {"image": "image-1"}) for i in range(200))))
    for i in range(200):
        v.apply(TaskFailed(TaskResult(i, "failed", model="m/" + "x" * 40, error="The model is rate-limited; tried 3 times.")))
    text = render_status(v)
    assert len(text.encode()) <= MESSAGE_LIMIT_BYTES
    assert re.search(r"…and \d+ more tasks\.$", text)


# ----------------------------------------------------------------------------------------------
# The per-event context


def test_event_context_is_derived_once_and_survives_a_handover():
    from adapters.slack.logic import EventContext
    from adapters.slack.logic import DM_THREAD

    body = {"event_id": "Ev1", "team_id": "T1"}
    event = {"type": "message", "channel": "D1", "channel_type": "im", "user": "U1", "ts": "1.5", "text": "hi",
             "files": [{"id": "F1"}]}
    ctx = EventContext.of(body, event, bot_user_id="UBOT", bot_id="BBOT", needs_thread_check=False)
    assert (ctx.team, ctx.channel, ctx.ts, ctx.thread_ts, ctx.user, ctx.is_dm) == ("T1", "D1", "1.5", "1.5", "U1", True)
    assert ctx.key.thread == DM_THREAD and ctx.delivery == "slack:event:Ev1" and not ctx.adopted
    assert ctx.message_key == "slack:message:T1:D1:1.5" and ctx.files == [{"id": "F1"}]
    with pytest.raises(AttributeError):
        ctx.team = "T2"  # frozen: every step sees the same event
    adopted = EventContext.from_payload(ctx.delivery, ctx.payload(status_ts="9.9"))
    assert adopted.adopted and adopted.status_ts == "9.9" and adopted.delivery == ctx.delivery
    assert (adopted.key, adopted.user, adopted.files) == (ctx.key, ctx.user, ctx.files)
    assert adopted.progress is not ctx.progress  # a new run gets its own progress model
