"""The Stop button of a run's progress message.

The button's ``custom_id`` carries the run id (``hgpt:stop:<hex>``), and it is registered as a
dynamic item (discord.py ``ui.DynamicItem``, ``Client.add_dynamic_items``), so a press is
understood whatever message it comes from, also one posted before a restart: an unknown run is
answered privately that it already ended.

Who may stop: the person who asked, or a member with the Manage Messages permission
in that channel (Discord's own right to moderate others' messages). Everyone else gets one
private sentence. Pressing sets the run's ``stop`` event; the service cuts the tasks in flight and
answers with what finished, and the progress message then shows them as stopped, without the
button.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import discord
from discord import ui

from .components import STOP_TEMPLATE, progress_view, stop_custom_id
from .runs import LiveRun

log = logging.getLogger("hugginggpt.discord")

ENDED_SENTENCE = "This run has already ended."
NOT_YOURS_SENTENCE = "Only the person who asked, or a member who can manage messages here, can stop this run."


class StopButton(ui.DynamicItem[ui.Button], template=STOP_TEMPLATE):
    """The Stop button of run ``run_id`` (hex), dispatched to ``client.on_stop_pressed``."""

    def __init__(self, run_id: str) -> None:
        super().__init__(ui.Button(style=discord.ButtonStyle.danger, label="Stop", emoji="⏹️",
                                   custom_id=stop_custom_id(run_id)))
        self.run_id = run_id

    @classmethod
    async def from_custom_id(cls, interaction: discord.Interaction, item: ui.Item[Any], match: re.Match[str], /) -> "StopButton":
        return cls(match["run"])

    async def callback(self, interaction: discord.Interaction) -> None:
        await press_stop(interaction, interaction.client.live_run(self.run_id))  # type: ignore[attr-defined]


def may_stop(live: LiveRun, user_id: int, permissions: discord.Permissions | None) -> bool:
    """Whether ``user_id`` (with ``permissions`` in the channel, ``None`` in DMs) may stop ``live``."""
    return user_id == live.requester or bool(permissions is not None and permissions.manage_messages)


async def press_stop(interaction: discord.Interaction, live: LiveRun | None) -> None:
    """Answer a Stop press: stop ``live`` and take the button away at once (the final state
    follows when the run has ended), or tell the presser privately why not."""
    in_guild = interaction.guild_id is not None
    if live is None or live.progress.finished or live.stop.is_set():
        sentence: str | None = ENDED_SENTENCE
    elif not may_stop(live, interaction.user.id, interaction.permissions if in_guild else None):
        sentence = NOT_YOURS_SENTENCE
    else:
        sentence = None
    try:
        if sentence is not None:
            log.info("stop pressed by user %s refused: %s", interaction.user.id, sentence)
            await interaction.response.send_message(sentence, ephemeral=True)
            return
        assert live is not None
        live.request_stop(interaction.user.display_name)
        log.info("run %s stopped by user %s", live.run_id, interaction.user.id)
        # UPDATE_MESSAGE (callback type 7): the button goes away in the same round trip
        await interaction.response.edit_message(view=progress_view(live.progress, stopped_by=live.stopped_by))
        live.press = interaction
    except discord.HTTPException as e:
        log.warning("could not answer the stop press %s: %s", interaction.id, e)
