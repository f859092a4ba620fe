"""A stand-in Discord (REST API v10, gateway websocket and CDN) on 127.0.0.1 for tests and benchmarks:
the server, its guilds and shards, the gateway, and what a test does as a Discord user.

The real discord.py client talks to it after two class attributes are pointed at it (see
:meth:`StandinDiscord.patch_client_urls`): ``discord.http.Route.BASE`` (REST, interaction callbacks
and webhook follow-ups) and ``discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY`` (websocket).

What it speaks (Discord API docs, "Gateway" and "Interactions > Receiving and Responding"):

- gateway ``/gw``: HELLO (op 10), IDENTIFY (op 2) or RESUME (op 6), READY, GUILD_CREATE with the
  guild's channels, roles and members, heartbeat ACKs (op 11), then the events a test injects
  (INTERACTION_CREATE, MESSAGE_CREATE) plus THREAD_CREATE and MESSAGE_CREATE echoes of what the
  bot itself creates, as Discord does;
- REST under ``/api/v10``: the routes a slash-command bot uses (:mod:`sandbox.discord_rest`);
- CDN ``/attachments/{channel}/{attachment}/{filename}``: attachment bytes from a media folder.

Everything the bot sends is recorded in :attr:`StandinDiscord.calls` with a ``time.monotonic()``
timestamp; messages keep their edit history, and uploaded files keep their bytes.

Components V2 rules, messages and permission bits: :mod:`sandbox.discord_messages`.

Component interactions (a button press, :meth:`StandinDiscord.press`) are answered with callback
type 6 (deferred update), 7 (update the message) or 4 (a new, e.g. ephemeral, message). Direct
messages: :meth:`StandinDiscord.dm_channel` opens the DM channel with a user (also ``POST
/users/@me/channels``); interactions and messages there carry no guild.

Sharding (Discord API docs, "Gateway > Sharding"): ``GET /gateway/bot`` answers
:attr:`StandinDiscord.shard_count` shards; a session that IDENTIFYs with ``shard: [i, n]`` gets
READY listing, and GUILD_CREATE for, only the guilds with ``(guild_id >> 22) % n == i``, and only
their events (DMs go to shard 0); a session without ``shard`` is ``[0, 1]`` and gets everything.
:meth:`StandinDiscord.add_guild` makes a guild on a chosen shard; :meth:`StandinDiscord.hand_over`
plays a shard handover, during which another session also receives a guild's events.

Knobs: :attr:`forbid_threads` (thread creation answers 403 "Missing Permissions", code 50013),
:attr:`attachment_size_limit` (bytes, reported in each interaction and enforced on uploads with
413 / code 40005), :attr:`app_permissions` (the bot's permissions sent in each interaction).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

from . import serve_loopback
from .discord_messages import BOT_PERMISSIONS, DISCORD_EPOCH_MS, IS_COMPONENTS_V2, Call, StoredMessage, now_iso
from .discord_rest import DiscordRest


class StandinDiscord:
    """The stand-in server. Use as ``async with StandinDiscord(media_dir) as d: ...``.

    Attributes:
        app_id, bot_id, guild_id, channel_id (a text channel), other_channel_id (a text channel
        outside any allow-list), user (a human member), other_bot (another bot account).
        calls: every request the bot made, in order.
        messages: message id → :class:`StoredMessage` (channel posts, interaction responses,
            follow-ups).
        command_syncs: how many times application commands were bulk-overwritten (PUT).
        deferrals: interaction id → ``time.monotonic()`` of its deferral (callback type 5).
        injected: interaction/message id → ``time.monotonic()`` when its event was sent.
    """

    def __init__(self, media_dir: Path) -> None:
        self.media_dir = Path(media_dir)
        self._ids = itertools.count(1)
        self.app_id = self.snowflake()
        self.bot_id = self.app_id
        self.guild_id = self.snowflake()
        self.channel_id = self.snowflake()
        self.other_channel_id = self.snowflake()
        self.role_id = self.snowflake()
        self.user = self.user_payload(self.snowflake(), "alice")
        self.user2 = self.user_payload(self.snowflake(), "bob")
        self.other_bot = self.user_payload(self.snowflake(), "otherbot", bot=True)
        self.bot_user = self.user_payload(self.bot_id, "HuggingGPT", bot=True)
        self.token = "standin-bot-token"
        self.channels: dict[int, dict[str, Any]] = {}
        self.guilds: dict[int, str] = {self.guild_id: "Stand-in guild"}  # guild id → name
        for cid, name in ((self.channel_id, "general"), (self.other_channel_id, "random")):
            self._text_channel(cid, self.guild_id, name)
        self.shard_count = 1  # what GET /gateway/bot recommends
        self.sessions: dict[str, tuple[int, int]] = {}  # session id → its shard [id, count]
        self.deliveries: dict[int, list[tuple[int, int]]] = {}  # event data id → shards it was sent to
        self.messages: dict[int, StoredMessage] = {}
        self.calls: list[Call] = []
        self.command_syncs = 0
        self.commands: list[dict[str, Any]] = []
        self.deferrals: dict[int, float] = {}
        self.callbacks: dict[int, dict[str, Any]] = {}  # interaction id → callback JSON
        self.modals: dict[int, dict[str, Any]] = {}  # interaction id → the modal it was answered with
        self.injected: dict[int, float] = {}
        self.identifies = 0
        self.resumes = 0
        self.forbid_threads = False
        self.attachment_size_limit = 10 * 1024 * 1024
        self.app_permissions = BOT_PERMISSIONS
        self.token_ttl: float | None = None  # seconds an interaction token works (Discord: 900)
        self.refuse_intents = False  # close the gateway with 4014 "Disallowed intent(s)" on IDENTIFY
        self.interactions: dict[str, dict[str, Any]] = {}  # token → {id, channel_id, original}
        self._sockets: list[web.WebSocketResponse] = []
        self._shards: dict[web.WebSocketResponse, tuple[int, int]] = {}  # socket → its shard [id, count]
        self._seq = 0
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.identified = asyncio.Event()
        self._changed = asyncio.Condition()

    # ------------------------------------------------------------------------------------------
    # lifecycle

    async def __aenter__(self) -> "StandinDiscord":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    async def start(self) -> None:
        app = web.Application(client_max_size=200 * 1024 * 1024)
        app.add_routes([web.get("/gw", self._gateway), *DiscordRest(self).routes()])
        self._runner, self.port = await serve_loopback(app)

    async def stop(self) -> None:
        for ws in list(self._sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base(self) -> str:
        return f"{self.base}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gw"

    def patch_client_urls(self) -> tuple[Any, Any]:
        """Point discord.py at this server; returns the old values for :meth:`restore_client_urls`."""
        import discord.gateway
        import discord.http
        import yarl

        old = (discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)
        discord.http.Route.BASE = self.api_base
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(self.gateway_url)
        return old

    @staticmethod
    def restore_client_urls(old: tuple[Any, Any]) -> None:
        import discord.gateway
        import discord.http

        discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = old

    # ------------------------------------------------------------------------------------------
    # guilds and shards

    def _text_channel(self, cid: int, guild_id: int, name: str) -> None:
        self.channels[cid] = {
            "id": str(cid), "type": 0, "guild_id": str(guild_id), "name": name, "position": 0,
            "permission_overwrites": [], "nsfw": False, "parent_id": None, "topic": None,
            "last_message_id": None, "rate_limit_per_user": 0,
        }

    def add_guild(self, *, shard: int = 0, shard_count: int = 1, name: str | None = None) -> tuple[int, int]:
        """A new guild, with one text channel, whose events go to shard ``shard`` of
        ``shard_count`` (Discord's rule ``(guild_id >> 22) % shard_count``); alice and the bot are
        members. Returns ``(guild id, text channel id)``. Connected sessions are not told (add
        guilds before the bot connects)."""
        sf = self.snowflake()
        ms = (sf >> 22) + (shard - (sf >> 22)) % shard_count  # a timestamp a few ms on, on that shard
        gid = (ms << 22) | (sf & 0x3FFFFF)
        self.guilds[gid] = name or f"Guild on shard {shard}"
        cid = self.snowflake()
        self._text_channel(cid, gid, "general")
        return gid, cid

    @staticmethod
    def shard_of(guild_id: int | None, shard_count: int) -> int:
        """The shard receiving a guild's events; DMs (``guild_id`` ``None``) go to shard 0."""
        return 0 if guild_id is None else (guild_id >> 22) % shard_count

    def guild_of(self, channel_id: int) -> int | None:
        """The guild of a channel or thread; ``None`` for a DM."""
        gid = self.channels.get(channel_id, {}).get("guild_id")
        return int(gid) if gid else None

    def _guilds_on(self, shard: tuple[int, int]) -> list[int]:
        return [g for g in self.guilds if self.shard_of(g, shard[1]) == shard[0]]

    # ------------------------------------------------------------------------------------------
    # payload builders

    def snowflake(self) -> int:
        ms = int(time.time() * 1000) - DISCORD_EPOCH_MS
        return (ms << 22) | (next(self._ids) & 0x3FFFFF)

    @staticmethod
    def user_payload(uid: int, name: str, *, bot: bool = False) -> dict[str, Any]:
        return {
            "id": str(uid),
            "username": name,
            "global_name": name,
            "discriminator": "0",
            "avatar": None,
            "bot": bot,
            "public_flags": 0,
        }

    def _member(self, user: dict[str, Any], roles: list[int] | None = None) -> dict[str, Any]:
        return {
            "user": user,
            "roles": [str(r) for r in (roles or [])],
            "joined_at": "2024-01-01T00:00:00+00:00",
            "deaf": False,
            "mute": False,
            "flags": 0,
            "nick": None,
            "avatar": None,
            "premium_since": None,
            "pending": False,
            "communication_disabled_until": None,
        }

    def guild_payload(self, guild_id: int | None = None) -> dict[str, Any]:
        gid = guild_id or self.guild_id
        mine = [c for c in self.channels.values() if c.get("guild_id") == str(gid)]
        return {
            "id": str(gid),
            "name": self.guilds[gid],
            "icon": None,
            "owner_id": self.user["id"],
            "features": [],
            "emojis": [],
            "stickers": [],
            "roles": [
                {"id": str(gid), "name": "@everyone", "permissions": str(BOT_PERMISSIONS), "position": 0,
                 "color": 0, "hoist": False, "managed": False, "mentionable": False, "flags": 0},
                {"id": str(self.role_id), "name": "artists", "permissions": "0", "position": 1,
                 "color": 0, "hoist": False, "managed": False, "mentionable": False, "flags": 0},
            ],
            "channels": [c for c in mine if c["type"] == 0],
            "threads": [c for c in mine if c["type"] == 11],
            "members": [self._member(self.bot_user), self._member(self.user, [self.role_id])],
            "member_count": 4,
            "premium_tier": 0,
            "unavailable": False,
            "large": False,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "preferred_locale": "en-US",
            "system_channel_flags": 0,
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "joined_at": "2024-01-01T00:00:00+00:00",
        }

    def message_payload(
        self,
        channel_id: int,
        author: dict[str, Any],
        content: str,
        *,
        attachments: list[dict[str, Any]] | None = None,
        mentions: list[dict[str, Any]] | None = None,
        flags: int = 0,
        message_type: int = 0,
        webhook_id: int | None = None,
        interaction: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        mid = self.snowflake()
        payload: dict[str, Any] = {
            "id": str(mid),
            "channel_id": str(channel_id),
            "guild_id": str(self.guild_of(channel_id) or self.guild_id),
            "author": author,
            "content": content,
            "timestamp": now_iso(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": mentions or [],
            "mention_roles": [],
            "attachments": attachments or [],
            "embeds": [],
            "pinned": False,
            "type": message_type,
            "flags": flags,
        }
        if webhook_id is not None:
            payload["webhook_id"] = str(webhook_id)
        if interaction is not None:
            payload["interaction_metadata"] = interaction
        if self.channels.get(channel_id, {}).get("type") == 1:  # a DM: no guild, no member
            del payload["guild_id"]
        elif not author.get("bot"):
            payload["member"] = {k: v for k, v in self._member(author, [self.role_id] if author is self.user else []).items() if k != "user"}
        return payload

    def attachment(self, filename: str, *, channel_id: int | None = None, content_type: str | None = None,
                   size: int | None = None) -> dict[str, Any]:
        """An attachment payload whose ``url`` is this stand-in's CDN route for ``media_dir/filename``.

        ``content_type`` and ``size`` default to the real ones; pass others to play a lying client.
        """
        path = self.media_dir / filename
        aid = self.snowflake()
        cid = channel_id or self.channel_id
        url = f"{self.base}/attachments/{cid}/{aid}/{filename}"
        guessed = {
            ".png": "image/png", ".jpg": "image/jpeg", ".wav": "audio/wav", ".ogg": "audio/ogg",
            ".mp3": "audio/mpeg", ".mp4": "video/mp4", ".txt": "text/plain", ".md": "text/markdown",
        }.get(path.suffix.lower(), "application/octet-stream")
        return {
            "id": str(aid),
            "filename": filename,
            "size": size if size is not None else path.stat().st_size,
            "url": url,
            "proxy_url": url,
            "content_type": content_type or guessed,
        }

    def thread_payload(self, parent_id: int, name: str, *, owner_id: int, thread_id: int | None = None) -> dict[str, Any]:
        """A new public thread under ``parent_id``, stored as a channel; its payload."""
        tid = thread_id or self.snowflake()
        thread = {
            "id": str(tid),
            "type": 11,
            "guild_id": str(self.guild_of(parent_id)),
            "parent_id": str(parent_id),
            "owner_id": str(owner_id),
            "name": name,
            "last_message_id": None,
            "message_count": 0,
            "member_count": 1,
            "rate_limit_per_user": 0,
            "flags": 0,
            "thread_metadata": {"archived": False, "auto_archive_duration": 1440, "archive_timestamp": now_iso(),
                                "locked": False, "create_timestamp": now_iso()},
            "total_message_sent": 0,
        }
        self.channels[tid] = thread
        return thread

    # ------------------------------------------------------------------------------------------
    # gateway

    async def dispatch(self, event: str, data: dict[str, Any], *, everywhere: bool = False) -> None:
        """Send one DISPATCH (op 0) event to the connected gateway sessions of the shard it belongs
        to (its ``guild_id``, or ``id`` for GUILD_CREATE; none: shard 0), or to every session with
        ``everywhere``. The shards it went to are added to :attr:`deliveries` under ``data["id"]``."""
        self._seq += 1
        frame = json.dumps({"op": 0, "t": event, "s": self._seq, "d": data})
        gid = data.get("id") if event == "GUILD_CREATE" else data.get("guild_id")
        for ws in list(self._sockets):
            shard = self._shards.get(ws, (0, 1))
            if ws.closed or not (everywhere or self.shard_of(int(gid) if gid else None, shard[1]) == shard[0]):
                continue
            if data.get("id") is not None:
                self.deliveries.setdefault(int(data["id"]), []).append(shard)
            await ws.send_str(frame)

    async def hand_over(self, guild_id: int) -> None:
        """Play a shard handover (a rolling restart, a re-shard): every session, whatever its shard,
        gets the guild's GUILD_CREATE, so for a moment the guild's events may reach two processes
        (send them with ``everywhere=True``)."""
        await self.dispatch("GUILD_CREATE", self.guild_payload(guild_id), everywhere=True)

    def sessions_of(self, shard: tuple[int, int]) -> int:
        """How many sessions IDENTIFYed as ``shard`` (``[id, count]``) so far."""
        return sum(1 for s in self.sessions.values() if s == shard)

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": 41250}}))
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                frame = json.loads(msg.data)
                op = frame.get("op")
                if op == 1:
                    await ws.send_str(json.dumps({"op": 11}))
                elif op == 2 and self.refuse_intents:
                    await ws.close(code=4014, message=b"Disallowed intent(s).")
                    break
                elif op == 2:
                    self.identifies += 1
                    shard = (frame.get("d") or {}).get("shard") or [0, 1]
                    self._shards[ws] = (int(shard[0]), int(shard[1]))
                    self._sockets.append(ws)
                    await self._send_ready(ws)
                elif op == 6:
                    self.resumes += 1
                    self._shards[ws] = self.sessions.get((frame.get("d") or {}).get("session_id"), (0, 1))
                    self._sockets.append(ws)
                    self._seq += 1
                    await ws.send_str(json.dumps({"op": 0, "t": "RESUMED", "s": self._seq, "d": {}}))
        finally:
            if ws in self._sockets:
                self._sockets.remove(ws)
            self._shards.pop(ws, None)
        return ws

    async def _send_ready(self, ws: web.WebSocketResponse) -> None:
        self._seq += 1
        shard = self._shards[ws]
        guilds = self._guilds_on(shard)
        session = f"session-{self.identifies}"
        self.sessions[session] = shard
        ready = {
            "v": 10,
            "user": {**self.bot_user, "verified": True, "mfa_enabled": False, "flags": 0},
            "guilds": [{"id": str(g), "unavailable": True} for g in guilds],
            "session_id": session,
            "resume_gateway_url": self.gateway_url,
            "shard": list(shard),
            "application": {"id": str(self.app_id), "flags": 0},
            "private_channels": [],
            "relationships": [],
        }
        await ws.send_str(json.dumps({"op": 0, "t": "READY", "s": self._seq, "d": ready}))
        for g in guilds:
            self._seq += 1
            await ws.send_str(json.dumps({"op": 0, "t": "GUILD_CREATE", "s": self._seq, "d": self.guild_payload(g)}))
        self.identified.set()

    async def reconnect_gateway(self) -> None:
        """Ask the client to reconnect (op 7 RECONNECT), as Discord does during maintenance."""
        for ws in list(self._sockets):
            await ws.send_str(json.dumps({"op": 7, "d": None}))

    # ------------------------------------------------------------------------------------------
    # injecting user actions

    def interaction_payload(
        self,
        prompt: str | None,
        *,
        files: list[str] | None = None,
        attachments: list[dict[str, Any]] | None = None,
        user: dict[str, Any] | None = None,
        roles: list[int] | None = None,
        channel_id: int | None = None,
        command: str = "ask",
        interaction_id: int | None = None,
    ) -> dict[str, Any]:
        """An APPLICATION_COMMAND interaction for ``/command prompt:<prompt> file1..fileN`` (no
        ``prompt`` option when ``prompt`` is ``None``)."""
        user = user or self.user
        cid = channel_id or self.channel_id
        channel = self.channels[cid]
        iid = interaction_id or self.snowflake()
        token = f"itoken-{iid}"
        atts = list(attachments or []) + [self.attachment(f, channel_id=cid) for f in files or []]
        options: list[dict[str, Any]] = [] if prompt is None else [{"name": "prompt", "type": 3, "value": prompt}]
        resolved: dict[str, Any] = {}
        for i, att in enumerate(atts, start=1):
            options.append({"name": f"file{i}", "type": 11, "value": att["id"]})
            resolved.setdefault("attachments", {})[att["id"]] = att
        data: dict[str, Any] = {"id": str(self.commands[0]["id"]) if self.commands else "1", "name": command,
                                "type": 1, "options": options}
        if resolved:
            data["resolved"] = resolved
        member_roles = [self.role_id] if roles is None and user is self.user else (roles or [])
        if channel["type"] == 1:  # in the bot's DM (context 1), from a user install
            return {
                "id": str(iid), "application_id": str(self.app_id), "type": 2, "data": data,
                "channel_id": str(cid), "channel": channel, "user": user, "token": token, "version": 1,
                "locale": "en-US", "app_permissions": str(self.app_permissions),
                "attachment_size_limit": self.attachment_size_limit, "entitlements": [],
                "authorizing_integration_owners": {"1": user["id"]}, "context": 1,
            }
        return {
            "id": str(iid),
            "application_id": str(self.app_id),
            "type": 2,
            "data": data,
            "guild_id": str(self.guild_of(cid)),
            "channel_id": str(cid),
            "channel": channel,
            "member": {**self._member(user, member_roles), "permissions": str(BOT_PERMISSIONS)},
            "token": token,
            "version": 1,
            "locale": "en-US",
            "guild_locale": "en-US",
            "app_permissions": str(self.app_permissions),
            "attachment_size_limit": self.attachment_size_limit,
            "entitlements": [],
            "authorizing_integration_owners": {"0": str(self.guild_of(cid))},
            "context": 0,
        }

    async def send_interaction(self, payload: dict[str, Any], *, everywhere: bool = False) -> dict[str, Any]:
        """Deliver INTERACTION_CREATE (again, for a replay; to every gateway session with
        ``everywhere``) and remember its token."""
        self.interactions.setdefault(payload["token"], {"id": int(payload["id"]), "channel_id": int(payload["channel_id"]),
                                                         "original": None, "type": payload["type"]})
        self.injected.setdefault(int(payload["id"]), time.monotonic())
        await self.dispatch("INTERACTION_CREATE", payload, everywhere=everywhere)
        return payload

    async def interact(self, prompt: str, **kw: Any) -> dict[str, Any]:
        """Build and deliver an ``/ask`` interaction; returns its payload."""
        return await self.send_interaction(self.interaction_payload(prompt, **kw))

    async def submit_form(self, iid: int, text: str, *, files: list[str] | None = None,
                          attachments: list[dict[str, Any]] | None = None, custom_id: str | None = None) -> int:
        """The user fills in and submits the modal interaction ``iid`` was answered with
        (INTERACTION_CREATE, type 5 MODAL_SUBMIT): ``text`` in its text input, the files in its
        File Upload, as Discord sends them (ids in ``values``, the attachments under
        ``resolved``). Nothing checks the count or ``file_types``, as a modified client would not;
        ``custom_id`` replaces the modal's own (a stale or forged form). Returns the new interaction id."""
        modal = self.modals[iid]
        original = self.interaction_payload(None, channel_id=next(
            i["channel_id"] for i in self.interactions.values() if i["id"] == iid))
        atts = list(attachments or []) + [self.attachment(f, channel_id=int(original["channel_id"])) for f in files or []]
        filled = []
        for label in modal["components"]:
            inner = dict(label["component"])
            answer = {"type": inner["type"], "id": inner.get("id", 0), "custom_id": inner["custom_id"]}
            answer.update({"value": text} if inner["type"] == 4 else {"values": [a["id"] for a in atts]})
            filled.append({"type": 18, "id": label.get("id", 0), "component": answer})
        data: dict[str, Any] = {"custom_id": custom_id or modal["custom_id"], "components": filled}
        if atts:
            data["resolved"] = {"attachments": {a["id"]: a for a in atts}}
        new = self.snowflake()
        payload = {**original, "id": str(new), "type": 5, "token": f"itoken-{new}", "data": data}
        await self.send_interaction(payload)
        return new

    def dm_channel(self, user: dict[str, Any] | None = None) -> int:
        """The id of the DM channel between the bot and ``user`` (default: alice), opened on first use."""
        user = user or self.user
        for cid, ch in self.channels.items():
            if ch["type"] == 1 and ch["recipients"][0]["id"] == user["id"]:
                return cid
        cid = self.snowflake()
        self.channels[cid] = {"id": str(cid), "type": 1, "recipients": [user], "last_message_id": None, "flags": 0}
        return cid

    async def press(self, message_id: int, custom_id: str, *, user: dict[str, Any] | None = None,
                    permissions: int = BOT_PERMISSIONS, values: list[str] | None = None) -> int:
        """A user presses the button ``custom_id`` of a message, or (``values`` given) chooses
        ``values`` in its string select ``custom_id`` (INTERACTION_CREATE, type 3
        MESSAGE_COMPONENT, ``data.component_type`` 2 or 3); ``permissions`` are the member's in that
        channel. Returns the interaction id.

        Raises:
            AssertionError: the message shows no such component, or the choice is one Discord's
                client would not let a user make (see :meth:`StoredMessage.choice_problem`).
        """
        user = user or self.user
        msg = self.messages[message_id]
        if values is None:
            if custom_id not in [b.get("custom_id") for b in msg.buttons()]:
                raise AssertionError(f"message {message_id} shows no button {custom_id!r}: a user cannot press it")
            data: dict[str, Any] = {"custom_id": custom_id, "component_type": 2}
        else:
            problem = msg.choice_problem(custom_id, values)
            if problem:
                raise AssertionError(f"message {message_id}: {problem}: a user cannot choose it")
            data = {"custom_id": custom_id, "component_type": 3, "values": list(values)}
        iid = self.snowflake()
        token = f"itoken-{iid}"
        channel = self.channels[msg.channel_id]
        payload: dict[str, Any] = {
            "id": str(iid), "application_id": str(self.app_id), "type": 3, "token": token, "version": 1,
            "data": data, "message": msg.payload,
            "channel_id": str(msg.channel_id), "channel": channel, "locale": "en-US",
            "app_permissions": str(self.app_permissions), "entitlements": [],
            "attachment_size_limit": self.attachment_size_limit,
        }
        if channel["type"] == 1:
            payload.update(user=user, context=1, authorizing_integration_owners={"1": user["id"]})
        else:
            roles = [self.role_id] if user is self.user else []
            gid = str(self.guild_of(msg.channel_id))
            payload.update(guild_id=gid, context=0,
                           member={**self._member(user, roles), "permissions": str(permissions)},
                           authorizing_integration_owners={"0": gid})
        self.interactions[token] = {"id": iid, "channel_id": msg.channel_id, "original": None, "message": message_id}
        self.injected[iid] = time.monotonic()
        await self.dispatch("INTERACTION_CREATE", payload)
        return iid

    def bot_message(self, channel_id: int, components: list[dict[str, Any]]) -> int:
        """A components message the bot posted earlier (e.g. before a restart); returns its id."""
        msg = self.message_payload(channel_id, self.bot_user, "", flags=IS_COMPONENTS_V2)
        msg["components"] = components
        stored = StoredMessage(msg)
        stored.history.append(stored.text)
        self.messages[stored.id] = stored
        return stored.id

    async def send_message(
        self,
        content: str,
        *,
        channel_id: int,
        author: dict[str, Any] | None = None,
        files: list[str] | None = None,
        mention_bot: bool = False,
        payload: dict[str, Any] | None = None,
        everywhere: bool = False,
    ) -> dict[str, Any]:
        """Deliver MESSAGE_CREATE for a user message (or replay ``payload``; to every gateway
        session with ``everywhere``); returns the payload."""
        if payload is None:
            author = author or self.user
            mentions = [self.bot_user] if mention_bot else []
            if mention_bot:
                content = f"<@{self.bot_id}> {content}"
            atts = [self.attachment(f, channel_id=channel_id) for f in files or []]
            payload = self.message_payload(channel_id, author, content, attachments=atts, mentions=mentions)
            self.messages[int(payload["id"])] = StoredMessage(payload, history=[content])
        self.injected.setdefault(int(payload["id"]), time.monotonic())
        await self.dispatch("MESSAGE_CREATE", payload, everywhere=everywhere)
        return payload

    async def create_thread_as_user(self, name: str, *, channel_id: int | None = None) -> int:
        """A thread some user started in a text channel (default: :attr:`channel_id`; not by the
        bot); returns its id."""
        thread = self.thread_payload(channel_id or self.channel_id, name, owner_id=int(self.user["id"]))
        await self.dispatch("THREAD_CREATE", {**thread, "newly_created": True})
        return int(thread["id"])

    # ------------------------------------------------------------------------------------------
    # queries for assertions

    def channel_messages(self, channel_id: int) -> list[StoredMessage]:
        """Messages in a channel or thread, oldest first (deleted ones left out)."""
        return sorted((m for m in self.messages.values() if m.channel_id == channel_id and not m.deleted),
                      key=lambda m: m.id)

    def bot_messages(self, channel_id: int) -> list[StoredMessage]:
        return [m for m in self.channel_messages(channel_id) if m.payload["author"]["id"] == str(self.bot_id)]

    def threads(self) -> list[dict[str, Any]]:
        return [c for c in self.channels.values() if c["type"] == 11]

    def interaction_messages(self, interaction_id: int) -> list[StoredMessage]:
        """The original response and follow-ups of one interaction (including deleted ones)."""
        return sorted((m for m in self.messages.values()
                       if (m.payload.get("interaction_metadata") or {}).get("id") == str(interaction_id)),
                      key=lambda m: m.id)

    async def wait_for(self, predicate: Any, timeout: float = 20.0) -> Any:
        """Wait until ``predicate()`` is truthy (re-checked after every recorded call); return it."""
        deadline = time.monotonic() + timeout
        async with self._changed:
            while True:
                value = predicate()
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("stand-in Discord: condition not met in time")
                try:  # also re-check now and then: the predicate may depend on the bot's own state
                    await asyncio.wait_for(self._changed.wait(), min(left, 0.05))
                except (asyncio.TimeoutError, TimeoutError):
                    pass

    async def notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()
