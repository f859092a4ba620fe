"""The stand-in Discord's REST API v10 and CDN (Discord API docs, "Interactions > Receiving and
Responding", "Message", "Channel"): the routes a slash-command bot uses (see
:meth:`DiscordRest.routes`), answered from and into the state of a
:class:`sandbox.discord_server.StandinDiscord`.

JSON bodies are answered with ``Content-Type: application/json`` exactly (discord.py decodes
nothing else). Every request is recorded in ``StandinDiscord.calls``; messages the bot creates
are echoed over the gateway (MESSAGE_CREATE, THREAD_CREATE) as Discord does. Component
interactions are answered with callback type 6 (deferred update), 7 (update the message) or 4 (a
new message); a command or component interaction may be answered with a modal (type 9, checked by
:func:`sandbox.discord_messages.modal_problem`, kept in ``StandinDiscord.modals``), a modal
submission may not. Commands synced with an invalid ``file_types`` are refused. Knobs read from the server: ``forbid_threads`` (403, code 50013),
``attachment_size_limit`` (413, code 40005), ``token_ttl`` (an interaction token's life, seconds).
"""

from __future__ import annotations

import json
import time
from typing import Any

from aiohttp import web

from .discord_messages import (IS_COMPONENTS_V2, JSON, Call, StoredMessage, UploadedFile, command_problem,
                               component_problem, modal_problem, now_iso)


