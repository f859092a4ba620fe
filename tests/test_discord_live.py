"""Issue 10 on Discord, end to end: the progress as a Components V2 message, the Stop button, the
media gallery, DMs that remember, and the channel message that says how the run ended.

The real discord.py client against the stand-in Discord (which refuses component payloads
outside Discord's documented limits with 400, like Discord), the real Service on the sandbox
backends. Assertions are about what a user sees: the texts of the component message's edits, its
buttons, the gallery's images decoded with PIL, ephemeral sentences, the channel message.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import time
from pathlib import Path

import aiohttp
from PIL import Image

from adapters.turn import STARTED_OVER
from adapters.discord.stop import ENDED_SENTENCE, NOT_YOURS_SENTENCE
from sandbox.discord_messages import BOT_PERMISSIONS, IS_COMPONENTS_V2, StoredMessage
from tests.test_discord_bot import Env, _is_grayscale, env, running_bot  # noqa: F401 - env is a fixture

MANAGE_MESSAGES = 1 << 13
STATE_ORDER = ["waiting", "running", "done"]


def _plan(*tasks: tuple[str, dict]) -> dict:
    """A scripted plan for the sandbox controller: tasks 0..n-1, no dependencies."""
    return {"content": json.dumps({"tasks": [{"task": t, "id": i, "dep": [-1], "args": a}
                                             for i, (t, a) in enumerate(tasks)]})}


def _states(history: list[str], task: str) -> list[str]:
    """The successive states of the task line naming ``task`` across the message's versions."""
    out: list[str] = []
    for text in history:
        for line in text.splitlines():
            m = re.search(rf"\*\*#\d+ {re.escape(task)}\*\*.* · (waiting|running|done|failed|skipped|stopped)", line)
            if m and (not out or out[-1] != m.group(1)):
                out.append(m.group(1))
    return out


async def _status(env: Env, channel_id: int) -> StoredMessage:
    """The run's progress message in a thread or DM (the first components message with the plan)."""
    return await env.d.wait_for(lambda: next((m for m in env.d.bot_messages(channel_id)
                                               if m.flags & IS_COMPONENTS_V2 and m.text.startswith("🧭")), None))


def _stop_id(msg: StoredMessage) -> str:
    [button] = msg.buttons()
    assert button["label"] == "Stop"
    return button["custom_id"]


async def test_component_message_shows_task_states_in_order_and_throttles_edits(tmp_path: Path) -> None:
    async with running_bot(tmp_path, latency={"image-classification": 1.2, "image-to-text": 2.4}) as env:
        env.sandbox.controller.script.append(_plan(("image-classification", {"image": "image-1"}),
                                                   ("image-to-text", {"image": "image-1"})))
        iid = await env.ask("Classify this photo and caption it", files=["chelsea.png"])
        thread_id = await env.thread_of(iid)
        await env.finished(thread_id)
        status = await _status(env, thread_id)
        # each task went forward through its states, never back, and ended done
        for task in ("image-classification", "image-to-text"):
            states = _states(status.history, task)
            assert states[-1] == "done", states
            assert states == sorted(states, key=STATE_ORDER.index), states
            assert "running" in states, states
        # tasks listed in plan order, with their models
        final = status.history[-1]
        assert final.index("image-classification") < final.index("image-to-text")
        assert final.count("`") >= 4
        # while running, the message had a Stop button; at the end it has none
        assert status.buttons() == []
        assert any(c.method == "POST" and "Stop" in json.dumps(c.json) for c in env.d.calls
                   if c.path.endswith(f"/channels/{thread_id}/messages"))
        gaps = [b - a for a, b in zip(status.edit_times, status.edit_times[1:])]
        assert all(g >= 0.9 for g in gaps), gaps


async def test_stop_by_the_requester_ends_the_run_with_what_finished(tmp_path: Path) -> None:
    async with running_bot(tmp_path, latency={"image-classification": 0.05, "image-to-text": 30}) as env:
        d = env.d
        env.sandbox.controller.script.append(_plan(("image-classification", {"image": "image-1"}),
                                                   ("image-to-text", {"image": "image-1"})))
        iid = await env.ask("Classify this photo and caption it", files=["chelsea.png"])
        thread_id = await env.thread_of(iid)
        status = await _status(env, thread_id)
        await d.wait_for(lambda: "done" in _states(status.history, "image-classification"), 10)
        pressed = time.monotonic()
        press = await d.press(status.id, _stop_id(status))
        assert d.callbacks.get(press, {}).get("type") in (None, 7)
        msgs = await env.finished(thread_id, timeout=10)
        took = status.edit_times[-1] - pressed
        assert took < 1.0, f"stopped {took:.2f} s after the press"
        final = status.history[-1]
        assert _states([final], "image-classification") == ["done"]
        assert _states([final], "image-to-text") == ["stopped"]
        assert "⏹️ Stopped by alice" in final and status.buttons() == []
        answer = msgs[-1].content
        assert "image-classification" in answer and not answer.startswith("⚠️")
        pointer = d.interaction_messages(iid)[0]
        await d.wait_for(lambda: "Stopped" in pointer.content, 5)
        assert pointer.content.endswith(f"⏹️ Stopped — see <#{thread_id}>.")


