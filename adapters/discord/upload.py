"""The upload form of ``/ask`` and the ``file_types`` filter of its attachment options.

What a user sees: ``/ask`` with neither a prompt nor a file opens a form (a Discord modal) with a
text field for the request and a File Upload field taking up to 10 files (at most ``[storage]
max_files``), filtered to the kinds the served tasks read; submitting it runs the request like
``/ask`` with those files (:func:`adapters.discord.ask.on_ask`, one ``Service.handle`` call). The
command's attachment options carry the same filter, so Discord's file picker offers those kinds.

Discord's rules (Discord API docs, "Components > File Upload", "Application Commands >
Application Command Option Structure"): a File Upload (component type 19) sits inside a Label
(type 18) of a modal and takes 0 to 10 files; ``file_types`` lists ``"image"``, ``"video"``,
``"audio"`` or dot-prefixed extensions, up to 10, on the File Upload and on attachment options.
Discord's own client enforces the filter and the count; a modified client need not, so the bot
checks both again when the form comes back (:meth:`adapters.discord.bot_client.HuggingGPTBot.precheck`),
and the service checks the bytes.

discord.py 2.7.1 has :class:`discord.ui.FileUpload` and :class:`discord.ui.Label` but no
``file_types``, neither on the File Upload nor on command parameters: :class:`TypedFileUpload`
and :class:`AskCommand` add it through the library's public payload methods
(``Item.to_component_dict``, ``app_commands.Command.to_dict``), without patching the library.

Memory: a form lives in discord.py's view store until submitted or for :attr:`Forms.timeout`
seconds, and a user has one form at a time (a new ``/ask`` form replaces the earlier one). A
submission of a form the bot no longer holds (timed out, replaced, sent before a restart) is
answered with one private sentence (:data:`FORM_EXPIRED`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Sequence
from typing import Any

import discord
from cachetools import TTLCache
from discord import app_commands

from adapters.turn import CRASHED

from . import ask
from .delivery import tell_privately
from .policy import TEXT_EXTENSIONS

log = logging.getLogger("hugginggpt.discord")

MAX_FORM_FILES = 10
"""Files one File Upload takes at most (Discord API docs, "File Upload": ``max_values`` up to 10)."""
MAX_FILE_TYPES = 10
"""Entries of a ``file_types`` filter at most (Discord API docs)."""
MEDIA_FILE_TYPES = ("image", "audio", "video")
"""The kinds Discord's ``file_types`` names itself; text files are named by their extensions."""
FORM_PREFIX = "hgpt-ask-form:"
"""The custom id of every upload form starts with this (its submissions are told apart by it)."""
FORM_SECONDS = 900.0
"""Seconds an upload form stays open (then a submission is answered with :data:`FORM_EXPIRED`)."""
FORM_EXPIRED = "This form has expired; use /{command} again to open a new one."
"""Said privately to a submission of a form the bot no longer holds."""
PROMPT_CHARS = 4000
"""Characters of the form's request field at most (Discord's limit for a text input)."""


def file_types(kinds: Collection[str]) -> list[str]:
    """Discord's ``file_types`` filter for files of ``kinds`` (``"image"``, ``"audio"``,
    ``"video"``, ``"text"``; :meth:`bot.service.Service.readable_kinds`): the media kinds by name,
    text by the extensions the bot reads (:data:`adapters.discord.policy.TEXT_EXTENSIONS`), at
    most :data:`MAX_FILE_TYPES` entries; ``[]`` (no filter) when ``kinds`` names none of them."""
    types = [k for k in MEDIA_FILE_TYPES if k in kinds]
    if "text" in kinds:
        types += list(TEXT_EXTENSIONS)
    return types[:MAX_FILE_TYPES]


class TypedFileUpload(discord.ui.FileUpload):
    """:class:`discord.ui.FileUpload` with Discord's ``file_types`` filter in its payload.

    Args:
        file_types: ``"image"``, ``"audio"``, ``"video"`` or ``".ext"`` entries (:func:`file_types`);
            empty: no filter.
        options: for :class:`discord.ui.FileUpload` (``custom_id``, ``required``, ``min_values``, ``max_values``).
    """

    def __init__(self, *, file_types: list[str], **options: Any) -> None:
        super().__init__(**options)
        self.file_types = list(file_types)

    def to_component_dict(self) -> dict[str, Any]:  # type: ignore[override]
        """discord.py's payload of the File Upload, with ``file_types`` when there is a filter."""
        payload: dict[str, Any] = dict(super().to_component_dict())
        if self.file_types:
            payload["file_types"] = list(self.file_types)
        return payload


class AskCommand(app_commands.Command):  # type: ignore[type-arg]
    """The ``/ask`` command; its attachment options carry :attr:`file_types` (set before the
    commands are synced) in the registration payload.

    Attributes:
        file_types: the filter (:func:`file_types`); empty: none.
    """

    file_types: tuple[str, ...] = ()

    def to_dict(self, tree: app_commands.CommandTree) -> dict[str, Any]:  # type: ignore[override,type-arg]
        """discord.py's registration payload, with ``file_types`` on each attachment option."""
        base = super().to_dict(tree)
        if self.file_types:
            for option in base.get("options", []):
                if option.get("type") == discord.AppCommandOptionType.attachment.value:
                    option["file_types"] = list(self.file_types)
        return base


