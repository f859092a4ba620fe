"""A stand-in Slack on 127.0.0.1 that speaks the real wire formats and records what a bot does.

It serves the Web API methods our bot uses (``auth.test``, ``chat.postMessage``, ``chat.update``,
``conversations.replies``, ``files.getUploadURLExternal``, the upload URL,
``files.completeUploadExternal``, ``apps.connections.open``), ``url_private`` file downloads that
demand the bot token (else, like Slack, a 200 HTML login page), and a Socket Mode websocket.

Use::

    async with SlackStandIn() as slack:
        client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
        ...
        slack.thread("C1", ts)  # what a user sees in that thread

Rules enforced like Slack (docs.slack.dev/reference/methods): bearer token checked
(``invalid_auth``), scopes checked (``missing_scope`` with ``needed``), message text over 4000
characters refused (``msg_too_long``), ``chat.update`` limited per minute (``ratelimited``, 429 with
``Retry-After``).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from aiohttp import WSMsgType, web

from . import serve_loopback

ALL_SCOPES = frozenset(
    {
        "app_mentions:read", "assistant:write", "chat:write", "files:read", "files:write", "channels:history",
        "groups:history", "im:history", "mpim:history", "im:read", "channels:read",
    }
)

# method -> scope the method needs (docs.slack.dev, each method's "Required scopes").
METHOD_SCOPES = {
    "chat.postMessage": "chat:write",
    "chat.update": "chat:write",
    "chat.delete": "chat:write",
    "conversations.replies": "channels:history",
    "files.getUploadURLExternal": "files:write",
    "files.completeUploadExternal": "files:write",
    "chat.startStream": "chat:write",
    "chat.appendStream": "chat:write",
    "chat.stopStream": "chat:write",
    "chat.postEphemeral": "chat:write",
    "assistant.threads.setStatus": "chat:write",  # or assistant:write (docs.slack.dev changelog 2026-03-05)
    "assistant.threads.setSuggestedPrompts": "assistant:write",
    "auth.test": "",
}

MARKDOWN_TEXT_LIMIT = 12_000
"""Characters of ``markdown_text`` per streaming call (docs.slack.dev, chat.appendStream)."""
TASK_STATUSES = ("pending", "in_progress", "complete", "error")
"""``task_update`` chunk statuses (docs.slack.dev, text streaming)."""

LOGIN_PAGE = b"<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in to your workspace</body></html>"


def sign(secret: str, timestamp: str, body: str) -> str:
    """``X-Slack-Signature`` v0 for ``body`` (api.slack.com/authentication/verifying-requests-from-slack)."""
    base = f"v0:{timestamp}:{body}".encode()
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def signed_headers(secret: str, body: str, retry_num: int | None = None) -> dict[str, str]:
    """Headers of an Events API delivery of ``body`` signed now; ``retry_num`` marks a Slack retry."""
    ts = str(int(time.time()))
    headers = {"Content-Type": "application/json", "X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sign(secret, ts, body)}
    if retry_num is not None:
        headers["X-Slack-Retry-Num"] = str(retry_num)
        headers["X-Slack-Retry-Reason"] = "http_timeout"
    return headers


@dataclass
class Message:
    channel: str
    ts: str
    text: str
    user: str
    thread_ts: str | None = None
    bot_id: str | None = None
    files: list[dict[str, Any]] = field(default_factory=list)
    edits: list[tuple[float, str]] = field(default_factory=list)  # (time.monotonic(), text)
    posted_at: float = 0.0
    blocks: list[dict[str, Any]] = field(default_factory=list)
    streaming: bool = False  # a chat stream still open (chat.startStream, before chat.stopStream)
    display_mode: str | None = None
    plan_title: str | None = None
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)  # task card id -> its latest fields
    task_updates: list[tuple[float, str, str]] = field(default_factory=list)  # (time.monotonic(), id, status)
    appends: int = 0
    unfurl_off: bool = False  # posted with unfurl_links=false and unfurl_media=false

    @property
    def previews(self) -> list[str]:
        """The links Slack would fetch to unfurl under the message: every http(s) link of its text,
        unless it was posted with ``unfurl_links`` and ``unfurl_media`` both false."""
        if self.unfurl_off:
            return []
        return re.findall(r"https?://[^\s<>|()\[\]]+", self.text)


def _no_unfurls(args: dict[str, Any]) -> bool:
    """Whether a call's arguments turn both kinds of unfurls off (JSON booleans or form strings)."""
    return all(str(args.get(k)).lower() in ("false", "0") for k in ("unfurl_links", "unfurl_media"))