class DiscordRest:
    """The REST handlers of one stand-in Discord.

    Args:
        discord: the :class:`sandbox.discord_server.StandinDiscord` whose guilds, channels,
            messages and interactions the handlers read and change.
    """

    def __init__(self, discord: Any) -> None:
        self.discord = discord


    def routes(self) -> list[web.AbstractRouteDef]:
        """The REST and CDN routes (the gateway route is the server's own)."""
        a = "/api/v10"
        return [
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
        self.discord.calls.append(call)
        return call

    def _auth_ok(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bot {self.discord.token}"

    async def _me(self, request: web.Request) -> web.Response:
        await self._record(request)
        if not self._auth_ok(request):
            return self._error(401, 0, "401: Unauthorized")
        return self._json({**self.discord.bot_user, "verified": True, "mfa_enabled": False, "flags": 0})

    async def _appinfo(self, request: web.Request) -> web.Response:
        await self._record(request)
        return self._json({
            "id": str(self.discord.app_id), "name": "HuggingGPT", "icon": None, "description": "", "bot_public": True,
            "bot_require_code_grant": False, "owner": self.discord.user, "verify_key": "00", "flags": 0,
            "summary": "", "team": None, "rpc_origins": [],
        })

    async def _gateway_info(self, request: web.Request) -> web.Response:
        return self._json({"url": self.discord.gateway_url, "shards": self.discord.shard_count,
                           "session_start_limit": {"total": 1000, "remaining": 1000, "reset_after": 0,
                                                   "max_concurrency": 1}})

    async def _sync_commands(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        problem = next((p for p in map(command_problem, call.json or []) if p), None)
        if problem:
            return self._error(400, 50035, f"Invalid Form Body: {problem}")
        self.discord.command_syncs += 1
        self.discord.commands = [{**c, "id": str(self.discord.snowflake()), "application_id": str(self.discord.app_id), "version": "1",
                          "default_member_permissions": c.get("default_member_permissions")} for c in call.json]
        await self.discord.notify()
        return self._json(self.discord.commands)

    async def _get_commands(self, request: web.Request) -> web.Response:
        return self._json(self.discord.commands)

    async def _cdn(self, request: web.Request) -> web.Response:
        name = request.match_info["filename"]
        path = (self.discord.media_dir / name).resolve()
        if path.parent != self.discord.media_dir.resolve() or not path.is_file():
            return web.Response(status=404, text="not found")
        return web.Response(body=path.read_bytes(), headers={"Content-Type": "application/octet-stream"})

    async def _callback(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        iid = int(request.match_info["iid"])
        token = request.match_info["token"]
        info = self.discord.interactions.get(token)
        if info is None or info["id"] != iid:
            return self._error(404, 10062, "Unknown interaction")
        if iid in self.discord.callbacks:
            return self._error(400, 40060, "Interaction has already been acknowledged.")
        body = call.json or {}
        kind = body.get("type")
        data = body.get("data") or {}
        flags = int(data.get("flags") or 0)
        if kind == 9:
            return await self._modal(iid, info, body)
        if kind in (6, 7):  # a component interaction: (deferred) update of the message it came from
            if info.get("message") is None:
                return self._error(400, 50035, "Invalid Form Body: not a component interaction")
            self.discord.callbacks[iid] = body
            msg = self.discord.messages[info["message"]]
            info["original"] = msg.id
            if kind == 7:
                problem = component_problem(data, msg.flags | flags, {f.filename for f in msg.files})
                if problem:
                    return self._error(400, 50035, f"Invalid Form Body: {problem}")
                self._apply_body(msg, data)
                msg.history.append(msg.text)
                msg.edit_times.append(call.t)
            await self.discord.notify()
            return self._json({"interaction": {"id": str(iid), "type": 3}, "resource": {"type": kind}})
        problem = component_problem(data, flags, {f.filename for f in call.files})
        if problem:
            return self._error(400, 50035, f"Invalid Form Body: {problem}")
        self.discord.callbacks[iid] = body
        if kind == 5:
            self.discord.deferrals[iid] = call.t
            flags |= 128  # LOADING
        content = data.get("content") or ""
        msg = self.discord.message_payload(info["channel_id"], self.discord.bot_user, content, flags=flags, message_type=20,
                                   webhook_id=self.discord.app_id, interaction=self._metadata(iid))
        stored = StoredMessage(msg, files=call.files)
        self._apply_body(stored, data)
        stored.history.append(stored.text)
        self.discord.messages[int(msg["id"])] = stored
        info["original"] = int(msg["id"])
        await self.discord.notify()
        return self._json({
            "interaction": {"id": str(iid), "type": 2, "response_message_id": msg["id"],
                            "response_message_loading": kind == 5, "response_message_ephemeral": bool(flags & 64)},
            "resource": {"type": kind, "message": msg},
        })

    async def _modal(self, iid: int, info: dict[str, Any], body: dict[str, Any]) -> web.Response:
        """A modal as the response (callback type 9): not to a modal submission, and checked."""
        problem = "a modal submission cannot be answered with a modal" if info.get("type") == 5 else (
            modal_problem(body.get("data") or {}))
        if problem:
            return self._error(400, 50035, f"Invalid Form Body: {problem}")
        self.discord.callbacks[iid] = body
        self.discord.modals[iid] = body["data"]
        await self.discord.notify()
        return self._json({"interaction": {"id": str(iid), "type": 2}, "resource": {"type": 9}})

    def _metadata(self, iid: int) -> dict[str, Any]:
        info = next((i for i in self.discord.interactions.values() if i["id"] == iid), None)
        gid = (self.discord.guild_of(info["channel_id"]) if info else None) or self.discord.guild_id
        return {"id": str(iid), "type": 2, "user": self.discord.user, "authorizing_integration_owners": {"0": str(gid)}}

    def _token_dead(self, token: str) -> bool:
        info = self.discord.interactions.get(token)
        return info is None or (self.discord.token_ttl is not None and time.monotonic() - self.discord.injected[info["id"]] > self.discord.token_ttl)

    def _original(self, token: str, mid: str) -> StoredMessage | None:
        info = self.discord.interactions.get(token)
        if info is None or self._token_dead(token):
            return None
        target = info["original"] if mid == "@original" else int(mid)
        return self.discord.messages.get(target) if target else None

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
        await self.discord.notify()
        return web.Response(status=204)

    async def _webhook_followup(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        token = request.match_info["token"]
        info = self.discord.interactions.get(token)
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
        msg = self.discord.message_payload(info["channel_id"], self.discord.bot_user, body.get("content") or "",
                                   flags=flags, webhook_id=self.discord.app_id,
                                   interaction=self._metadata(info["id"]))
        stored = StoredMessage(msg, files=call.files)
        self._apply_body(stored, body)
        stored.history.append(stored.text)
        self.discord.messages[int(msg["id"])] = stored
        await self.discord.notify()
        return self._json(msg)

    def _check_sizes(self, files: list[UploadedFile]) -> web.Response | None:
        for f in files:
            if len(f.data) > self.discord.attachment_size_limit:
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
        msg.payload["edited_timestamp"] = now_iso()
        if call.files:
            too_big = self._check_sizes(call.files)
            if too_big is not None:
                return too_big
            msg.files = list(call.files)
        msg.history.append(msg.text)
        msg.edit_times.append(call.t)
        await self.discord.notify()
        return self._json(msg.payload)

    async def _get_channel(self, request: web.Request) -> web.Response:
        await self._record(request)
        ch = self.discord.channels.get(int(request.match_info["cid"]))
        return self._json(ch) if ch else self._error(404, 10003, "Unknown Channel")

    async def _get_guild(self, request: web.Request) -> web.Response:
        await self._record(request)
        gid = int(request.match_info["gid"])
        return self._json(self.discord.guild_payload(gid)) if gid in self.discord.guilds else self._error(404, 10004, "Unknown Guild")

    async def _get_message(self, request: web.Request) -> web.Response:
        await self._record(request)
        msg = self.discord.messages.get(int(request.match_info["mid"]))
        return self._json(msg.payload) if msg and not msg.deleted else self._error(404, 10008, "Unknown Message")

    async def _post_message(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        cid = int(request.match_info["cid"])
        if cid not in self.discord.channels:
            return self._error(404, 10003, "Unknown Channel")
        too_big = self._check_sizes(call.files)
        if too_big is not None:
            return too_big
        body = call.json or {}
        flags = int(body.get("flags") or 0)
        problem = component_problem(body, flags, {f.filename for f in call.files})
        if problem:
            return self._error(400, 50035, f"Invalid Form Body: {problem}")
        msg = self.discord.message_payload(cid, self.discord.bot_user, body.get("content") or "", flags=flags,
                                   message_type=19 if body.get("message_reference") else 0)
        msg["components"] = body.get("components") or []
        if body.get("message_reference"):
            msg["message_reference"] = body["message_reference"]
        msg["attachments"] = [
            {"id": str(self.discord.snowflake()), "filename": f.filename, "size": len(f.data), "url": f"{self.discord.base}/x/{f.filename}",
             "proxy_url": f"{self.discord.base}/x/{f.filename}", "content_type": f.content_type}
            for f in call.files
        ]
        stored = StoredMessage(msg, files=call.files)
        stored.history.append(stored.text)
        self.discord.messages[int(msg["id"])] = stored
        ch = self.discord.channels[cid]
        if ch["type"] == 11:
            ch["message_count"] += 1
        await self.discord.notify()
        # Discord echoes the bot's own messages over the gateway; the bot must ignore them.
        await self.discord.dispatch("MESSAGE_CREATE", msg)
        return self._json(msg)

    async def _edit_message(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        msg = self.discord.messages.get(int(request.match_info["mid"]))
        if msg is None or msg.deleted:
            return self._error(404, 10008, "Unknown Message")
        return await self._apply_edit(msg, call)

    async def _delete_message(self, request: web.Request) -> web.Response:
        await self._record(request)
        msg = self.discord.messages.get(int(request.match_info["mid"]))
        if msg is None:
            return self._error(404, 10008, "Unknown Message")
        msg.deleted = True
        await self.discord.notify()
        return web.Response(status=204)

    async def _open_dm(self, request: web.Request) -> web.Response:
        call = await self._record(request)
        rid = str((call.json or {}).get("recipient_id"))
        user = next((u for u in (self.discord.user, self.discord.user2) if u["id"] == rid), None) or self.discord.user_payload(int(rid), "someone")
        return self._json(self.discord.channels[self.discord.dm_channel(user)])

    async def _typing(self, request: web.Request) -> web.Response:
        return web.Response(status=204)

    async def _no_content(self, request: web.Request) -> web.Response:
        return web.Response(status=204)

    async def _create_thread(self, request: web.Request, message_id: int | None) -> web.Response:
        call = await self._record(request)
        cid = int(request.match_info["cid"])
        if self.discord.forbid_threads:
            await self.discord.notify()
            return self._error(403, 50013, "Missing Permissions")
        body = call.json or {}
        name = body.get("name") or ""
        if not 1 <= len(name) <= 100:
            return self._error(400, 50035, "Invalid Form Body: name must be between 1 and 100 in length.")
        if cid not in self.discord.channels or self.discord.channels[cid]["type"] != 0:
            return self._error(400, 50024, "Cannot execute action on this channel type")
        thread = self.discord.thread_payload(cid, name, owner_id=self.discord.bot_id, thread_id=message_id)
        if message_id is not None and message_id in self.discord.messages:
            self.discord.messages[message_id].payload["thread"] = thread
        await self.discord.notify()
        await self.discord.dispatch("THREAD_CREATE", {**thread, "newly_created": True})
        return self._json(thread, 201)

    async def _thread_from_message(self, request: web.Request) -> web.Response:
        # A thread started from a message gets the message's id (Discord API docs, "Start Thread from Message").
        return await self._create_thread(request, int(request.match_info["mid"]))

    async def _thread_without_message(self, request: web.Request) -> web.Response:
        return await self._create_thread(request, None)
