"""A stand-in Discord (REST API v10, gateway websocket and CDN) on 127.0.0.1 for tests.

The real discord.py client talks to it after two class attributes are pointed at it (see
:meth:`StandinDiscord.patch_client_urls`): ``discord.http.Route.BASE`` (REST, interaction callbacks
and webhook follow-ups) and ``discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY`` (websocket).

What it speaks (Discord API docs, "Gateway" and "Interactions > Receiving and Responding"):

- gateway ``/gw``: HELLO (op 10), IDENTIFY (op 2) or RESUME (op 6), READY, GUILD_CREATE with the
  guild's channels, roles and members, heartbeat ACKs (op 11), then the events a test injects
  (INTERACTION_CREATE, MESSAGE_CREATE) plus THREAD_CREATE and MESSAGE_CREATE echoes of what the
  bot itself creates, as Discord does;
- REST under ``/api/v10``: the routes a slash-command bot uses (see :meth:`_routes`); JSON bodies
  are answered with ``Content-Type: application/json`` exactly (discord.py decodes nothing else);
- CDN ``/attachments/{channel}/{attachment}/{filename}``: attachment bytes from a media folder.

Everything the bot sends is recorded in :attr:`StandinDiscord.calls` with a ``time.monotonic()``
timestamp; messages keep their edit history, and uploaded files keep their bytes.

Components V2 (Discord API docs, "Component Reference"): a message sent or edited with
``components`` is checked like Discord does, and a violation is answered 400 / code 50035 "Invalid
Form Body" (see :func:`component_problem`): more than 40 components, more than 4,000 characters of
text display, a gallery of 0 or more than 10 items, top-level layout components without the flag
``1 << 15``, ``content`` or embeds with that flag, a reference ``attachment://name`` to no uploaded
file. :attr:`StoredMessage.text` is what a user reads (content, or the text displays), and every
version is kept in :attr:`StoredMessage.history`.

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
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

DISCORD_EPOCH_MS = 1420070400000
JSON = "application/json"
IS_COMPONENTS_V2 = 1 << 15
LAYOUT_TYPES = {9, 10, 11, 12, 13, 14, 17}  # section, text display, thumbnail, gallery, file, separator, container
MAX_COMPONENTS = 40
MAX_TEXT = 4000


SUPPRESS_EMBEDS = 1 << 2
"""Message flag: no link previews (discord.com/developers/docs/resources/message#message-object-message-flags)."""


def walk_components(components: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every component, nested ones included (container children, action row buttons, section
    accessories), depth first."""
    out: list[dict[str, Any]] = []
    for c in components or []:
        out.append(c)
        out += walk_components(c.get("components") or [])
        if isinstance(c.get("accessory"), dict):
            out += walk_components([c["accessory"]])
    return out


def components_text(components: list[dict[str, Any]]) -> str:
    """The text a user reads in a components message: its text displays, in order."""
    return "\n".join(c.get("content") or "" for c in walk_components(components) if c.get("type") == 10)


def component_problem(body: dict[str, Any], flags: int, filenames: set[str]) -> str | None:
    """Why Discord would refuse this message body (400, "Invalid Form Body"), or ``None``.

    Rules (Discord API docs, "Component Reference" and "Create Message"): at most 40 components in
    all; text displays at most 4,000 characters in all; media gallery 1-10 items, alt text up to
    256; action rows 1-5 components; ``custom_id`` up to 100; layout components only with the flag
    ``IS_COMPONENTS_V2``; with the flag, no ``content`` and no embeds; ``attachment://name``
    references an attachment of the message.
    """
    comps = body.get("components")
    v2 = bool(flags & IS_COMPONENTS_V2)
    if v2 and (body.get("content") or body.get("embeds")):
        return "content and embeds cannot be used with the IS_COMPONENTS_V2 flag"
    if comps is None:
        return None
    every = walk_components(comps)
    if len(every) > MAX_COMPONENTS:
        return f"too many components ({len(every)} > {MAX_COMPONENTS})"
    if not v2 and any(c.get("type") != 1 for c in comps):
        return "layout components need the IS_COMPONENTS_V2 flag"
    text = sum(len(c.get("content") or "") for c in every if c.get("type") == 10)
    if text > MAX_TEXT:
        return f"text displays have {text} characters (> {MAX_TEXT})"
    for c in every:
        kind = c.get("type")
        if kind == 10 and not (c.get("content") or "").strip():
            return "a text display needs content"
        if kind == 1 and not 1 <= len(c.get("components") or []) <= 5:
            return "an action row holds 1 to 5 components"
        if kind == 2 and len(c.get("custom_id") or "") > 100:
            return "custom_id is longer than 100 characters"
        if kind == 12:
            items = c.get("items") or []
            if not 1 <= len(items) <= 10:
                return f"a media gallery holds 1 to 10 items, not {len(items)}"
            if any(len(i.get("description") or "") > 256 for i in items):
                return "a media gallery item's description is longer than 256 characters"
        urls = [i["media"]["url"] for i in c.get("items") or []] if kind == 12 else (
            [c["file"]["url"]] if kind == 13 else [])
        for url in urls:
            if url.startswith("attachment://") and url[len("attachment://"):] not in filenames:
                return f"{url} refers to no attachment of this message"
    return None

# Permission bits (Discord API docs, "Permissions > Bitwise Permission Flags").
VIEW_CHANNEL = 1 << 10
SEND_MESSAGES = 1 << 11
ATTACH_FILES = 1 << 15
READ_MESSAGE_HISTORY = 1 << 16
CREATE_PUBLIC_THREADS = 1 << 35
SEND_MESSAGES_IN_THREADS = 1 << 38
BOT_PERMISSIONS = (
    VIEW_CHANNEL | SEND_MESSAGES | ATTACH_FILES | READ_MESSAGE_HISTORY | CREATE_PUBLIC_THREADS | SEND_MESSAGES_IN_THREADS
)


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat()


@dataclass
class Call:
    """One request the bot made: when (``time.monotonic()``, seconds), what, and its body."""

    t: float
    method: str
    path: str
    json: Any = None
    files: list["UploadedFile"] = field(default_factory=list)
    query: dict[str, str] = field(default_factory=dict)


@dataclass
class UploadedFile:
    """A file the bot uploaded (multipart ``files[n]``)."""

    filename: str
    content_type: str | None
    data: bytes


@dataclass
class StoredMessage:
    """A message as the stand-in keeps it: current payload, edit history, uploaded files."""

    payload: dict[str, Any]
    files: list[UploadedFile] = field(default_factory=list)
    history: list[str] = field(default_factory=list)  # every content the message had, oldest first
    edit_times: list[float] = field(default_factory=list)  # time.monotonic() of each PATCH
    created: float = field(default_factory=time.monotonic)
    deleted: bool = False

    @property
    def id(self) -> int:
        return int(self.payload["id"])

    @property
    def channel_id(self) -> int:
        return int(self.payload["channel_id"])

    @property
    def content(self) -> str:
        return self.payload.get("content") or ""

    @property
    def flags(self) -> int:
        return int(self.payload.get("flags") or 0)

    @property
    def components(self) -> list[dict[str, Any]]:
        return self.payload.get("components") or []

    @property
    def previews(self) -> list[str]:
        """The links Discord would fetch to show link previews (embeds) under the message: every
        http(s) link of its content, unless the message has the ``SUPPRESS_EMBEDS`` flag (1 << 2)."""
        if self.flags & SUPPRESS_EMBEDS:
            return []
        return re.findall(r"https?://[^\s<>()\[\]]+", self.content)

    @property
    def text(self) -> str:
        """What a user reads: the content, or the text displays of a components message."""
        return components_text(self.components) if self.flags & IS_COMPONENTS_V2 else self.content

    def buttons(self) -> list[dict[str, Any]]:
        """The buttons a user can press now."""
        return [c for c in walk_components(self.components) if c.get("type") == 2]

    def gallery(self) -> list[tuple["UploadedFile", str | None]]:
        """The media gallery items as (uploaded file, alt text), in order."""
        by_name = {f.filename: f for f in self.files}
        out = []
        for c in walk_components(self.components):
            for item in c.get("items") or [] if c.get("type") == 12 else []:
                name = item["media"]["url"].removeprefix("attachment://")
                out.append((by_name[name], item.get("description")))
        return out

    def file_components(self) -> list["UploadedFile"]:
        """The files shown by file components, in order."""
        by_name = {f.filename: f for f in self.files}
        return [by_name[c["file"]["url"].removeprefix("attachment://")]
                for c in walk_components(self.components) if c.get("type") == 13]


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
        self.user = self._user(self.snowflake(), "alice")
        self.user2 = self._user(self.snowflake(), "bob")
        self.other_bot = self._user(self.snowflake(), "otherbot", bot=True)
        self.bot_user = self._user(self.bot_id, "HuggingGPT", bot=True)
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
        self.injected: dict[int, float] = {}
        self.identifies = 0
        self.resumes = 0
        self.forbid_threads = False
        self.attachment_size_limit = 10 * 1024 * 1024
        self.app_permissions = BOT_PERMISSIONS
        self.token_ttl: float | None = None  # seconds an interaction token works (Discord: 900)
        self.refuse_intents = False  # close the gateway with 4014 "Disallowed intent(s)" on IDENTIFY
        self._interactions: dict[str, dict[str, Any]] = {}  # token → {id, channel_id, original}
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
        app.add_routes(self._routes())
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

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
    def _user(uid: int, name: str, *, bot: bool = False) -> dict[str, Any]:
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
            "timestamp": _now_iso(),
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
        prompt: str,
        *,
        files: list[str] | None = None,
        attachments: list[dict[str, Any]] | None = None,
        user: dict[str, Any] | None = None,
        roles: list[int] | None = None,
        channel_id: int | None = None,
        command: str = "ask",
        interaction_id: int | None = None,
    ) -> dict[str, Any]:
        """An APPLICATION_COMMAND interaction for ``/command prompt:<prompt> file1..fileN``."""
        user = user or self.user
        cid = channel_id or self.channel_id
        channel = self.channels[cid]
        iid = interaction_id or self.snowflake()
        token = f"itoken-{iid}"
        atts = list(attachments or []) + [self.attachment(f, channel_id=cid) for f in files or []]
        options: list[dict[str, Any]] = [{"name": "prompt", "type": 3, "value": prompt}]
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
        self._interactions.setdefault(payload["token"], {"id": int(payload["id"]), "channel_id": int(payload["channel_id"]),
                                                         "original": None})
        self.injected.setdefault(int(payload["id"]), time.monotonic())
        await self.dispatch("INTERACTION_CREATE", payload, everywhere=everywhere)
        return payload

    async def interact(self, prompt: str, **kw: Any) -> dict[str, Any]:
        """Build and deliver an ``/ask`` interaction; returns its payload."""
        return await self.send_interaction(self.interaction_payload(prompt, **kw))

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
                    permissions: int = BOT_PERMISSIONS) -> int:
        """A user presses the button ``custom_id`` of a message (INTERACTION_CREATE, type 3
        MESSAGE_COMPONENT); ``permissions`` are the member's in that channel. Returns the
        interaction id."""
        user = user or self.user
        msg = self.messages[message_id]
        if custom_id not in [b.get("custom_id") for b in msg.buttons()]:
            raise AssertionError(f"message {message_id} shows no button {custom_id!r}: a user cannot press it")
        iid = self.snowflake()
        token = f"itoken-{iid}"
        channel = self.channels[msg.channel_id]
        payload: dict[str, Any] = {
            "id": str(iid), "application_id": str(self.app_id), "type": 3, "token": token, "version": 1,
            "data": {"custom_id": custom_id, "component_type": 2}, "message": msg.payload,
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
        self._interactions[token] = {"id": iid, "channel_id": msg.channel_id, "original": None, "message": message_id}
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
        thread = self._thread_payload(channel_id or self.channel_id, name, owner_id=int(self.user["id"]))
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

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # ------------------------------------------------------------------------------------------
    # REST

    def _routes(self) -> list[web.AbstractRouteDef]:
        a = "/api/v10"
        return [
            web.get("/gw", self._gateway),
            web.get("/attachments/{cid}/{aid}/{filename}", self._cdn),
            web.get(f"{a}/users/@me", self._me),
            web.get(f"{a}/oauth2/applications/@me", self._appinfo),
            web.get(f"{a}/gateway", self._gateway_info),
            web.get(f"{a}/gateway/bot", self._gateway_info),
            web.put(f"{a}/applications/{{app}}/commands", self._sync_commands),
            web.put(f"{a}/applications/{{app}}/guilds/{{gid}}/commands", self._sync_commands),
            web.get(f"{a}/applications/{{app}}/commands", self._get_commands),
            web.post(f"{a}/interactions/{{iid}}/{{token}}/callback", self._callback),
            web.get(f"{a}/webhooks/{{app}}/{{token}}/messages/{{mid}}", self._webhook_get),
            web.patch(f"{a}/webhooks/{{app}}/{{token}}/messages/{{mid}}", self._webhook_edit),
            web.delete(f"{a}/webhooks/{{app}}/{{token}}/messages/{{mid}}", self._webhook_delete),
            web.post(f"{a}/webhooks/{{app}}/{{token}}", self._webhook_followup),
            web.get(f"{a}/channels/{{cid}}", self._get_channel),
            web.get(f"{a}/channels/{{cid}}/messages/{{mid}}", self._get_message),
            web.post(f"{a}/channels/{{cid}}/messages", self._post_message),
            web.patch(f"{a}/channels/{{cid}}/messages/{{mid}}", self._edit_message),
            web.delete(f"{a}/channels/{{cid}}/messages/{{mid}}", self._delete_message),
            web.post(f"{a}/channels/{{cid}}/messages/{{mid}}/threads", self._thread_from_message),
            web.post(f"{a}/channels/{{cid}}/threads", self._thread_without_message),
            web.post(f"{a}/channels/{{cid}}/typing", self._typing),
            web.put(f"{a}/channels/{{cid}}/thread-members/@me", self._no_content),
            web.get(f"{a}/guilds/{{gid}}", self._get_guild),
            web.post(f"{a}/users/@me/channels", self._open_dm),
        ]

    @staticmethod
    def _json(data: Any, status: int = 200) -> web.Response:
        # discord.py decodes JSON only when the Content-Type is exactly application/json.
        return web.Response(status=status, body=json.dumps(data).encode(), headers={"Content-Type": JSON})

    def _error(self, status: int, code: int, message: str) -> web.Response:
        return self._json({"code": code, "message": message}, status)

    async def _record(self, request: web.Request) -> Call:
        body: Any = None
        files: list[UploadedFile] = []
        ctype = request.headers.get("Content-Type", "")
        if ctype.startswith("multipart/"):
            reader = await request.multipart()
            async for part in reader:
                data = await part.read()  # type: ignore[union-attr]
                if part.name == "payload_json":  # type: ignore[union-attr]
                    body = json.loads(data)
                else:
                    files.append(UploadedFile(part.filename or "", part.headers.get("Content-Type"), bytes(data)))  # type: ignore[union-attr]
        elif request.can_read_body:
            raw = await request.read()
            body = json.loads(raw) if raw else None
        call = Call(time.monotonic(), request.method, request.path, body, files, dict(request.query))
        self.calls.append(call)
        return call

    def _auth_ok(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bot {self.token}"

    async def _me(self, request: web.Request) -> web.Response:
        await self._record(request)
        if not self._auth_ok(request):
            return self._error(401, 0, "401: Unauthorized")
        return self._json({**self.bot_user, "verified": True, "mfa_enabled": False, "flags": 0})

    async def _appinfo(self, request: web.Request) -> web.Response:
        await self._record(request)
        return self._json({
            "id": str(self.app_id), "name": "HuggingGPT", "icon": None, "description": "", "bot_public": True,
            "bot_require_code_grant": False, "owner": self.user, "verify_key": "00", "flags": 0,
            "summary": "", "team": None, "rpc_origins": [],
        })

    async def _gateway_info(self, request: web.Request) -> web.Response:
        return self._json({"url": self.gateway_url, "shards": self.shard_count,
                           "session_start_limit": {"total": 1000, "remaining": 1000, "reset_after": 0,
                                                   "max_concurrency": 1}})

    async def _sync_commands(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        self.command_syncs += 1
        self.commands = [{**c, "id": str(self.snowflake()), "application_id": str(self.app_id), "version": "1",
                          "default_member_permissions": c.get("default_member_permissions")} for c in call.json]
        await self._notify()
        return self._json(self.commands)

    async def _get_commands(self, request: web.Request) -> web.Response:
        return self._json(self.commands)

    async def _cdn(self, request: web.Request) -> web.Response:
        name = request.match_info["filename"]
        path = (self.media_dir / name).resolve()
        if path.parent != self.media_dir.resolve() or not path.is_file():
            return web.Response(status=404, text="not found")
        return web.Response(body=path.read_bytes(), headers={"Content-Type": "application/octet-stream"})

    async def _callback(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        iid = int(request.match_info["iid"])
        token = request.match_info["token"]
        info = self._interactions.get(token)
        if info is None or info["id"] != iid:
            return self._error(404, 10062, "Unknown interaction")
        if iid in self.callbacks:
            return self._error(400, 40060, "Interaction has already been acknowledged.")
        body = call.json or {}
        kind = body.get("type")
        data = body.get("data") or {}
        flags = int(data.get("flags") or 0)
        if kind in (6, 7):  # a component interaction: (deferred) update of the message it came from
            if info.get("message") is None:
                return self._error(400, 50035, "Invalid Form Body: not a component interaction")
            self.callbacks[iid] = body
            msg = self.messages[info["message"]]
            info["original"] = msg.id
            if kind == 7:
                problem = component_problem(data, msg.flags | flags, {f.filename for f in msg.files})
                if problem:
                    return self._error(400, 50035, f"Invalid Form Body: {problem}")
                self._apply_body(msg, data)
                msg.history.append(msg.text)
                msg.edit_times.append(call.t)
            await self._notify()
            return self._json({"interaction": {"id": str(iid), "type": 3}, "resource": {"type": kind}})
        problem = component_problem(data, flags, {f.filename for f in call.files})
        if problem:
            return self._error(400, 50035, f"Invalid Form Body: {problem}")
        self.callbacks[iid] = body
        if kind == 5:
            self.deferrals[iid] = call.t
            flags |= 128  # LOADING
        content = data.get("content") or ""
        msg = self.message_payload(info["channel_id"], self.bot_user, content, flags=flags, message_type=20,
                                   webhook_id=self.app_id, interaction=self._metadata(iid))
        stored = StoredMessage(msg, files=call.files)
        self._apply_body(stored, data)
        stored.history.append(stored.text)
        self.messages[int(msg["id"])] = stored
        info["original"] = int(msg["id"])
        await self._notify()
        return self._json({
            "interaction": {"id": str(iid), "type": 2, "response_message_id": msg["id"],
                            "response_message_loading": kind == 5, "response_message_ephemeral": bool(flags & 64)},
            "resource": {"type": kind, "message": msg},
        })

    def _metadata(self, iid: int) -> dict[str, Any]:
        info = next((i for i in self._interactions.values() if i["id"] == iid), None)
        gid = (self.guild_of(info["channel_id"]) if info else None) or self.guild_id
        return {"id": str(iid), "type": 2, "user": self.user, "authorizing_integration_owners": {"0": str(gid)}}

    def _token_dead(self, token: str) -> bool:
        info = self._interactions.get(token)
        return info is None or (self.token_ttl is not None and time.monotonic() - self.injected[info["id"]] > self.token_ttl)

    def _original(self, token: str, mid: str) -> StoredMessage | None:
        info = self._interactions.get(token)
        if info is None or self._token_dead(token):
            return None
        target = info["original"] if mid == "@original" else int(mid)
        return self.messages.get(target) if target else None

    async def _webhook_get(self, request: web.Request) -> web.Response:
        await self._record(request)
        msg = self._original(request.match_info["token"], request.match_info["mid"])
        if msg is None or msg.deleted:
            return self._error(404, 10008, "Unknown Message")
        return self._json(msg.payload)

    async def _webhook_edit(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        if self._token_dead(request.match_info["token"]):
            return self._error(401, 50027, "Invalid Webhook Token")
        msg = self._original(request.match_info["token"], request.match_info["mid"])
        if msg is None or msg.deleted:
            return self._error(404, 10008, "Unknown Message")
        return await self._apply_edit(msg, call)

    async def _webhook_delete(self, request: web.Request) -> web.Response:
        await self._record(request)
        msg = self._original(request.match_info["token"], request.match_info["mid"])
        if msg is None or msg.deleted:
            return self._error(404, 10008, "Unknown Message")
        msg.deleted = True
        await self._notify()
        return web.Response(status=204)

    async def _webhook_followup(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        token = request.match_info["token"]
        info = self._interactions.get(token)
        if info is None or self._token_dead(token):
            return self._error(401, 50027, "Invalid Webhook Token")
        body = call.json or {}
        too_big = self._check_sizes(call.files)
        if too_big is not None:
            return too_big
        flags = int(body.get("flags") or 0)
        problem = component_problem(body, flags, {f.filename for f in call.files})
        if problem:
            return self._error(400, 50035, f"Invalid Form Body: {problem}")
        msg = self.message_payload(info["channel_id"], self.bot_user, body.get("content") or "",
                                   flags=flags, webhook_id=self.app_id,
                                   interaction=self._metadata(info["id"]))
        stored = StoredMessage(msg, files=call.files)
        self._apply_body(stored, body)
        stored.history.append(stored.text)
        self.messages[int(msg["id"])] = stored
        await self._notify()
        return self._json(msg)

    def _check_sizes(self, files: list[UploadedFile]) -> web.Response | None:
        for f in files:
            if len(f.data) > self.attachment_size_limit:
                return self._error(413, 40005, "Request entity too large")
        return None

    @staticmethod
    def _apply_body(msg: StoredMessage, body: dict[str, Any]) -> None:
        """Apply the fields a create/edit body sets (content, components, flags)."""
        if "content" in body:
            msg.payload["content"] = body["content"] or ""
        if "components" in body:
            msg.payload["components"] = body["components"] or []
        if "flags" in body and body["flags"] is not None:
            # the components flag cannot be removed once set (Discord API docs, "Edit Message")
            msg.payload["flags"] = int(body["flags"]) | (msg.flags & IS_COMPONENTS_V2)

    async def _apply_edit(self, msg: StoredMessage, call: Call) -> web.Response:
        body = call.json or {}
        flags = int(body.get("flags") or 0) | msg.flags
        names = {f.filename for f in (call.files or msg.files)}
        if flags & IS_COMPONENTS_V2 and "content" not in body and msg.content:
            body = {**body, "content": msg.content}  # Discord keeps the content: refused below
        problem = component_problem(body, flags, names)
        if problem:
            return self._error(400, 50035, f"Invalid Form Body: {problem}")
        self._apply_body(msg, body)
        msg.payload["flags"] = msg.flags & ~128  # no longer loading
        msg.payload["edited_timestamp"] = _now_iso()
        if call.files:
            too_big = self._check_sizes(call.files)
            if too_big is not None:
                return too_big
            msg.files = list(call.files)
        msg.history.append(msg.text)
        msg.edit_times.append(call.t)
        await self._notify()
        return self._json(msg.payload)

    async def _get_channel(self, request: web.Request) -> web.Response:
        await self._record(request)
        ch = self.channels.get(int(request.match_info["cid"]))
        return self._json(ch) if ch else self._error(404, 10003, "Unknown Channel")

    async def _get_guild(self, request: web.Request) -> web.Response:
        await self._record(request)
        gid = int(request.match_info["gid"])
        return self._json(self.guild_payload(gid)) if gid in self.guilds else self._error(404, 10004, "Unknown Guild")

    async def _get_message(self, request: web.Request) -> web.Response:
        await self._record(request)
        msg = self.messages.get(int(request.match_info["mid"]))
        return self._json(msg.payload) if msg and not msg.deleted else self._error(404, 10008, "Unknown Message")

    async def _post_message(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        cid = int(request.match_info["cid"])
        if cid not in self.channels:
            return self._error(404, 10003, "Unknown Channel")
        too_big = self._check_sizes(call.files)
        if too_big is not None:
            return too_big
        body = call.json or {}
        flags = int(body.get("flags") or 0)
        problem = component_problem(body, flags, {f.filename for f in call.files})
        if problem:
            return self._error(400, 50035, f"Invalid Form Body: {problem}")
        msg = self.message_payload(cid, self.bot_user, body.get("content") or "", flags=flags,
                                   message_type=19 if body.get("message_reference") else 0)
        msg["components"] = body.get("components") or []
        if body.get("message_reference"):
            msg["message_reference"] = body["message_reference"]
        msg["attachments"] = [
            {"id": str(self.snowflake()), "filename": f.filename, "size": len(f.data), "url": f"{self.base}/x/{f.filename}",
             "proxy_url": f"{self.base}/x/{f.filename}", "content_type": f.content_type}
            for f in call.files
        ]
        stored = StoredMessage(msg, files=call.files)
        stored.history.append(stored.text)
        self.messages[int(msg["id"])] = stored
        ch = self.channels[cid]
        if ch["type"] == 11:
            ch["message_count"] += 1
        await self._notify()
        # Discord echoes the bot's own messages over the gateway; the bot must ignore them.
        await self.dispatch("MESSAGE_CREATE", msg)
        return self._json(msg)

    async def _edit_message(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        msg = self.messages.get(int(request.match_info["mid"]))
        if msg is None or msg.deleted:
            return self._error(404, 10008, "Unknown Message")
        return await self._apply_edit(msg, call)

    async def _delete_message(self, request: web.Request) -> web.Response:
        await self._record(request)
        msg = self.messages.get(int(request.match_info["mid"]))
        if msg is None:
            return self._error(404, 10008, "Unknown Message")
        msg.deleted = True
        await self._notify()
        return web.Response(status=204)

    async def _open_dm(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        rid = str((call.json or {}).get("recipient_id"))
        user = next((u for u in (self.user, self.user2) if u["id"] == rid), None) or self._user(int(rid), "someone")
        return self._json(self.channels[self.dm_channel(user)])

    async def _typing(self, request: web.Request) -> web.Response:
        return web.Response(status=204)

    async def _no_content(self, request: web.Request) -> web.Response:
        return web.Response(status=204)

    def _thread_payload(self, parent_id: int, name: str, *, owner_id: int, thread_id: int | None = None) -> dict[str, Any]:
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
            "thread_metadata": {"archived": False, "auto_archive_duration": 1440, "archive_timestamp": _now_iso(),
                                "locked": False, "create_timestamp": _now_iso()},
            "total_message_sent": 0,
        }
        self.channels[tid] = thread
        return thread

    async def _create_thread(self, request: web.Request, message_id: int | None) -> web.Response:
        call = await self._record(request)
        cid = int(request.match_info["cid"])
        if self.forbid_threads:
            await self._notify()
            return self._error(403, 50013, "Missing Permissions")
        body = call.json or {}
        name = body.get("name") or ""
        if not 1 <= len(name) <= 100:
            return self._error(400, 50035, "Invalid Form Body: name must be between 1 and 100 in length.")
        if cid not in self.channels or self.channels[cid]["type"] != 0:
            return self._error(400, 50024, "Cannot execute action on this channel type")
        thread = self._thread_payload(cid, name, owner_id=self.bot_id, thread_id=message_id)
        if message_id is not None and message_id in self.messages:
            self.messages[message_id].payload["thread"] = thread
        await self._notify()
        await self.dispatch("THREAD_CREATE", {**thread, "newly_created": True})
        return self._json(thread, 201)

    async def _thread_from_message(self, request: web.Request) -> web.Response:
        # A thread started from a message gets the message's id (Discord API docs, "Start Thread from Message").
        return await self._create_thread(request, int(request.match_info["mid"]))

    async def _thread_without_message(self, request: web.Request) -> web.Response:
        return await self._create_thread(request, None)