@dataclass
class StoredFile:
    id: str
    name: str
    mimetype: str
    data: bytes | None = None
    title: str | None = None
    channel: str | None = None
    thread_ts: str | None = None
    serve_login_page: bool = False
    uploaded_by_bot: bool = False


def ok(**fields: Any) -> web.Response:
    """A Web API success: ``{"ok": true, ...fields}``."""
    return web.json_response({"ok": True, **fields})


def err(code: str, status: int = 200, **fields: Any) -> web.Response:
    """A Web API error: ``{"ok": false, "error": code, ...fields}`` (HTTP 200 unless ``status``)."""
    return web.json_response({"ok": False, "error": code, **fields}, status=status)


def chunk_ok(chunk: dict[str, Any]) -> bool:
    """Whether a streaming chunk is one of the documented types, with its required fields."""
    kind = chunk.get("type")
    if kind == "task_update":
        return bool(chunk.get("id") and chunk.get("title")) and chunk.get("status") in TASK_STATUSES
    if kind == "plan_update":
        return bool(chunk.get("title"))
    return kind in ("markdown_text", "blocks")


class SlackStandIn:
    """The stand-in server. Attributes of interest to tests:

    Attributes:
        messages: every message by ``(channel, ts)``, users' and the bot's.
        files: uploaded and user files by id.
        calls: ``(method, args)`` for each Web API call, in order.
        peers: the client ``(host, port)`` of each Web API call, in order (calls over one
            connection share it).
        acks: Socket Mode ``envelope_id`` -> seconds between sending the envelope and the ack.
        scopes: the scopes the bot token has (remove one to test ``missing_scope``).
        update_limit_per_minute: ``chat.update`` calls allowed per minute per message before 429.
    """

    def __init__(
        self,
        *,
        bot_token: str = "xoxb-test-token",
        app_token: str = "xapp-test-token",
        team_id: str = "T0TEAM",
        bot_user_id: str = "U0BOT",
        bot_id: str = "B0BOT",
    ) -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.team_id = team_id
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.scopes: set[str] = set(ALL_SCOPES)
        self.update_limit_per_minute = 50
        self.messages: dict[tuple[str, str], Message] = {}
        self.deleted: list[Message] = []  # messages removed with chat.delete
        self.files: dict[str, StoredFile] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.peers: list[Any] = []  # the client address of each Web API call (one per connection)
        self.acks: dict[str, float] = {}
        self.fail_methods: dict[str, str] = {}  # method -> error code to answer on every call
        self.ratelimit_once: set[str] = set()  # methods answered once with 429 + Retry-After: 0
        self.close_streams_after: int | None = None  # appends a stream takes before the server closes it
        self.statuses: list[tuple[float, str, str, str]] = []  # assistant.threads.setStatus: (time, channel, thread, status)
        self.ephemeral: list[dict[str, Any]] = []  # chat.postEphemeral arguments, in order
        self.suggested: dict[str, list[dict[str, str]]] = {}  # channel -> suggested prompts
        self._ts = itertools.count(1)
        self._changed = asyncio.Event()
        self._ws: list[web.WebSocketResponse] = []
        self._sent: dict[str, float] = {}
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -------------------------------------------------------------- lifecycle

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_url(self) -> str:
        """``base_url`` for ``AsyncWebClient`` (trailing slash kept)."""
        return f"{self.base}/api/"

    async def __aenter__(self) -> "SlackStandIn":
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/api/{method}", self._api)
        app.router.add_get("/api/{method}", self._api)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_get("/files-pri/{team_file}/{name}", self._download)
        app.router.add_get("/link", self._link)
        self._runner, self.port = await serve_loopback(app)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        for ws in list(self._ws):
            await ws.close()
        if self._runner:
            await self._runner.cleanup()

    # -------------------------------------------------------------- helpers for tests

    def new_ts(self) -> str:
        return f"{1700000000 + next(self._ts)}.{next(self._ts):06d}"

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
        """Wait until ``predicate()`` is truthy (re-checked after every request); return its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("condition not met; calls so far: " + ", ".join(m for m, _ in self.calls))
            try:
                await asyncio.wait_for(self._changed.wait(), min(left, 0.2))
            except TimeoutError:
                pass

    def add_user_message(self, channel: str, text: str, *, user: str = "U1", thread_ts: str | None = None,
                         files: list[dict[str, Any]] | None = None) -> Message:
        """Record a user's message as Slack would store it; returns it (with a fresh ``ts``)."""
        ts = self.new_ts()
        msg = Message(channel, ts, text, user, thread_ts=thread_ts, files=files or [], posted_at=time.monotonic())
        self.messages[(channel, ts)] = msg
        return msg

    def add_file(self, data: bytes, name: str, mimetype: str, *, serve_login_page: bool = False) -> dict[str, Any]:
        """Store a user's file; return the file object as it appears in a message event."""
        fid = "F" + uuid.uuid4().hex[:10].upper()
        self.files[fid] = StoredFile(fid, name, mimetype, data, serve_login_page=serve_login_page)
        url = f"{self.base}/files-pri/{self.team_id}-{fid}/{name}"
        return {
            "id": fid, "name": name, "title": name, "mimetype": mimetype, "filetype": name.rsplit(".", 1)[-1],
            "size": len(data), "url_private": url, "url_private_download": url + "?download=1",
            "mode": "hosted", "is_external": False,
        }

    def thread(self, channel: str, thread_ts: str) -> list[Message]:
        """The thread as a user sees it: parent then replies in ``ts`` order."""
        msgs = [m for m in self.messages.values() if m.channel == channel and (m.ts == thread_ts or m.thread_ts == thread_ts)]
        return sorted(msgs, key=lambda m: float(m.ts))

    def bot_messages(self, channel: str | None = None) -> list[Message]:
        return sorted((m for m in self.messages.values() if m.user == self.bot_user_id and (channel is None or m.channel == channel)),
                      key=lambda m: float(m.ts))

    def thread_files(self, channel: str, thread_ts: str) -> list[StoredFile]:
        """Files the bot shared into that thread."""
        return [f for f in self.files.values() if f.uploaded_by_bot and f.channel == channel and f.thread_ts == thread_ts]

    def event_body(self, event: dict[str, Any], *, event_id: str | None = None) -> dict[str, Any]:
        """An Events API ``event_callback`` envelope around ``event``."""
        return {
            "token": "legacy-verification-token",
            "team_id": self.team_id,
            "api_app_id": "A0APP",
            "event": event,
            "type": "event_callback",
            "event_id": event_id or "Ev" + uuid.uuid4().hex[:10].upper(),
            "event_time": int(time.time()),
            "authorizations": [{"team_id": self.team_id, "user_id": self.bot_user_id, "is_bot": True}],
            "is_ext_shared_channel": False,
        }

    # -------------------------------------------------------------- Socket Mode

    async def socket_send(self, body: dict[str, Any], *, retry_attempt: int = 0) -> str:
        """Deliver an Events API body through the Socket Mode websocket; returns the envelope id."""
        await self.wait_for(lambda: self._ws, timeout=10)
        envelope_id = str(uuid.uuid4())
        self._sent[envelope_id] = time.perf_counter()
        await self._ws[-1].send_str(json.dumps({
            "envelope_id": envelope_id, "payload": body, "type": "events_api",
            "accepts_response_payload": False, "retry_attempt": retry_attempt, "retry_reason": "timeout" if retry_attempt else "",
        }))
        return envelope_id

    async def _link(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._ws.append(ws)
        await ws.send_str(json.dumps({"type": "hello", "num_connections": 1, "debug_info": {"host": "standin"},
                                      "connection_info": {"app_id": "A0APP"}}))
        self._notify()
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    data = json.loads(msg.data)
                    eid = data.get("envelope_id")
                    if eid in self._sent:
                        self.acks[eid] = time.perf_counter() - self._sent[eid]
                        self._notify()
        finally:
            self._ws.remove(ws)
        return ws

    # -------------------------------------------------------------- Web API

    async def _args(self, request: web.Request) -> dict[str, Any]:
        args: dict[str, Any] = dict(request.query)
        if request.can_read_body:
            ctype = request.content_type
            if ctype == "application/json":
                args.update(await request.json())
            else:
                args.update(dict(await request.post()))
        return args

    def _token(self, request: web.Request, args: dict[str, Any]) -> str | None:
        auth = request.headers.get("Authorization", "")
        return auth[7:] if auth.startswith("Bearer ") else args.get("token")

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        args = await self._args(request)
        token = self._token(request, args)
        self.calls.append((method, {k: v for k, v in args.items() if k != "token"}))
        self.peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        try:
            return await self._dispatch(method, args, token)
        finally:
            self._notify()

    async def _dispatch(self, method: str, args: dict[str, Any], token: str | None) -> web.Response:
        if method == "apps.connections.open":
            if token != self.app_token:
                return err("invalid_auth")
            return ok(url=f"ws://127.0.0.1:{self.port}/link?ticket={uuid.uuid4()}")
        if token != self.bot_token:
            return err("invalid_auth")
        if method in self.ratelimit_once:
            self.ratelimit_once.discard(method)
            return web.json_response({"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": "0"})
        if method in self.fail_methods:
            return err(self.fail_methods[method])
        needed = METHOD_SCOPES.get(method)
        if needed and needed not in self.scopes:
            return err("missing_scope", needed=needed, provided=",".join(sorted(self.scopes)))
        if method in ("chat.startStream", "chat.appendStream", "chat.stopStream"):
            return self._stream(method, args)
        handler = {
            "auth.test": self._auth_test, "chat.postMessage": self._post_message, "chat.update": self._update,
            "chat.delete": self._delete, "assistant.threads.setStatus": self._set_status,
            "assistant.threads.setSuggestedPrompts": self._suggest_prompts, "chat.postEphemeral": self._ephemeral,
            "conversations.replies": self._replies, "files.getUploadURLExternal": self._upload_url,
            "files.completeUploadExternal": self._complete_upload,
        }.get(method)
        return handler(args) if handler else err("unknown_method", status=404)

    def _auth_test(self, args: dict[str, Any]) -> web.Response:
        return ok(url="https://standin.slack.com/", team="Stand-in", user="hugginggpt", team_id=self.team_id,
                  user_id=self.bot_user_id, bot_id=self.bot_id, is_enterprise_install=False)

    def _post_message(self, args: dict[str, Any]) -> web.Response:
        text = args.get("text") or ""
        if len(text) > 4000:
            return err("msg_too_long")
        channel = args["channel"]
        ts = self.new_ts()
        blocks = args.get("blocks") or []
        msg = Message(channel, ts, text, self.bot_user_id, thread_ts=args.get("thread_ts") or None,
                      bot_id=self.bot_id, posted_at=time.monotonic(),
                      blocks=json.loads(blocks) if isinstance(blocks, str) else list(blocks))
        msg.unfurl_off = _no_unfurls(args)
        self.messages[(channel, ts)] = msg
        return ok(channel=channel, ts=ts, message={"type": "message", "text": text, "user": self.bot_user_id,
                                                    "bot_id": self.bot_id, "ts": ts, "thread_ts": msg.thread_ts})

    def _update(self, args: dict[str, Any]) -> web.Response:
        msg = self.messages.get((args["channel"], args["ts"]))
        if msg is None:
            return err("message_not_found")
        text = args.get("text") or ""
        if len(text) > 4000:
            return err("msg_too_long")
        now = time.monotonic()
        recent = [t for t, _ in msg.edits if t > now - 60]
        if len(recent) >= self.update_limit_per_minute:
            return web.json_response({"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": "1"})
        msg.edits.append((now, text))
        msg.text = text
        msg.unfurl_off = msg.unfurl_off or _no_unfurls(args)
        if "blocks" in args:
            blocks = args["blocks"]
            msg.blocks = json.loads(blocks) if isinstance(blocks, str) else list(blocks or [])
        return ok(channel=msg.channel, ts=msg.ts, text=text)

    def _delete(self, args: dict[str, Any]) -> web.Response:
        """A bot deletes its own messages (docs.slack.dev/reference/methods/chat.delete)."""
        msg = self.messages.get((args["channel"], args["ts"]))
        if msg is None:
            return err("message_not_found")
        if msg.user != self.bot_user_id:
            return err("cant_delete_message")
        del self.messages[(args["channel"], args["ts"])]
        self.deleted.append(msg)
        return ok(channel=msg.channel, ts=msg.ts)

    def _set_status(self, args: dict[str, Any]) -> web.Response:
        self.statuses.append((time.monotonic(), args["channel_id"], args["thread_ts"], args.get("status") or ""))
        return ok()

    def _suggest_prompts(self, args: dict[str, Any]) -> web.Response:
        prompts = args.get("prompts")
        prompts = json.loads(prompts) if isinstance(prompts, str) else prompts
        if not prompts or len(prompts) > 4 or any(not p.get("title") or not p.get("message") for p in prompts):
            return err("invalid_arguments")  # 1 to 4 prompts, each with a title and a message
        self.suggested[args["channel_id"]] = prompts
        return ok()

    def _ephemeral(self, args: dict[str, Any]) -> web.Response:
        self.ephemeral.append(dict(args))
        return ok(message_ts=self.new_ts())

    def _replies(self, args: dict[str, Any]) -> web.Response:
        thread = self.thread(args["channel"], args["ts"])
        if not thread:
            return err("thread_not_found")
        return ok(messages=[{"type": "message", "ts": m.ts, "thread_ts": m.thread_ts or m.ts, "user": m.user,
                             "text": m.text, **({"bot_id": m.bot_id} if m.bot_id else {})} for m in thread],
                  has_more=False)

    def _upload_url(self, args: dict[str, Any]) -> web.Response:
        fid = "F" + uuid.uuid4().hex[:10].upper()
        self.files[fid] = StoredFile(fid, args["filename"], "application/octet-stream", uploaded_by_bot=True)
        return ok(upload_url=f"{self.base}/upload/{fid}", file_id=fid)

    def _complete_upload(self, args: dict[str, Any]) -> web.Response:
        files = args["files"]
        files = json.loads(files) if isinstance(files, str) else files
        out = []
        for f in files:
            stored = self.files.get(f["id"])
            if stored is None or stored.data is None:
                return err("file_not_found")
            stored.title = f.get("title")
            stored.channel = args.get("channel_id")
            stored.thread_ts = args.get("thread_ts")
            out.append({"id": stored.id, "name": stored.name, "title": stored.title})
        return ok(files=out)

    def _stream(self, method: str, args: dict[str, Any]) -> web.Response:
        """chat.startStream / appendStream / stopStream with Slack's rules: a stream replies in a
        thread; in a channel (not a DM) it needs recipient_user_id and recipient_team_id;
        markdown_text at most 12,000 characters per call; chunks of the documented types; a
        stream the server closed (``close_streams_after``) answers message_not_in_streaming_state."""
        chunks = args.get("chunks") or []
        chunks = json.loads(chunks) if isinstance(chunks, str) else chunks
        text = args.get("markdown_text") or ""
        pieces = [text] if text else []
        pieces += [c.get("text") or "" for c in chunks if c.get("type") == "markdown_text"]
        if not all(chunk_ok(c) for c in chunks):
            return err("invalid_chunks")
        if any(len(p) > MARKDOWN_TEXT_LIMIT for p in pieces):
            return err("msg_too_long")
        found = self._start_stream(args) if method == "chat.startStream" else self._open_stream(method, args)
        if isinstance(found, web.Response):
            return found
        msg, now = found, time.monotonic()
        msg.text += "".join(pieces)
        for c in chunks:
            if c.get("type") == "task_update":
                msg.tasks[c["id"]] = {k: c.get(k) for k in ("title", "status", "details", "output")}
                msg.task_updates.append((now, c["id"], c["status"]))
            elif c.get("type") == "plan_update":
                msg.plan_title = c["title"]
            elif c.get("type") == "blocks":
                msg.blocks.extend(c.get("blocks") or [])
        if method == "chat.stopStream":
            msg.streaming = False
            blocks = args.get("blocks") or []
            msg.blocks.extend(json.loads(blocks) if isinstance(blocks, str) else blocks)
        msg.edits.append((now, msg.text))
        return ok(channel=msg.channel, ts=msg.ts)

    def _start_stream(self, args: dict[str, Any]) -> "Message | web.Response":
        """A new streaming message (chat.startStream), or Slack's refusal."""
        channel = args["channel"]
        if not args.get("thread_ts"):
            return err("invalid_arguments")
        if not channel.startswith("D") and not (args.get("recipient_user_id") and args.get("recipient_team_id")):
            return err("missing_recipient_team_id" if args.get("recipient_user_id") else "missing_recipient_user_id")
        mode = args.get("task_display_mode")
        if mode not in (None, "plan", "timeline"):
            return err("invalid_arguments")
        ts = self.new_ts()
        msg = Message(channel, ts, "", self.bot_user_id, thread_ts=args["thread_ts"], bot_id=self.bot_id,
                      posted_at=time.monotonic(), streaming=True, display_mode=mode)
        msg.unfurl_off = _no_unfurls(args)
        self.messages[(channel, ts)] = msg
        return msg

    def _open_stream(self, method: str, args: dict[str, Any]) -> "Message | web.Response":
        """The streaming message an append or stop names, or Slack's refusal."""
        msg = self.messages.get((args["channel"], args["ts"]))
        if msg is None:
            return err("message_not_found")
        if not msg.streaming:
            return err("message_not_in_streaming_state")
        msg.appends += 1
        if method == "chat.appendStream" and self.close_streams_after is not None and msg.appends > self.close_streams_after:
            msg.streaming = False
            return err("message_not_in_streaming_state")
        return msg

    async def _upload(self, request: web.Request) -> web.Response:
        fid = request.match_info["file_id"]
        stored = self.files.get(fid)
        if stored is None:
            return web.Response(status=404, text="not found")
        stored.data = await request.read()
        self.calls.append(("upload", {"file_id": fid, "bytes": len(stored.data)}))
        self._notify()
        return web.Response(text=f"OK - {len(stored.data)}")

    async def _download(self, request: web.Request) -> web.Response:
        fid = request.match_info["team_file"].split("-", 1)[1]
        stored = self.files.get(fid)
        self.calls.append(("download", {"file_id": fid}))
        self._notify()
        auth = request.headers.get("Authorization", "")
        authorized = auth == f"Bearer {self.bot_token}" and "files:read" in self.scopes
        if stored is None or stored.data is None:
            return web.Response(status=404, text="file not found")
        if not authorized or stored.serve_login_page:
            # What Slack does without a valid token/scope: 200 with its sign-in page.
            return web.Response(body=LOGIN_PAGE, content_type="text/html", charset="utf-8")
        return web.Response(body=stored.data, content_type=stored.mimetype)
