"""The Discord front end end to end: the real discord.py client against the stand-in Discord
(REST + gateway + CDN on 127.0.0.1, ``sandbox/discord_server.py``), the real Service on
the sandbox backends (``sandbox.Sandbox``).

Assertions are about what a user sees: the "thinking" deferral and how fast it came, the thread
and its name, the status message's successive texts, the uploaded files (decoded), the answer,
and the private (ephemeral, flag 64) sentences for refusals.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from adapters.discord.bot_client import HuggingGPTBot
from adapters.turn import RESTARTED
from adapters.discord.render import thread_name
from bot.settings import Settings, load_settings
from sandbox import Sandbox
from bot.service import Service
from sandbox.discord_messages import ATTACH_FILES, BOT_PERMISSIONS, IS_COMPONENTS_V2, StoredMessage
from sandbox.discord_server import StandinDiscord

os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

MEDIA = Path(__file__).parent / "fixtures" / "media"
EPHEMERAL = 64
DEFERRED_CHANNEL_MESSAGE = 5
CHANNEL_MESSAGE = 4


@dataclass
class Env:
    d: StandinDiscord
    bot: HuggingGPTBot
    service: Service
    settings: Settings
    sandbox: Sandbox

    async def ask(self, prompt: str, **kw: Any) -> int:
        """Send ``/ask``; return the interaction id."""
        return int((await self.d.interact(prompt, **kw))["id"])

    async def thread_of(self, iid: int, timeout: float = 10) -> int:
        """The thread started from the interaction's response message (Discord gives it the message's id)."""
        def find() -> int | None:
            for m in self.d.interaction_messages(iid):
                if "thread" in m.payload:
                    return int(m.payload["thread"]["id"])
            return None
        return await self.d.wait_for(find, timeout)

    async def finished(self, channel_id: int, runs: int = 1, timeout: float = 20) -> list[StoredMessage]:
        """Wait until ``runs`` status messages in the channel show a final state; return the bot's messages."""
        def done() -> list[StoredMessage] | None:
            msgs = self.d.bot_messages(channel_id)
            finals = [m for m in msgs if m.text.startswith("🧭")]
            ended = [m for m in finals if "🏁 Finished" in m.text or "⚠️" in m.text or "⏹️ Stopped" in m.text]
            return msgs if len(ended) >= runs and self.bot.runs_in_flight == 0 else None
        return await self.d.wait_for(done, timeout)

    def ephemeral_reply(self, iid: int) -> str | None:
        """The private sentence the user got for an interaction: an ephemeral response or follow-up."""
        for m in self.d.interaction_messages(iid):
            if m.flags & EPHEMERAL and not m.deleted and m.content:
                return m.content
        return None


@contextlib.asynccontextmanager
async def running_bot(tmp_path: Path, *, discord: dict[str, Any] | None = None, storage: dict[str, Any] | None = None,
                      latency: dict[str, float] | None = None, **bot_kw: Any) -> AsyncIterator[Env]:
    async with Sandbox(latency=latency) as sb, StandinDiscord(MEDIA) as d:
        old = d.patch_client_urls()
        overrides = sb.overrides(tmp_path / "data")
        overrides["storage"].update(storage or {})
        overrides["discord"] = {"token": d.token, **(discord or {})}
        settings = load_settings(env={}, overrides=overrides)
        service = await Service.create(settings)
        bot = HuggingGPTBot(service, settings, guild_ready_timeout=0.05, **bot_kw)
        runner: asyncio.Task[None] | None = None
        try:
            await bot.login(d.token)
            runner = asyncio.create_task(bot.connect(reconnect=True))
            await asyncio.wait_for(bot.wait_until_ready(), 10)
            yield Env(d, bot, service, settings, sb)
        finally:
            await bot.close()
            if runner is not None:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.wait_for(runner, 5)
            await service.close()
            d.restore_client_urls(old)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with running_bot(tmp_path) as e:
        yield e


def _image(m: StoredMessage) -> Image.Image:
    assert m.files, f"no file in message {m.content!r}"
    im = Image.open(io.BytesIO(m.files[0].data))
    im.load()
    return im