class AskForm(discord.ui.Modal):
    """The upload form of one ``/ask`` (see the module docstring).

    Args:
        bot: the :class:`adapters.discord.bot_client.HuggingGPTBot` (not imported: no import cycle).
        forms: the registry holding it.
        max_files: files the File Upload takes, 1 to :data:`MAX_FORM_FILES`.
        types: its ``file_types`` filter.
    """

    def __init__(self, bot: Any, forms: Forms, *, max_files: int, types: list[str]) -> None:
        super().__init__(title="Ask HuggingGPT", timeout=forms.timeout, custom_id=FORM_PREFIX + os.urandom(8).hex())
        self.bot, self.forms, self.max_files = bot, forms, max_files
        self.prompt: discord.ui.TextInput[AskForm] = discord.ui.TextInput(
            style=discord.TextStyle.paragraph, max_length=PROMPT_CHARS, custom_id="prompt",
            placeholder="Describe this photo and read the answer aloud")
        self.upload = TypedFileUpload(file_types=types, custom_id="files", required=False, min_values=0,
                                      max_values=max_files)
        self.add_item(discord.ui.Label(text="What you want", component=self.prompt))
        what = "Images, audio, video or text files" if not types else ", ".join(types)
        self.add_item(discord.ui.Label(text="Files (optional)", component=self.upload,
                                       description=f"{what}; up to {max_files}."[:100]))

    async def on_submit(self, interaction: discord.Interaction) -> None:
        """Run the request with the form's text and files (:func:`adapters.discord.ask.on_ask`),
        the files checked against the form's count first."""
        prompt, files = self.prompt.value or "", list(self.upload.values)  # read before any await
        self.forms.submitted(self)
        await ask.on_ask(self.bot, interaction, prompt, files, max_files=self.max_files)

    async def on_timeout(self) -> None:
        """Open too long: forgotten (a late submission is answered by :meth:`Forms.answer_stale`)."""
        self.forms.forget(self)

    async def on_error(self, interaction: discord.Interaction, error: Exception, /) -> None:
        """An unexpected error while handling the submission: logged, the user told privately."""
        log.error("upload form %s of user %s failed: %r", self.custom_id, interaction.user.id, error)
        await tell_privately(interaction, CRASHED)


class Forms:
    """The upload forms open now: one per user, each for :attr:`timeout` seconds; the ids of forms
    submitted within the last minute (their submission is the form's own, not a stale one).

    Args:
        timeout: seconds a form stays open (:data:`FORM_SECONDS`).
    """

    def __init__(self, timeout: float = FORM_SECONDS) -> None:
        self.timeout = timeout
        self._open: dict[int, AskForm] = {}
        self._submitted: TTLCache[str, bool] = TTLCache(maxsize=20_000, ttl=60.0)

    def __len__(self) -> int:
        return len(self._open)

    async def open(self, bot: Any, interaction: discord.Interaction, types: Sequence[str]) -> None:
        """Answer ``interaction`` with a new form for its user (replacing the user's earlier one);
        a form Discord refuses is logged."""
        max_files = max(1, min(MAX_FORM_FILES, bot.settings.storage.max_files))
        form = AskForm(bot, self, max_files=max_files, types=list(types))
        earlier = self._open.pop(interaction.user.id, None)
        if earlier is not None:
            earlier.stop()  # out of discord.py's view store: its submission is answered as expired
        self._open[interaction.user.id] = form
        try:
            await interaction.response.send_modal(form)
        except discord.HTTPException as e:
            self.forget(form)
            form.stop()
            log.warning("could not open the upload form for interaction %s: %s", interaction.id, e)

    def submitted(self, form: AskForm) -> None:
        """``form`` came back: no longer open, its submission its own."""
        self._submitted[form.custom_id] = True
        self.forget(form)

    def forget(self, form: AskForm) -> None:
        """Drop ``form`` (timed out, submitted, refused) unless a newer form took its place."""
        for user, held in list(self._open.items()):
            if held is form:
                del self._open[user]

    def held(self, custom_id: str) -> bool:
        """Whether ``custom_id`` is a form open now or submitted within the last minute."""
        return custom_id in self._submitted or any(f.custom_id == custom_id for f in self._open.values())

    async def answer_stale(self, interaction: discord.Interaction, command: str) -> None:
        """A submission of an upload form the bot no longer holds: one private sentence."""
        data = interaction.data or {}
        custom_id = str(data.get("custom_id") or "")
        if interaction.type is not discord.InteractionType.modal_submit or not custom_id.startswith(FORM_PREFIX):
            return
        if self.held(custom_id):
            return
        log.info("submission of upload form %s that is no longer open (user %s)", custom_id, interaction.user.id)
        await tell_privately(interaction, FORM_EXPIRED.format(command=command))
