"""The Slack front end end to end: real slack-bolt / slack_sdk against the stand-in Slack on
127.0.0.1, signed event bodies through bolt's HTTP path (aiohttp server + real HTTP client), Socket
Mode through the stand-in websocket, and the service on sandbox backends.

Assertions are about what a user sees in the thread: messages, edits of the status message,
uploaded files (decoded).
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import wave
from pathlib import Path

import pytest
from PIL import Image
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.handler import create_bolt_app
from adapters.turn import RESTARTED
from benchmarks.harness.slack import CHANNEL, Harness, bot_settings, png_file, start_harness
from benchmarks.harness.slack import make_service

MEDIA = Path(__file__).parent / "fixtures" / "media"


@pytest.fixture
async def service(tmp_path):
    async with make_service(tmp_path) as svc:
        yield svc


@pytest.fixture
async def h(slack, service, tmp_path):
    harness = await start_harness(slack, service, tmp_path)
    yield harness
    await harness.close()


def decode_image(data: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(data))
    img.load()
    return img


# ------------------------------------------------------------------------------ tests


async def test_mention_answered_once_in_thread_under_replays(h: Harness):
    app_mention, message, ts = h.mention("draw a picture of a red fox in the snow")
    status, _ = await h.deliver(app_mention)
    assert status == 200
    # Slack retries the same envelope, and also sends the `message` event for the same ts
    assert (await h.deliver(app_mention, retry_num=1))[0] == 200
    assert (await h.deliver(message))[0] == 200
    assert (await h.deliver(app_mention, retry_num=2))[0] == 200
    await h.settle()
    replies = h.replies(ts)
    assert all(m.thread_ts == ts for m in replies)
    # one reply: a chat stream with the plan as task cards, then the answer
    (reply,) = replies
    assert reply.display_mode == "plan" and not reply.streaming
    assert reply.tasks["task-0"]["status"] == "complete" and reply.tasks["task-0"]["title"].startswith("text-to-image · ")
    assert reply.text.strip() and "text-to-image" in reply.text
    # the generated image was uploaded into the thread and decodes
    files = h.slack.thread_files(CHANNEL, ts)
    assert len(files) == 1
    img = decode_image(files[0].data)
    assert img.width > 0 and img.height > 0
    assert h.bot.stats.duplicates == 3 and h.bot.stats.runs == 1


async def test_progress_updates_show_plan_models_and_states(slack, tmp_path):
    # [slack] streaming = false (and the fallback when Slack refuses streams): a status message.
    # The captioning model takes 0.4 s, long enough for the "running" state to be shown
    async with make_service(tmp_path, latency={"image-to-text": 0.4}) as svc:
        h = await start_harness(slack, svc, tmp_path, streaming=False)
        try:
            await _check_progress(h)
        finally:
            await h.close()


async def _check_progress(h: Harness) -> None:
    body, _, ts = h.mention("describe this image", files=[png_file(h.slack)])
    assert (await h.deliver(body))[0] == 200
    await h.settle()
    status = next(m for m in h.replies(ts) if m.edits)
    texts = [t for _, t in status.edits]
    assert any("Plan" in t and "running" in t for t in texts), texts
    assert any(re.search(r":hourglass_flowing_sand: \d+\. `image-to-text` with `[^`]+`: running", t) for t in texts), texts
    final = texts[-1]
    assert final.startswith(":white_check_mark: Done")
    assert re.search(r":white_check_mark: \d+\. `image-to-text` with `[^`]+`: done", final), final
    # one answer message, which explains the task that ran
    answer = [m.text for m in h.replies(ts) if not m.edits]
    assert len(answer) == 1 and "image-to-text" in answer[0]
    # at most one edit per update interval, never a burst (0.05 s in tests)
    times = [t for t, _ in status.edits]
    assert all(b - a >= 0.045 for a, b in zip(times, times[1:])), times


async def test_followup_without_mention_uses_earlier_image(h: Harness):
    body, _, ts = h.mention("describe this image", files=[png_file(h.slack, "astronaut.png")])
    await h.deliver(body)
    await h.settle()
    before = len(h.replies(ts))
    follow, _ = h.user_message("now make it black and white", thread_ts=ts)
    assert (await h.deliver(follow))[0] == 200
    await h.settle()
    assert len(h.replies(ts)) > before
    files = h.slack.thread_files(CHANNEL, ts)
    assert len(files) == 1
    img = decode_image(files[0].data)
    original = Image.open(MEDIA / "astronaut.png").convert("RGB")
    assert img.size == original.size
    rgb = img.convert("RGB")
    px = [rgb.getpixel((x, y)) for x in range(0, img.width, 37) for y in range(0, img.height, 41)]
    assert all(r == g == b for r, g, b in px), "the new image is black and white"


async def test_voice_message_transcribed_and_spoken_answer_uploaded(h: Harness):
    """A recording attached to a direct message: the plan uses it (speech recognition, then text to
    speech) and the generated speech arrives in the thread as a WAV file that decodes."""
    ogg = (MEDIA / "speech_cat_request.ogg").read_bytes()
    f = h.slack.add_file(ogg, "speech_cat_request.ogg", "audio/ogg")
    body, ts = h.user_message("transcribe this recording and read it aloud", channel="D0DM", channel_type="im", files=[f])
    await h.deliver(body)
    await h.settle()
    status = next(m for m in h.replies(ts, channel="D0DM") if m.edits)
    assert "`automatic-speech-recognition`" in status.text and "`text-to-speech`" in status.text
    (audio,) = h.slack.thread_files("D0DM", ts)
    assert audio.name.endswith(".wav")
    with wave.open(io.BytesIO(audio.data)) as w:
        assert w.getnframes() > 0 and w.getframerate() > 0
        assert w.getnframes() / w.getframerate() > 0.1  # seconds of speech
    assert any(m == "download" for m, _ in h.slack.calls)  # the recording was fetched with the token


async def test_mention_inside_existing_thread_answers_in_that_thread(h: Harness):
    parent = h.slack.add_user_message(CHANNEL, "here is the team photo", user="U2",
                                      files=[png_file(h.slack, "astronaut.png")])
    body, _, ts = h.mention("draw a picture of a rocket on the moon", thread_ts=parent.ts)
    await h.deliver(body)
    await h.settle()
    replies = h.replies(parent.ts)
    assert len(replies) == 1 and all(m.thread_ts == parent.ts for m in replies)
    assert h.replies(ts) == []  # not a new thread under the mention itself
    assert len(h.slack.thread_files(CHANNEL, parent.ts)) == 1


async def test_slack_rate_limit_on_posting_is_waited_out(slack, service, tmp_path):
    """Slack answers 429 ratelimited to chat.postMessage once: the answer still arrives, once."""
    h = await start_harness(slack, service, tmp_path, streaming=False)
    try:
        await _rate_limited(h)
    finally:
        await h.close()


async def _rate_limited(h: Harness) -> None:
    h.slack.ratelimit_once.add("chat.postMessage")
    body, _, ts = h.mention("draw a picture of a red fox")
    await h.deliver(body)
    await h.settle()
    replies = h.replies(ts)
    assert len(replies) == 2 and len(h.slack.thread_files(CHANNEL, ts)) == 1
    assert [m for m, _ in h.slack.calls].count("chat.postMessage") == 3  # 429, status, answer


async def test_thread_chatter_ignored_when_bot_not_in_thread(h: Harness):
    parent = h.slack.add_user_message(CHANNEL, "lunch?", user="U2")
    body, _ = h.user_message("sure, 12:30", thread_ts=parent.ts)
    await h.deliver(body)
    await h.settle()
    assert h.replies(parent.ts) == []
    # the bot asked conversations.replies rather than guessing
    assert any(m == "conversations.replies" for m, _ in h.slack.calls)


async def test_own_messages_and_edits_ignored(h: Harness):
    own = h.slack.event_body({"type": "message", "channel_type": "channel", "user": h.slack.bot_user_id,
                              "bot_id": h.slack.bot_id, "text": f"<@{h.slack.bot_user_id}> hi", "ts": h.slack.new_ts(),
                              "channel": CHANNEL})
    edit = h.slack.event_body({"type": "message", "subtype": "message_changed", "channel": CHANNEL, "channel_type": "channel",
                               "ts": h.slack.new_ts(), "message": {"user": "U1", "text": f"<@{h.slack.bot_user_id}> hi"}})
    for b in (own, edit):
        assert (await h.deliver(b))[0] == 200
    await h.settle()
    assert h.slack.bot_messages() == []


async def test_bad_signature_rejected_and_not_processed(h: Harness):
    body, _, ts = h.mention("draw a cat")
    status, _ = await h.deliver(body, secret="wrong-secret")
    assert status == 401
    await asyncio.sleep(0.1)
    await h.settle()
    assert h.replies(ts) == [] and h.bot.stats.events == 0


async def test_html_login_page_instead_of_file(h: Harness):
    body, _, ts = h.mention("describe this image", files=[png_file(h.slack, serve_login_page=True)])
    await h.deliver(body)
    await h.settle()
    (status,) = h.replies(ts)
    assert "sign-in page instead of the file" in status.text and "`files:read`" in status.text


async def test_file_too_large(slack, service, tmp_path):
    h = await start_harness(slack, service, tmp_path)
    try:
        big = slack.add_file(b"\x00" * 10, "huge.png", "image/png")
        big["size"] = 200 * 1024 * 1024
        body, _, ts = h.mention("describe this", files=[big])
        await h.deliver(body)
        await h.settle()
        (status,) = h.replies(ts)
        assert "too large" in status.text and "200.0 MB" in status.text
        assert not any(m == "download" for m, _ in slack.calls)
    finally:
        await h.close()


async def test_unsupported_file(h: Harness):
    f = h.slack.add_file(b"PK\x03\x04 not really a document", "notes.docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document")
    body, _, ts = h.mention("summarize this", files=[f])
    await h.deliver(body)
    await h.settle()
    (status,) = h.replies(ts)
    assert status.text.startswith(":warning:") and "notes.docx" in status.text


async def test_missing_files_write_scope_named(h: Harness):
    h.slack.scopes.discard("files:write")
    body, _, ts = h.mention("draw a picture of a lighthouse at night")
    await h.deliver(body)
    await h.settle()
    texts = [m.text for m in h.replies(ts)]
    assert any("`files:write`" in t and "reinstall" in t for t in texts), texts


async def test_not_allowed_channel_and_rate_limit(slack, service, tmp_path):
    h = await start_harness(slack, service, tmp_path, allowed_channels=["C0ALLOWED"], rate_limit_per_minute=1)
    try:
        body, _, ts = h.mention("draw a cat", channel="C0OTHER")
        await h.deliver(body)
        await h.settle()
        (reply,) = h.replies(ts, channel="C0OTHER")
        assert "not enabled in this channel" in reply.text
        first, _, ts1 = h.mention("draw a cat", channel="C0ALLOWED")
        second, _, ts2 = h.mention("draw a dog", channel="C0ALLOWED")
        await h.deliver(first)
        await h.deliver(second)
        await h.settle()
        assert any("faster than 1 per minute" in m.text for m in h.replies(ts2, channel="C0ALLOWED"))
        assert h.slack.thread_files("C0ALLOWED", ts1)
        # a user who is not allowed chatting in the bot's thread gets no refusal per reply
        h.bot.slack.allowed_users.append("U1")
        before = len(h.replies(ts1, channel="C0ALLOWED"))
        chat, _ = h.user_message("nice picture!", thread_ts=ts1, channel="C0ALLOWED", user="U9")
        await h.deliver(chat)
        await h.settle()
        assert len(h.replies(ts1, channel="C0ALLOWED")) == before
    finally:
        await h.close()


async def test_direct_message(h: Harness):
    body, ts = h.user_message("draw a picture of a sailing boat", channel="D0DM", channel_type="im")
    await h.deliver(body)
    await h.settle()
    replies = h.replies(ts, channel="D0DM")
    assert len(replies) == 1 and replies[0].tasks  # a DM stream needs no recipient
    assert h.slack.thread_files("D0DM", ts)


async def test_long_answer_split_into_thread_messages(h: Harness):
    """The sandbox controller writes short answers, so the answer delivery path gets a long
    Markdown answer (real request texts and a code block) directly."""
    from pipeline.types import RunRecord

    reqs = [json.loads(line)["user_request"]
            for line in (Path(__file__).parent / "fixtures" / "taskbench" / "data_multimedia_requests.jsonl").read_text().splitlines()[:60]]
    code = "```python\n" + "\n".join(f"print({i!r})  # step {i}" for i in range(150)) + "\n```"
    md = "# Requests\n\n" + "\n".join(f"- **{i}**: {r}" for i, r in enumerate(reqs)) + "\n\n" + code
    _, _, ts = h.mention("list the requests")
    await h.bot.deliver(CHANNEL, ts, RunRecord("list the requests", response=md), md)
    answers = h.replies(ts)
    assert len(answers) >= 3
    for m in answers:
        assert len(m.text.encode()) <= 3500 and m.text.count("```") % 2 == 0
    shown = "\n".join(m.text for m in answers)
    assert "*Requests*" in shown and re.search(r"•\s+\*0\*:", shown)  # mrkdwn, not Markdown
    for r in reqs:  # every request survives, words unbroken
        assert " ".join(r.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").split()) in " ".join(shown.split())
    assert all(f"print({i!r})  # step {i}" in shown for i in range(150))


async def test_backend_down_sentence(slack, tmp_path):
    async with make_service(tmp_path, controller_down=True) as svc:
        h = await start_harness(slack, svc, tmp_path)
        try:
            body, _, ts = h.mention("draw a cat")
            await h.deliver(body)
            await h.settle()
            (reply,) = h.replies(ts)
            assert "⚠️" in reply.text and not reply.streaming
            assert "controller" in reply.text.lower()  # the service names the backend that is down
        finally:
            await h.close()


async def test_socket_mode_delivery_and_redelivery(slack, service, tmp_path):
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

    settings = bot_settings(service, bot_token=slack.bot_token, app_token=slack.app_token)
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    front = create_bolt_app(settings, service, client, update_interval=0.05)
    handler = AsyncSocketModeHandler(front.app, app_token=slack.app_token)
    await handler.connect_async()
    try:
        h = Harness.__new__(Harness)
        h.slack = slack
        body, message, ts = Harness.mention(h, "draw a picture of a red fox")
        e1 = await slack.socket_send(body)
        e2 = await slack.socket_send(body, retry_attempt=1)  # redelivery
        e3 = await slack.socket_send(message)
        await slack.wait_for(lambda: all(e in slack.acks for e in (e1, e2, e3)))
        assert max(slack.acks[e] for e in (e1, e2, e3)) < 1.0
        bot = front.bot
        while bot.tasks:
            await asyncio.wait(set(bot.tasks), timeout=20)
        replies = [m for m in slack.thread(CHANNEL, ts) if m.user == slack.bot_user_id]
        assert len([m for m in replies if m.edits]) == 1
        assert len(slack.thread_files(CHANNEL, ts)) == 1
    finally:
        await front.bot.close(timeout=5)
        await handler.close_async()


async def test_graceful_shutdown_marks_unfinished_runs(slack, tmp_path):
    async with make_service(tmp_path, latency={"text-to-image": 5.0}) as svc:
        h = await start_harness(slack, svc, tmp_path)
        body, _, ts = h.mention("draw a cat")
        await h.deliver(body)
        await slack.wait_for(lambda: h.replies(ts))
        await h.bot.close(timeout=0.2)
        await h.session.close()
        await h.runner.cleanup()
        (status,) = h.replies(ts)
        assert status.text.endswith(f":warning: {RESTARTED}")  # the sentence every front end says


class CountingService:
    """The real service, counting the calls a front end makes into it (methods only)."""

    def __init__(self, service) -> None:
        self._service = service
        self.calls: list[str] = []

    def __getattr__(self, name: str):
        value = getattr(self._service, name)
        if not callable(value) or name.startswith("_"):
            return value

        def counted(*args, **kw):
            self.calls.append(name)
            return value(*args, **kw)
        return counted


async def test_a_mention_with_a_file_is_one_call_into_the_service(slack, service, tmp_path):
    counting = CountingService(service)
    h = await start_harness(slack, counting, tmp_path)
    try:
        body, _, ts = h.mention("describe this image", files=[png_file(h.slack)])
        await h.deliver(body)
        await h.settle()
        assert h.slack.thread_files(CHANNEL, ts) or any("How I did it" in m.text for m in h.replies(ts))
        assert counting.calls == ["handle"]  # claim, admission, download, checks and the turn: one front door
    finally:
        await h.close()