def _is_grayscale(im: Image.Image) -> bool:
    rgb = im.convert("RGB")
    px = rgb.resize((64, 64)).getdata()
    return all(abs(r - g) <= 3 and abs(g - b) <= 3 for r, g, b in px)


# ------------------------------------------------------------------------------------------------
# the main path


async def test_ask_defers_opens_thread_shows_progress_uploads_image_and_answers(env: Env) -> None:
    d = env.d
    prompt = "Detect the objects in this photo and draw boxes around them"
    iid = await env.ask(prompt, files=["chelsea.png"])
    await d.wait_for(lambda: iid in d.deferrals, 5)
    # acknowledged as "thinking" well within Discord's 3 seconds
    assert d.callbacks[iid]["type"] == DEFERRED_CHANNEL_MESSAGE
    assert not (d.callbacks[iid].get("data") or {}).get("flags", 0) & EPHEMERAL
    assert d.deferrals[iid] - d.injected[iid] < 3.0

    thread_id = await env.thread_of(iid)
    thread = d.channels[thread_id]
    assert thread["name"] == thread_name(prompt) == prompt
    assert thread["parent_id"] == str(d.channel_id) and thread["owner_id"] == str(d.bot_id)
    msgs = await env.finished(thread_id)

    status = msgs[0]
    assert status.flags & IS_COMPONENTS_V2 and not status.content  # a Components V2 message
    history = status.history
    assert history[0].startswith("🧭 Planning the tasks")
    assert any("**#" in h and "object-detection" in h for h in history)
    final = history[-1]
    assert "✅" in final and "object-detection" in final and "🏁 Finished" in final
    assert "`" in final  # the model id is shown
    # edits throttled: at most about one per second
    gaps = [b - a for a, b in zip(status.edit_times, status.edit_times[1:])]
    assert all(g >= 0.9 for g in gaps), gaps

    assert status.buttons() == []  # the Stop button went away with the run
    files = [m for m in msgs if m.files]
    assert len(files) == 1
    [(shown, alt)] = files[0].gallery()  # the image is in a media gallery, with alt text from its task
    assert alt.startswith("object-detection output of task ")
    im = _image(files[0])
    assert shown.data == files[0].files[0].data
    with Image.open(MEDIA / "chelsea.png") as orig:
        assert im.size == orig.size  # the annotated photo, not a thumbnail
    answer = msgs[-1]
    assert answer.id > files[0].id and not answer.files
    assert "object-detection" in answer.content and len(answer.content) <= 2000

    # the channel shows who asked, and where the answer is
    original = d.interaction_messages(iid)[0]
    assert original.content.startswith(f"**alice** asked: {prompt} (chelsea.png)")
    assert original.content.endswith(f"✅ Done — see <#{thread_id}>.")
    # nothing else was posted in the channel itself
    assert [m.id for m in d.bot_messages(d.channel_id)] == [original.id]


async def test_followup_in_thread_uses_the_earlier_image(env: Env) -> None:
    d = env.d
    iid = await env.ask("Generate an image of an astronaut riding a horse on the moon")
    thread_id = await env.thread_of(iid)
    first = await env.finished(thread_id)
    generated = _image(next(m for m in first if m.files))
    assert not _is_grayscale(generated)

    await d.send_message("now make it black and white", channel_id=thread_id)
    msgs = await env.finished(thread_id, runs=2)
    new_files = [m for m in msgs if m.files and m.id > first[-1].id]
    assert new_files, f"no new image; answer was: {msgs[-1].content!r}"
    edited = _image(new_files[0])
    assert _is_grayscale(edited)
    assert edited.size == generated.size
    # the follow-up's status message replies to the user's message
    status = [m for m in msgs if m.id > first[-1].id][0]
    assert status.payload.get("message_reference")


async def test_followup_with_an_attachment_in_the_thread(env: Env) -> None:
    d = env.d
    iid = await env.ask("Generate an image of a red rocket")
    thread_id = await env.thread_of(iid)
    first = await env.finished(thread_id)
    await d.send_message("Make this photo black and white", channel_id=thread_id, files=["coffee.png"])
    msgs = await env.finished(thread_id, runs=2)
    new = [m for m in msgs if m.files and m.id > first[-1].id]
    assert new and _is_grayscale(_image(new[0]))
    with Image.open(MEDIA / "coffee.png") as orig:
        assert _image(new[0]).size == orig.size


