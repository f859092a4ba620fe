"""The live Slack reply (issue "Native live experience"): the plan as task cards in a chat stream,
the answer streamed, a Stop button, feedback buttons, the loading status, the fallback to a status
message, and DMs that remember. Real slack-bolt / slack_sdk against the stand-in Slack (which
enforces the streaming methods' rules); the real service on sandbox backends. Assertions are on
what a user sees in the thread."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from PIL import Image
from sqlalchemy import text

from adapters.turn import STARTED_OVER
from adapters.slack.handler import ALREADY_ENDED, NOT_YOURS
from adapters.slack.web import FEEDBACK_ACTION, STOP_ACTION
from benchmarks.harness.slack import CHANNEL, Harness, png_file, start_harness
from benchmarks.harness.slack import make_service

MEDIA = Path(__file__).parent / "fixtures" / "media"


@pytest.fixture
async def slow(slack, tmp_path):
    """The harness on a service whose captioning model takes 0.6 s and drawing 20 s."""
    async with make_service(tmp_path, latency={"image-to-text": 0.6, "text-to-image": 20}) as svc:
        h = await start_harness(slack, svc, tmp_path)
        yield h
        await h.close()


def _states(reply, card: str) -> list[str]:
    out: list[str] = []
    for _, cid, status in reply.task_updates:
        if cid == card and (not out or out[-1] != status):
            out.append(status)
    return out


async def test_the_plan_streams_as_task_cards_then_the_answer_with_feedback_buttons(slow: Harness):
    h = slow
    body, _, ts = h.mention("describe this image", files=[png_file(h.slack)])
    await h.deliver(body)
    await h.settle()
    (reply,) = h.replies(ts)
    assert reply.display_mode == "plan" and reply.plan_title == "Plan: 1 task"
    assert _states(reply, "task-0") == ["pending", "in_progress", "complete"]
    card = reply.tasks["task-0"]
    assert card["title"].startswith("image-to-text · ") and card["output"]  # the caption, in the card
    assert "image-to-text" in reply.text  # the answer, streamed as Markdown after the cards
    assert reply.text.count("Sandbox stand-in controller") == 1  # every piece of it sent once
    feedback = [b for b in reply.blocks if b["type"] == "context_actions"]
    assert feedback and feedback[0]["elements"][0]["type"] == "feedback_buttons"
    # a loading status while working, cleared at the end
    statuses = [st for _, ch, th, st in h.slack.statuses if (ch, th) == (CHANNEL, ts)]
    assert statuses[0] and statuses[-1] == ""
    # feedback is stored with the turn and thanked privately
    value = feedback[0]["elements"][0]["positive_button"]["value"]
    assert await h.click(reply, FEEDBACK_ACTION, value, user="U7") == 200
    await h.slack.wait_for(lambda: h.slack.ephemeral)
    assert h.slack.ephemeral[-1]["text"] == "Thanks for the feedback." and h.slack.ephemeral[-1]["user"] == "U7"
    rows = await h.service.store.database.read("t", text("SELECT user, verdict FROM feedback"))
    assert [tuple(r) for r in rows] == [("U7", "good")]


async def test_stop_button_ends_the_run_with_what_finished(slow: Harness):
    h = slow
    body, _, ts = h.mention("describe this image and draw a picture of a red fox", files=[png_file(h.slack)])
    await h.deliver(body)
    reply = await h.slack.wait_for(lambda: next((m for m in h.replies(ts) if m.tasks.get("task-1")), None))
    stop = next(b for b in reply.blocks if b["type"] == "actions")["elements"][0]
    assert stop["action_id"] == STOP_ACTION
    await h.slack.wait_for(lambda: reply.tasks.get("task-0", {}).get("status") == "complete", timeout=10)
    # someone else may not stop it
    assert await h.click(reply, STOP_ACTION, stop["value"], user="U9") == 200
    await h.slack.wait_for(lambda: h.slack.ephemeral)
    assert h.slack.ephemeral[-1]["text"] == NOT_YOURS and reply.streaming
    # the requester may
    assert await h.click(reply, STOP_ACTION, stop["value"], user="U1") == 200
    await h.settle(timeout=10)  # well before the 20 s drawing would end
    assert reply.tasks["task-0"]["status"] == "complete"
    assert reply.tasks["task-1"]["status"] == "error" and reply.tasks["task-1"]["details"] == "Stopped before it finished."
    assert "You stopped this run" in reply.text and not reply.streaming
    # a press after the end is answered privately
    await h.click(reply, STOP_ACTION, stop["value"], user="U1")
    await h.slack.wait_for(lambda: h.slack.ephemeral[-1]["text"] == ALREADY_ENDED)


async def test_a_stream_the_server_closes_continues_as_status_updates(slow: Harness):
    h = slow
    h.slack.close_streams_after = 1  # Slack closed the stream (after some minutes, in real life)
    body, _, ts = h.mention("describe this image", files=[png_file(h.slack)])
    await h.deliver(body)
    await h.settle()
    stream, status, *answer = h.replies(ts)
    assert stream.display_mode == "plan" and not stream.streaming
    assert status.text.startswith(":white_check_mark: Done") and not any(b["type"] == "actions" for b in status.blocks)
    assert answer and "image-to-text" in "".join(m.text for m in answer)  # the answer arrives once, as messages
    assert "image-to-text" not in stream.text


async def test_streaming_refused_falls_back_to_a_status_message(slow: Harness):
    h = slow
    h.slack.fail_methods["chat.startStream"] = "not_allowed_token_type"
    body, _, ts = h.mention("describe this image", files=[png_file(h.slack)])
    await h.deliver(body)
    await h.settle()
    status, answer = h.replies(ts)
    assert status.text.startswith(":white_check_mark: Done") and "image-to-text" in answer.text


async def test_dms_remember_until_the_user_starts_over(slack, tmp_path):
    async with make_service(tmp_path) as svc:
        h = await start_harness(slack, svc, tmp_path)
        try:
            first, ts1 = h.user_message("describe this image", channel="D0DM", channel_type="im",
                                        files=[png_file(slack, "astronaut.png")])
            await h.deliver(first)
            await h.settle()
            # a new top-level DM, not a thread reply: it continues the DM conversation
            second, ts2 = h.user_message("now make it black and white", channel="D0DM", channel_type="im")
            await h.deliver(second)
            await h.settle()
            (made,) = slack.thread_files("D0DM", ts2)
            img = Image.open(io.BytesIO(made.data)).convert("RGB")
            assert img.size == Image.open(MEDIA / "astronaut.png").size
            assert all(len(set(img.getpixel((x, y)))) == 1 for x in range(0, img.width, 53) for y in range(0, img.height, 47))
            # "new" starts over: the earlier picture is no longer there
            reset, ts3 = h.user_message("new", channel="D0DM", channel_type="im")
            await h.deliver(reset)
            await h.settle()
            assert [m.text for m in h.replies(ts3, channel="D0DM")] == [STARTED_OVER]
            third, ts4 = h.user_message("now make it black and white", channel="D0DM", channel_type="im")
            await h.deliver(third)
            await h.settle()
            assert slack.thread_files("D0DM", ts4) == []
        finally:
            await h.close()


async def test_the_live_benchmark_runs_and_prints_its_table(capsys):
    from benchmarks import bench_live

    await bench_live.run(2)
    out = capsys.readouterr().out
    assert "| plan ready → first task card | 2 |" in out and "| Stop pressed → run stopped" in out


async def test_opening_the_dm_suggests_what_the_bot_can_do_with_files(slack, tmp_path):
    async with make_service(tmp_path) as svc:
        h = await start_harness(slack, svc, tmp_path)
        try:
            opened = slack.event_body({"type": "app_home_opened", "user": "U1", "channel": "D0DM", "tab": "messages",
                                       "event_ts": slack.new_ts()})
            assert (await h.deliver(opened))[0] == 200
            prompts = await slack.wait_for(lambda: slack.suggested.get("D0DM"))
            assert [p["title"] for p in prompts][-1] == "Start over" and any("photo" in p["message"] for p in prompts)
        finally:
            await h.close()


async def test_two_processes_on_one_data_dir_answer_a_redelivered_mention_once(slack, tmp_path):
    """Two bot replicas (each its own service, as two processes would have) on one data dir: Slack
    delivers the mention as app_mention to one and as message to the other, at the same instant."""
    import asyncio

    async with make_service(tmp_path) as one, make_service(tmp_path) as two:
        a = await start_harness(slack, one, tmp_path)
        b = await start_harness(slack, two, tmp_path)
        try:
            app_mention, message, ts = a.mention("draw a picture of a red fox in the snow")
            retry = dict(app_mention)
            await asyncio.gather(a.deliver(app_mention), b.deliver(message), b.deliver(retry, retry_num=1))
            await a.settle()
            await b.settle()
            assert len(a.replies(ts)) == 1 and len(slack.thread_files(CHANNEL, ts)) == 1
            assert a.bot.stats.runs + b.bot.stats.runs == 1
        finally:
            await a.close()
            await b.close()


async def test_model_and_controller_text_in_the_stream_cannot_ping_anyone(slow: Harness):
    h = slow
    # the user typed the characters "<!channel>" (Slack sends them escaped); the answer quotes the request
    body, _, ts = h.mention("describe this image &lt;!channel&gt; &lt;@U0BOSS&gt;", files=[png_file(h.slack)])
    await h.deliver(body)
    await h.settle()
    (reply,) = h.replies(ts)
    assert "!channel" in reply.text and "U0BOSS" in reply.text  # the words are shown…
    assert "<!channel>" not in reply.text and "<@U0BOSS>" not in reply.text  # …as text, not as mentions
    for card in reply.tasks.values():
        assert "<" not in (card["output"] or "") + (card["details"] or "") + card["title"]
