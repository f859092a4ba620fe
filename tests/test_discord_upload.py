"""The upload form of ``/ask`` and the ``file_types`` filter, end to end: the real discord.py
client against the stand-in Discord (which checks modals and command payloads as Discord does),
the real service on the sandbox backends. Assertions are about what a user sees: the form, the
run in its thread with the files it used, the private sentences for refused files and stale forms.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from adapters.discord.upload import MAX_FORM_FILES
from tests.test_discord_bot import EPHEMERAL, Env, running_bot

SERVED_TYPES = ["image", "audio", "video", ".txt", ".md", ".markdown", ".csv", ".tsv", ".json"]
"""What the sandbox's served tasks read: every media kind, and text files by extension."""
EXPIRED = "This form has expired; use /ask again to open a new one."


def file_upload(modal: dict) -> dict:
    """The File Upload component of a modal (inside its label)."""
    return next(c["component"] for c in modal["components"] if c["component"]["type"] == 19)


async def open_form(env: Env) -> int:
    """``/ask`` without a prompt or files; the interaction id, once the form is shown."""
    iid = await env.ask(None)  # type: ignore[arg-type]
    await env.d.wait_for(lambda: iid in env.d.modals, 5)
    return iid


async def private_sentence(env: Env, iid: int) -> str:
    return await env.d.wait_for(lambda: env.ephemeral_reply(iid), 10)


async def test_the_attachment_options_carry_the_served_file_types(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as env:
        (ask,) = [c for c in env.d.commands if c["name"] == "ask"]
        options = {o["name"]: o for o in ask["options"]}
        assert [options[f"file{i}"]["file_types"] for i in (1, 2, 3)] == [SERVED_TYPES] * 3
        assert "file_types" not in options["prompt"] and not options["prompt"].get("required")


async def test_ask_without_a_prompt_opens_the_form_and_its_two_files_are_used(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as env:
        d = env.d
        iid = await open_form(env)
        assert d.callbacks[iid]["type"] == 9 and iid not in d.deferrals  # a modal, within the 3 s
        upload = file_upload(d.modals[iid])
        assert upload["max_values"] == 5 and upload["min_values"] == 0  # [storage] max_files (default 5)
        assert upload["file_types"] == SERVED_TYPES
        sub = await d.submit_form(iid, "Detect the objects in these photos", files=["chelsea.png", "coffee.png"])
        thread_id = await env.thread_of(sub)
        msgs = await env.finished(thread_id)
        final = msgs[0].history[-1]
        assert final.count("object-detection") >= 2 and "🏁 Finished" in final  # one task per photo
        shown = [f for m in msgs for f, _ in m.gallery()]
        assert len(shown) == 2  # both annotated photos came back
        pointer = d.interaction_messages(sub)[0].content
        assert pointer.startswith("**alice** asked: Detect the objects in these photos (chelsea.png, coffee.png)")
        assert pointer.endswith(f"✅ Done — see <#{thread_id}>.")
        assert len(env.bot.forms) == 0 and env.ephemeral_reply(sub) is None  # submitted: no longer held, not "expired"


async def test_too_many_files_or_a_wrong_type_in_the_form_is_one_private_sentence(tmp_path: Path) -> None:
    async with running_bot(tmp_path, storage={"max_files": 20}) as env:
        d = env.d
        iid = await open_form(env)
        assert file_upload(d.modals[iid])["max_values"] == MAX_FORM_FILES  # Discord's cap, below max_files
        many = await d.submit_form(iid, "Describe these photos", files=["chelsea.png"] * (MAX_FORM_FILES + 1))
        assert await private_sentence(env, many) == f"Please attach at most {MAX_FORM_FILES} files at a time."
        slides = d.attachment("LICENSES.md", content_type="application/pdf")
        slides["filename"] = "slides.pdf"
        pdf = await d.submit_form(await open_form(env), "Describe this", attachments=[slides])
        assert await private_sentence(env, pdf) == ("slides.pdf is application/pdf; I can only work with images, "
                                                     "audio, video and text files (.txt, .md, .csv, .json).")
        await asyncio.sleep(0.2)
        assert d.threads() == [] and not [c for c in d.calls if "/attachments/" in c.path]  # nothing downloaded


async def test_a_form_the_bot_no_longer_holds_is_answered_privately(tmp_path: Path) -> None:
    """One form per user (a new one replaces the earlier), each open for ``forms.timeout``
    seconds: a late submission, or a forged form id, gets one private sentence, no run."""
    async with running_bot(tmp_path) as env:
        d = env.d
        first = await open_form(env)
        second = await open_form(env)
        assert len(env.bot.forms) == 1
        late = await d.submit_form(first, "Generate an image of a cat")
        assert await private_sentence(env, late) == EXPIRED
        forged = await d.submit_form(second, "Generate an image of a cat", custom_id="hgpt-ask-form:forged")
        assert await private_sentence(env, forged) == EXPIRED
        env.bot.forms.timeout = 0.2
        third = await open_form(env)
        await asyncio.sleep(0.6)
        assert len(env.bot.forms) == 0  # timed out: forgotten
        timed_out = await d.submit_form(third, "Generate an image of a cat")
        assert await private_sentence(env, timed_out) == EXPIRED
        assert d.threads() == [] and env.bot.runs_in_flight == 0
        assert first not in d.deferrals and EPHEMERAL & int(d.callbacks[late]["data"]["flags"])