async def test_ask_inside_an_existing_thread_works_there(env: Env) -> None:
    d = env.d
    thread_id = await d.create_thread_as_user("Rocket pictures")
    await asyncio.sleep(0.05)
    iid = await env.ask("Make this photo black and white", files=["rocket.jpg"], channel_id=thread_id)
    msgs = await env.finished(thread_id)
    assert len(d.threads()) == 1  # no new thread
    assert _is_grayscale(_image(next(m for m in msgs if m.files)))
    assert d.interaction_messages(iid)[0].content.startswith("**alice** asked: Make this photo black and white")
    # and a plain message in that thread continues the conversation
    await d.send_message("Detect the objects in this photo", channel_id=thread_id, files=["chelsea.png"])
    await env.finished(thread_id, runs=2)


# ------------------------------------------------------------------------------------------------
# events delivered twice, bots


async def test_replayed_interaction_and_message_are_answered_once(env: Env) -> None:
    d = env.d
    payload = d.interaction_payload("Make this photo black and white", files=["rocket.jpg"])
    await d.send_interaction(payload)
    await d.send_interaction(payload)  # replay, e.g. after a gateway RESUME
    iid = int(payload["id"])
    thread_id = await env.thread_of(iid)
    first = await env.finished(thread_id)
    callbacks = [c for c in d.calls if c.path.endswith("/callback")]
    assert len(callbacks) == 1
    assert len(d.threads()) == 1

    msg = await d.send_message("Detect the objects in this photo", channel_id=thread_id, files=["chelsea.png"])
    await d.send_message("", channel_id=thread_id, payload=msg)  # the same MESSAGE_CREATE again
    msgs = await env.finished(thread_id, runs=2)
    await asyncio.sleep(0.3)
    statuses = [m for m in d.bot_messages(thread_id) if m.payload.get("message_reference")]
    assert len(statuses) == 1
    assert len(d.bot_messages(thread_id)) == len(msgs)
    assert len(first) < len(msgs)


async def test_messages_from_bots_and_outside_conversations_are_ignored(env: Env) -> None:
    d = env.d
    iid = await env.ask("Generate an image of a red rocket")
    thread_id = await env.thread_of(iid)
    before = await env.finished(thread_id)
    await d.send_message("Make this photo black and white", channel_id=thread_id, author=d.other_bot, files=["rocket.jpg"])
    await d.send_message("Generate an image of a cat", channel_id=d.channel_id)  # plain channel, no thread
    other = await d.create_thread_as_user("chat")
    await d.send_message("Generate an image of a cat", channel_id=other)  # a thread the bot is not part of
    await asyncio.sleep(0.5)
    assert len(d.bot_messages(thread_id)) == len(before)
    assert d.bot_messages(other) == []
    assert [m for m in d.bot_messages(d.channel_id) if not m.payload.get("interaction_metadata")] == []


# ------------------------------------------------------------------------------------------------
# refusals: one clear sentence, private where Discord allows it


async def test_not_allowed_channel_or_role_is_refused_privately(tmp_path: Path) -> None:
    async with running_bot(tmp_path, discord={"allowed_channels": [], "allowed_roles": [424242]}) as env:
        iid = await env.ask("Generate an image of a cat")
        await env.d.wait_for(lambda: env.ephemeral_reply(iid))
        assert env.ephemeral_reply(iid) == "You need one of the roles allowed to use me; ask a server admin."
        assert env.d.callbacks[iid]["type"] == CHANNEL_MESSAGE
    async with running_bot(tmp_path, discord={"allowed_channels": [1]}) as env:
        iid = await env.ask("Generate an image of a cat")
        await env.d.wait_for(lambda: env.ephemeral_reply(iid))
        assert env.ephemeral_reply(iid) == "I'm not allowed to answer in this channel; please ask in one where I'm enabled."
        assert env.d.threads() == []