async def test_only_the_requester_or_a_message_manager_may_stop(tmp_path: Path) -> None:
    async with running_bot(tmp_path, latency={"text-to-image": 30}) as env:
        d = env.d
        iid = await env.ask("Generate an image of a cat")
        thread_id = await env.thread_of(iid)
        status = await _status(env, thread_id)
        await d.wait_for(lambda: "running" in status.text, 10)
        custom_id = _stop_id(status)
        nosy = await d.press(status.id, custom_id, user=d.user2, permissions=BOT_PERMISSIONS)
        await d.wait_for(lambda: env.ephemeral_reply(nosy), 5)
        assert env.ephemeral_reply(nosy) == NOT_YOURS_SENTENCE
        await asyncio.sleep(0.3)
        assert env.bot.runs_in_flight == 1 and "running" in status.text and status.buttons()
        moderator = await d.press(status.id, custom_id, user=d.user2, permissions=BOT_PERMISSIONS | MANAGE_MESSAGES)
        await env.finished(thread_id, timeout=10)
        assert env.ephemeral_reply(moderator) is None
        assert "⏹️ Stopped by bob" in status.text and _states([status.text], "text-to-image") == ["stopped"]


async def test_a_stop_button_from_before_a_restart_says_the_run_ended(env: Env) -> None:
    d = env.d
    iid = await env.ask("Generate an image of a cat")
    thread_id = await env.thread_of(iid)
    await env.finished(thread_id)
    # a progress message left by a process that died mid-run: its button names a run this one never had
    old = d.bot_message(thread_id, [
        {"type": 17, "components": [{"type": 10, "content": "⚙️ **#0 text-to-image** · running"}]},
        {"type": 1, "components": [{"type": 2, "style": 4, "label": "Stop", "custom_id": "hgpt:stop:0123456789abcdef"}]},
    ])
    press = await d.press(old, "hgpt:stop:0123456789abcdef")
    await d.wait_for(lambda: env.ephemeral_reply(press), 5)
    assert env.ephemeral_reply(press) == ENDED_SENTENCE


async def test_generated_images_are_a_gallery_that_decodes(env: Env) -> None:
    iid = await env.ask("Generate an image of an astronaut riding a horse on the moon")
    thread_id = await env.thread_of(iid)
    msgs = await env.finished(thread_id)
    media = next(m for m in msgs if m.files)
    assert media.flags & IS_COMPONENTS_V2 and not media.content
    [(upload, alt)] = media.gallery()
    assert re.fullmatch(r"text-to-image output of task \d+", alt)
    im = Image.open(io.BytesIO(upload.data))
    im.load()
    assert im.size[0] >= 64 and not _is_grayscale(im)


async def test_dms_remember_and_new_starts_over(env: Env) -> None:
    d = env.d
    dm = d.dm_channel()
    first_iid = await env.ask("Generate an image of a red rocket", channel_id=dm)  # /ask in the bot's DM
    first = await env.finished(dm)
    assert d.threads() == []  # no thread in a DM: the run is right there
    picture = Image.open(io.BytesIO(next(m for m in first if m.files).files[0].data))
    assert not _is_grayscale(picture)
    pointer = d.interaction_messages(first_iid)[0]
    await d.wait_for(lambda: "✅ Done" in pointer.content, 5)
    assert pointer.content.endswith("✅ Done — see below.")

    await d.send_message("now make it black and white", channel_id=dm)  # a plain DM continues
    msgs = await env.finished(dm, runs=2)
    new = [m for m in msgs if m.files and m.id > first[-1].id]
    assert new, f"no new image; answer was: {msgs[-1].content!r}"
    edited = Image.open(io.BytesIO(new[0].files[0].data))
    assert _is_grayscale(edited) and edited.size == picture.size

    before = len(d.bot_messages(dm))
    await d.send_message("new", channel_id=dm)
    reply = await d.wait_for(lambda: d.bot_messages(dm)[before:])
    assert reply[0].content == STARTED_OVER
    await d.send_message("now make it black and white", channel_id=dm)
    msgs = await env.finished(dm, runs=3)
    assert not [m for m in msgs if m.files and m.id > reply[0].id]  # nothing earlier to edit now


async def test_the_standin_refuses_component_payloads_outside_discords_limits(env: Env) -> None:
    d = env.d
    url = f"{d.api_base}/channels/{d.channel_id}/messages"
    headers = {"Authorization": f"Bot {d.token}"}

    def text(n: int) -> dict:
        return {"type": 10, "content": "x" * n}

    cases = {
        "too many components": {"flags": IS_COMPONENTS_V2, "components": [{"type": 17, "components": [text(5)] * 40}]},
        "text displays over 4,000": {"flags": IS_COMPONENTS_V2, "components": [text(2500), text(1501)]},
        "content with the flag": {"flags": IS_COMPONENTS_V2, "content": "hi", "components": [text(3)]},
        "layout without the flag": {"components": [text(3)]},
        "empty gallery": {"flags": IS_COMPONENTS_V2, "components": [{"type": 12, "items": []}]},
        "eleven gallery items": {"flags": IS_COMPONENTS_V2, "components": [{"type": 12, "items": [
            {"media": {"url": "https://example.org/a.png"}}] * 11}]},
        "unknown attachment": {"flags": IS_COMPONENTS_V2, "components": [{"type": 12, "items": [
            {"media": {"url": "attachment://missing.png"}}]}]},
    }
    async with aiohttp.ClientSession() as http:
        for name, body in cases.items():
            async with http.post(url, json=body, headers=headers) as r:
                assert r.status == 400, name
                assert (await r.json())["code"] == 50035, name
        ok = {"flags": IS_COMPONENTS_V2, "components": [{"type": 17, "components": [text(3990)]}]}
        async with http.post(url, json=ok, headers=headers) as r:
            assert r.status == 200


async def test_dms_are_refused_when_an_allow_list_is_set(tmp_path: Path) -> None:
    async with running_bot(tmp_path, discord={"allowed_channels": [1]}) as env:
        iid = await env.ask("Generate an image of a cat", channel_id=env.d.dm_channel())
        await env.d.wait_for(lambda: env.ephemeral_reply(iid))
        assert env.ephemeral_reply(iid) == "I only answer in the servers I'm enabled in here, not in direct messages."
