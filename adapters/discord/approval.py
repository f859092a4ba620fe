"""A plan that waits for approval on Discord (:mod:`bot.approval`): posted with Run and Cancel
buttons and a "Run without steps…" string select of its steps.

Each component's ``custom_id`` carries the verb and the plan id (``hgpt:plan:run:<hex>``,
``hgpt:plan:without:<hex>``; the steps chosen arrive as the select's values) and is registered as a dynamic item (discord.py ``ui.DynamicItem``,
``Client.add_dynamic_items``), so a press is understood whatever process receives it, also after a
restart: the plan itself is in the store. Only the requester or a ``[planning] approvers`` user or
role may press; anyone else, a plan run, cancelled or expired, gets one private sentence (an
expired plan's message says so too). Run posts the run's progress message in the same thread.
"""

from __future__ import annotations

import logging
from typing import Any

import discord

from adapters.progress import user_sentence
from bot.approval import EXPIRED
from bot.incoming import Approve, Message
from pipeline.errors import HuggingGPTError

from .delivery import DiscordView, follow_turn, tell_privately
from .runs import LiveRun

log = logging.getLogger("hugginggpt.discord")

async def press_plan(bot: Any, interaction: discord.Interaction, verb: str, plan_id: str, drop: tuple[int, ...]) -> None:
    """Answer a press on a plan button or a choice in its select (see the module docstring);
    ``drop``: the step ids to run without."""
    channel = interaction.channel
    who = bot.requester(interaction.user, interaction.guild_id, [interaction.channel_id or 0])
    try:
        if verb == "cancel":
            sentence = await bot.service.cancel_plan(plan_id, who)
            await interaction.response.edit_message(content=sentence, view=None)
            return
        plan = await bot.service.pending_plan(plan_id, who)
    except HuggingGPTError as e:
        log.info("press on plan %s by user %s refused: %s", plan_id, interaction.user.id, e)
        await tell_privately(interaction, user_sentence(e))
        if e.user_message == EXPIRED and interaction.message is not None:
            try:
                await interaction.message.edit(content=EXPIRED, view=None)
            except discord.HTTPException as err:
                log.warning("could not mark plan %s expired: %s", plan_id, err)
        return
    except discord.HTTPException as e:
        log.warning("could not answer the press on plan %s: %s", plan_id, e)
        return
    without = f" without step{'s' if len(drop) > 1 else ''} {', '.join(map(str, drop))}" if drop else ""
    try:
        await interaction.response.edit_message(content=f"Running this plan{without} (approved by "
                                                        f"{interaction.user.display_name}).", view=None)
    except discord.HTTPException as e:
        log.warning("could not answer the press on plan %s: %s", plan_id, e)
    live = LiveRun(requester=interaction.user.id)
    message = Message("", who=who, stop=live.stop, memoryless_fallback=True, approve=Approve(plan.plan_id, drop))
    bot.spawn(_approved_run(bot, channel, message, live), live)


async def _approved_run(bot: Any, channel: Any, message: Message, live: LiveRun) -> None:
    """The approved plan's turn: its progress message in ``channel``, then the answer there."""
    view = DiscordView(live, bot.edit_rate)
    guild = getattr(channel, "guild", None)
    limit = bot.upload_limit or (guild.filesize_limit if guild is not None else discord.utils.DEFAULT_FILE_SIZE_LIMIT_BYTES)
    await view.show(channel, limit)
    await follow_turn(bot, message, view, what=f"plan {message.approve.plan_id if message.approve else '?'}",
                      guild=guild.id if guild is not None else None)