async def test_rate_limit_and_concurrency_are_refused_privately(tmp_path: Path) -> None:
    async with running_bot(tmp_path, discord={"rate_limit_per_minute": 1}) as env:
        first = await env.ask("Generate an image of a cat")
        second = await env.ask("Generate an image of a dog")
        await env.d.wait_for(lambda: env.ephemeral_reply(second))
        assert "faster than 1 per minute" in env.ephemeral_reply(second)
        await env.finished(await env.thread_of(first))
        assert env.ephemeral_reply(first) is None
    async with running_bot(tmp_path, discord={"max_concurrent_runs": 1}, latency={"text-to-image": 1.5}) as env:
        first = await env.ask("Generate an image of a cat")
        second = await env.ask("Generate an image of a dog")  # at the same moment
        await env.d.wait_for(lambda: env.ephemeral_reply(second))
        assert env.ephemeral_reply(second) == "You already have 1 request running; please wait for one to finish."
        await env.finished(await env.thread_of(first))
        assert len(env.d.threads()) == 1
        third = await env.ask("Generate an image of a bird")  # the slot is free again
        await env.finished(await env.thread_of(third))
        assert env.ephemeral_reply(third) is None


async def test_file_too_large_or_unsupported_is_refused_privately(tmp_path: Path) -> None:
    async with running_bot(tmp_path, storage={"max_file_bytes": 300_000}) as env:
        d = env.d
        big = await env.ask("Describe this photo", files=["astronaut.png"])
        await d.wait_for(lambda: env.ephemeral_reply(big))
        assert env.ephemeral_reply(big) == ("astronaut.png is 773 KB, over the 293 KB limit for files I read; "
                                            "please send a smaller file.")
        slides = d.attachment("LICENSES.md", content_type="application/pdf")
        slides["filename"] = "slides.pdf"  # refused by its declared name and type, before any download
        pdf = await env.ask("Describe this", attachments=[slides])
        await d.wait_for(lambda: env.ephemeral_reply(pdf))
        assert env.ephemeral_reply(pdf) == ("slides.pdf is application/pdf; I can only work with images, audio, "
                                            "video and text files (.txt, .md, .csv, .json).")
        # a file that claims to be an image: refused after the download, by the service's check
        liar = await env.ask("Describe this photo",
                             attachments=[d.attachment("LICENSES.md", content_type="image/png")])
        await d.wait_for(lambda: env.ephemeral_reply(liar))
        assert d.callbacks[liar]["type"] == DEFERRED_CHANNEL_MESSAGE
        assert "LICENSES.md" in env.ephemeral_reply(liar)
        assert all(m.deleted for m in d.interaction_messages(liar) if not m.flags & EPHEMERAL)
        assert d.threads() == []


async def test_a_file_discord_cannot_serve_is_asked_for_again(env: Env) -> None:
    """The attachment's signed URL no longer answers (404 from the CDN): the /ask is told
    privately, a follow-up by a reply to it; no run starts."""
    d = env.d
    sentence = "I could not download your file from Discord; please attach it again."

    def expired(filename: str, channel_id: int | None = None) -> dict[str, Any]:
        att = d.attachment(filename, channel_id=channel_id)
        att["url"] = att["proxy_url"] = att["url"].rsplit("/", 1)[0] + "/expired.png"
        return att

    iid = await env.ask("Describe this photo", attachments=[expired("chelsea.png")])
    await d.wait_for(lambda: env.ephemeral_reply(iid))
    assert env.ephemeral_reply(iid) == sentence
    assert d.threads() == []
    thread_id = await env.thread_of(await env.ask("Generate an image of a red rocket"))
    first = await env.finished(thread_id)
    payload = d.message_payload(thread_id, d.user, "Make this photo black and white",
                                attachments=[expired("coffee.png", thread_id)])
    await d.send_message("", channel_id=thread_id, payload=payload)
    reply = await d.wait_for(lambda: next((m for m in d.bot_messages(thread_id) if str((m.payload.get(
        "message_reference") or {}).get("message_id")) == payload["id"]), None))
    assert reply.content == sentence
    await asyncio.sleep(0.3)
    assert [m.id for m in d.bot_messages(thread_id) if m.id > first[-1].id] == [reply.id]  # no run started


async def test_missing_permissions_are_named(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as env:
        d = env.d
        d.app_permissions = BOT_PERMISSIONS & ~ATTACH_FILES
        iid = await env.ask("Generate an image of a cat")
        await d.wait_for(lambda: env.ephemeral_reply(iid))
        assert "**Attach Files** permission" in env.ephemeral_reply(iid)

        d.app_permissions = BOT_PERMISSIONS
        d.forbid_threads = True  # e.g. a channel overwrite the interaction does not reflect
        iid = await env.ask("Generate an image of a cat")
        await d.wait_for(lambda: env.ephemeral_reply(iid))
        assert env.ephemeral_reply(iid) == ("I can't do that here: I lack the **Create Public Threads** permission in "
                                            "this channel. Ask a server admin to grant it to my role.")
        assert d.threads() == []


async def test_backend_down_ends_with_the_service_sentence_in_the_thread(env: Env) -> None:
    await env.sandbox.controller.close()  # the controller LLM goes away
    iid = await env.ask("Generate an image of a cat")
    thread_id = await env.thread_of(iid)
    msgs = await env.finished(thread_id, timeout=30)
    last = msgs[-1].content
    assert last.startswith("⚠️ ") and "controller" in last.lower()
    assert "Traceback" not in last
    assert msgs[0].text.startswith("🧭 No plan was made.\n⚠️ Stopped in ")
    pointer = env.d.interaction_messages(iid)[0].content
    assert pointer.split("\n")[-1].startswith("⚠️ Failed: ") and "controller" in pointer.lower()


# ------------------------------------------------------------------------------------------------
# operations


async def test_commands_synced_once_not_on_reconnect(env: Env) -> None:
    d = env.d
    assert d.command_syncs == 1
    assert [c["name"] for c in d.commands] == ["ask", "new"]
    for c in d.commands:  # user-installable, usable in guilds, the bot's DM and group DMs
        assert sorted(c["integration_types"]) == [0, 1] and sorted(c["contexts"]) == [0, 1, 2]
    options = {o["name"]: o["type"] for o in d.commands[0]["options"]}
    assert options == {"prompt": 3, "file1": 11, "file2": 11, "file3": 11}
    await d.reconnect_gateway()
    await d.wait_for(lambda: d.resumes >= 1, 10)
    iid = await env.ask("Generate an image of a cat")  # still answered after the reconnect
    await env.finished(await env.thread_of(iid))
    assert d.command_syncs == 1 and env.bot.command_syncs == 1


async def test_command_name_is_configurable(tmp_path: Path) -> None:
    async with running_bot(tmp_path, discord={"command_name": "hgpt"}) as env:
        assert [c["name"] for c in env.d.commands] == ["hgpt", "new"]
        iid = await env.ask("Generate an image of a cat", command="hgpt")
        await env.finished(await env.thread_of(iid))


async def test_followups_can_require_a_mention(tmp_path: Path) -> None:
    async with running_bot(tmp_path, discord={"followups_need_mention": True}) as env:
        d = env.d
        iid = await env.ask("Generate an image of a cat")
        thread_id = await env.thread_of(iid)
        first = await env.finished(thread_id)
        await d.send_message("Make this photo black and white", channel_id=thread_id, files=["rocket.jpg"])
        await asyncio.sleep(0.4)
        assert len(d.bot_messages(thread_id)) == len(first)
        await d.send_message("Make this photo black and white", channel_id=thread_id, files=["rocket.jpg"],
                             mention_bot=True)
        msgs = await env.finished(thread_id, runs=2)
        assert _is_grayscale(_image([m for m in msgs if m.files][-1]))


async def test_generated_image_is_shrunk_to_the_upload_limit_and_the_user_is_told(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as env:
        d = env.d
        d.attachment_size_limit = 20_000  # the stand-in answers 413 for anything bigger
        iid = await env.ask("Make this photo black and white", files=["rocket.jpg"])
        msgs = await env.finished(await env.thread_of(iid))
        upload = next(m for m in msgs if m.files)
        assert len(upload.files[0].data) <= 20_000
        im = _image(upload)
        assert im.format == "JPEG" and _is_grayscale(im)
        assert "over the 20 KB upload limit here, so I re-encoded it as JPEG" in upload.text


async def test_shutdown_marks_runs_in_flight(tmp_path: Path) -> None:
    async with running_bot(tmp_path, latency={"text-to-image": 30}, shutdown_grace=0.3) as env:
        d = env.d
        iid = await env.ask("Generate an image of a cat")
        thread_id = await env.thread_of(iid)
        await d.wait_for(lambda: any("running" in m.text for m in d.bot_messages(thread_id)), 10)
        draining = asyncio.create_task(env.bot.drain())
        await asyncio.sleep(0.05)
        late = await env.ask("Generate an image of a dog")  # arrives while shutting down
        await d.wait_for(lambda: env.ephemeral_reply(late))
        assert env.ephemeral_reply(late) == RESTARTED
        await draining
        await env.bot.close()
        status = d.bot_messages(thread_id)[0]
        assert RESTARTED in status.text and "text-to-image" in status.text
        assert "· stopped" in status.text and "running" not in status.text
        assert env.bot.runs_in_flight == 0
        assert len(d.threads()) == 1


async def test_run_longer_than_the_interaction_token_keeps_posting_in_the_thread(tmp_path: Path) -> None:
    async with running_bot(tmp_path, latency={"text-to-image": 1.0}) as env:
        d = env.d
        d.token_ttl = 0.6  # the stand-in's tokens die early, like Discord's after 15 minutes
        env.bot.interaction_token_lifetime = timedelta(seconds=0.5)
        iid = await env.ask("Generate an image of a cat")
        thread_id = await env.thread_of(iid)
        msgs = await env.finished(thread_id)
        assert d.injected[iid] + 0.6 < msgs[-1].created  # the run outlived the token
        assert _image(next(m for m in msgs if m.files)).size[0] > 0
        assert "text-to-image" in msgs[-1].content
        # the bot never used the dead token: every webhook call was made while it was valid
        hooks = [c for c in d.calls if "/webhooks/" in c.path]
        assert hooks and all(c.t - d.injected[iid] < 0.6 for c in hooks)
        # the channel message still says how it ended: edited with the bot token, not the dead one
        pointer = d.interaction_messages(iid)[0]
        await d.wait_for(lambda: "✅ Done" in pointer.content, 5)
        assert pointer.content.endswith(f"✅ Done — see <#{thread_id}>.")
        assert any(c.method == "PATCH" and c.path.endswith(f"/channels/{d.channel_id}/messages/{pointer.id}")
                   for c in d.calls)


async def test_discord_command_reports_setup_errors_in_one_sentence(tmp_path: Path) -> None:
    import argparse

    from hugginggpt import discord as discord_cmd
    from bot.errors import ConfigError

    parser = argparse.ArgumentParser()
    discord_cmd.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["discord", "--grace", "1"])
    assert args.grace == 1.0 and args.sandbox is False
    async with Sandbox() as sb, StandinDiscord(MEDIA) as d:
        old = d.patch_client_urls()
        try:
            overrides = sb.overrides(tmp_path / "data")
            with pytest.raises(ConfigError, match="No Discord bot token"):
                await discord_cmd.main(args, load_settings(env={}, overrides=overrides))
            overrides["discord"] = {"token": "not-the-token"}
            with pytest.raises(ConfigError, match="Discord refused the bot token"):
                await discord_cmd.main(args, load_settings(env={}, overrides=overrides))
            overrides["discord"] = {"token": d.token}
            d.refuse_intents = True
            with pytest.raises(ConfigError, match="Message Content Intent"):
                await asyncio.wait_for(discord_cmd.main(args, load_settings(env={}, overrides=overrides)), 20)
        finally:
            d.restore_client_urls(old)


async def test_followups_with_audio_and_video_and_the_rate_limit_reply(tmp_path: Path) -> None:
    async with running_bot(tmp_path, discord={"rate_limit_per_minute": 3}) as env:
        d = env.d
        iid = await env.ask("Generate an image of a red rocket")
        thread_id = await env.thread_of(iid)
        await env.finished(thread_id)
        await d.send_message("Transcribe this recording", channel_id=thread_id, files=["speech_weather.mp3"])
        msgs = await env.finished(thread_id, runs=2)
        assert "automatic-speech-recognition" in msgs[-1].content and "transcript" in msgs[-1].content
        assert "automatic-speech-recognition" in [m for m in msgs if m.text.startswith("🧭")][-1].text
        await d.send_message("What is happening in this video?", channel_id=thread_id, files=["rocket_zoom.mp4"])
        msgs = await env.finished(thread_id, runs=3)
        assert msgs[-1].content and not msgs[-1].content.startswith("⚠️")
        # the fourth request within a minute: one sentence, as a reply to that message
        user_msg = await d.send_message("Transcribe this recording", channel_id=thread_id, files=["speech_weather.wav"])
        reply = await d.wait_for(lambda: next((m for m in d.bot_messages(thread_id) if str((m.payload.get(
            "message_reference") or {}).get("message_id")) == user_msg["id"]), None))
        assert reply.content == ("You're sending requests faster than 3 per minute; please wait a little and "
                                 "try again.")


# ------------------------------------------------------------------------------------------------
# no pings, refusals said once (issue 14)


def _pinged_users(call_body: dict[str, Any], content: str) -> set[str]:
    """Who Discord would notify for a message body (Discord API, "Allowed Mentions Object"): with no
    ``allowed_mentions``, every ``<@id>`` in the content; else only what ``parse``/``users`` allow."""
    import re as _re

    mentioned = set(_re.findall(r"<@!?(\d+)>", content))
    am = call_body.get("allowed_mentions")
    if am is None:
        return mentioned
    if "users" in (am.get("parse") or []):
        return mentioned
    return mentioned & {str(u) for u in am.get("users") or []}


async def test_nobody_is_pinged_by_anything_the_bot_writes(env: Env) -> None:
    d = env.d
    victim = d.snowflake()
    prompt = f"Generate an image of a cat and say hi to <@{victim}> and <@&{d.role_id}> and @everyone"
    iid = await env.ask(prompt)
    thread_id = await env.thread_of(iid)
    await env.finished(thread_id)
    await d.send_message(f"now make it black and white for <@{victim}>", channel_id=thread_id)
    await env.finished(thread_id, runs=2)
    writes = [c for c in d.calls if c.method in ("POST", "PATCH") and isinstance(c.json, dict)
              and ("content" in c.json or "data" in c.json)]
    assert writes
    shown = [m.content for m in d.bot_messages(thread_id)] + [m.content for m in d.interaction_messages(iid)]
    assert any(f"<@{victim}>" in text for text in shown)  # the mention is shown as text ...
    for c in writes:
        body = c.json.get("data") if "data" in c.json and isinstance(c.json.get("data"), dict) else c.json
        content = body.get("content") or ""
        assert _pinged_users(body, content) == set(), (c.path, body.get("allowed_mentions"))  # ... and pings no one
        am = body.get("allowed_mentions")
        if "<@" in content or "@everyone" in content:
            assert am is not None and not (am.get("parse") or []) and not am.get("roles"), (c.path, am)


async def test_refused_member_in_a_thread_is_told_once(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as env:
        d = env.d
        env.settings.discord.allowed_roles[:] = [d.role_id]  # known once the stand-in runs: the asker has it, mallory not
        iid = await env.ask("Generate an image of a cat")
        thread_id = await env.thread_of(iid)
        first = await env.finished(thread_id)
        other = {**d.user, "id": str(d.snowflake()), "username": "mallory", "global_name": "Mallory"}
        for text in ("make it blue", "make it green", "make it red"):
            await d.send_message(text, channel_id=thread_id, author=other)
        await asyncio.sleep(1.0)
        later = [m for m in d.bot_messages(thread_id) if m.id > first[-1].id]
        assert [m.content for m in later] == ["You need one of the roles allowed to use me; ask a server admin."]
