"""HuggingGPT as an MCP server, through the real ``mcp`` SDK client: over stdio against a
``python -m hugginggpt mcp --sandbox`` subprocess, and over streamable HTTP against ``/mcp`` of the
API served by uvicorn on 127.0.0.1 (the sandbox backends behind both)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
import uvicorn
from mcp import Client, ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from PIL import Image

from adapters.http import create_app
from adapters.http.auth import key_id
from adapters.mcp.http import mount
from hugginggpt.serve import bind
from bot.incoming import ConversationKey
from sandbox import Sandbox
from bot.service import Service
from bot.backends import pipeline_config
from bot.settings import Settings, load_settings

MEDIA = Path(__file__).parent / "fixtures" / "media"
KEY = "sk-mcp-test-key"
KEY_B = "sk-mcp-test-key-b"
PHOTO = MEDIA / "chelsea.png"


def data_uri(path: Path = PHOTO) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def picture(block) -> Image.Image:
    assert block.type == "image" and block.mime_type == "image/png"
    return Image.open(io.BytesIO(base64.b64decode(block.data)))


async def ask(session: ClientSession | Client, tool: str, arguments: dict) -> tuple[object, list[str]]:
    """Call ``tool``; returns the result and the progress messages received."""
    messages: list[str] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    result = await session.call_tool(tool, arguments, progress_callback=progress)
    return result, messages


async def refused(session: ClientSession | Client, tool: str, arguments: dict) -> str:
    """The message of the MCP error ``tool`` answers ``arguments`` with."""
    with pytest.raises(MCPError) as info:
        await session.call_tool(tool, arguments)
    assert info.value.code == -32602
    return info.value.message


@pytest.mark.slow
async def test_over_stdio_tools_photo_in_annotated_image_out_plan_and_bad_arguments(tmp_path):
    params = StdioServerParameters(command=sys.executable, args=["-m", "hugginggpt", "mcp", "--sandbox"], cwd=str(tmp_path),
                                   env={"HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data")})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        info = await session.initialize()
        assert info.server_info.name == "hugginggpt"
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert {"hugginggpt", "plan", "object-detection", "image-to-text", "text-to-speech"} <= set(tools)
        assert tools["hugginggpt"].input_schema["required"] == ["request"]
        assert set(tools["hugginggpt"].input_schema["properties"]) == {"request", "files", "conversation_id"}
        assert tools["object-detection"].input_schema["required"] == ["image"]
        assert not any(name.startswith("mcp.") for name in tools)

        result, progress = await ask(session, "hugginggpt", {"request": "Detect the objects in this photo",
                                                             "files": [data_uri()]})
        assert not result.is_error
        answer, image = result.content[0], result.content[1]
        annotated = picture(image)
        assert annotated.size == (451, 300) and annotated.tobytes() != Image.open(PHOTO).convert("RGB").tobytes()
        doc = result.structured_content
        assert [t["task"] for t in doc["tasks"]] == ["object-detection"] and doc["results"]["0"]["status"] == "ok"
        conversation = doc["conversation_id"]
        assert conversation in answer.text and doc["files"][0]["kind"] == "image"
        assert progress[0].startswith("Task planning") and any("running on" in m for m in progress)
        assert progress[-1].startswith("Response generation")

        # the conversation goes on: its first photo is still image-1
        again, _ = await ask(session, "hugginggpt", {"request": "Caption image-1", "conversation_id": conversation})
        assert not again.is_error and again.structured_content["conversation_id"] == conversation
        assert again.structured_content["tasks"][0]["args"] == {"image": "image-1"}

        planned, _ = await ask(session, "plan", {"request": "Caption this photo", "files": [data_uri()]})
        assert planned.structured_content == {"tasks": [{"task": "image-to-text", "id": 0, "dep": [-1],
                                                         "args": {"image": "image-1"}}]}
        assert [b.type for b in planned.content] == ["text"]  # nothing was run

        single, _ = await ask(session, "object-detection", {"image": data_uri()})
        assert not single.is_error and picture(single.content[1]).size == (451, 300)

        assert await refused(session, "hugginggpt", {"files": [data_uri()]}) == \
            "The tool hugginggpt needs a 'request': the text of what you want."
        assert "does not fetch links" in await refused(session, "hugginggpt", {"request": "Caption it",
                                                                               "files": ["https://example.com/cat.png"]})
        assert "does not fetch links" in await refused(session, "hugginggpt", {
            "request": "Caption it", "files": [{"type": "resource_link", "uri": "file:///etc/passwd", "name": "p"}]})
        assert "takes no argument 'colour'" in await refused(session, "image-to-text", {"image": data_uri(), "colour": "red"})
        assert "needs the argument 'image'" in await refused(session, "object-detection", {})
        assert "no tool called" in await refused(session, "rm-rf", {})
        message = await refused(session, "hugginggpt", {"request": "Caption it",
                                                        "files": ["data:image/png;base64," + base64.b64encode(b"no").decode()]})
        assert message.endswith(".") and "\n" not in message


class ServedApi:
    """``hugginggpt serve``'s application with ``/mcp`` mounted, on uvicorn on 127.0.0.1."""

    def __init__(self, sandbox: Sandbox, data_dir: Path, server: dict) -> None:
        self.settings = load_settings(env={}, overrides={**sandbox.overrides(data_dir), "server": server})
        self.url = ""

    async def __aenter__(self) -> "ServedApi":
        self.service = await Service.create(self.settings)
        app = create_app(self.settings, self.service, version="test")
        self.endpoint = mount(app, version="test")
        sock = bind("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="off"))
        self.server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        self.task = asyncio.create_task(self.server.serve(sockets=[sock]))
        while not self.server.started:
            await asyncio.sleep(0.02)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.endpoint.close()
        self.server.should_exit = self.server.force_exit = True
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(self.task, 10)
        await self.service.close()

    @contextlib.asynccontextmanager
    async def session(self, key: str = KEY, seen: dict | None = None):
        """A client session with ``key``; ``seen`` gets the ``mcp-session-id`` the server gave it."""

        async def note(response: httpx2.Response) -> None:
            if seen is not None and "mcp-session-id" in response.headers:
                seen["id"] = response.headers["mcp-session-id"]

        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60,
                                      event_hooks={"response": [note]}) as http:
            async with streamable_http_client(self.url + "/mcp", http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    yield session


    @contextlib.asynccontextmanager
    async def client(self, mode: str, seen: dict | None = None):
        """The official ``mcp.Client`` with :data:`KEY`, in protocol ``mode`` (``"legacy"``: the
        initialize handshake; ``"2026-07-28"``: stateless; ``"auto"``: ``server/discover`` first);
        ``seen["ids"]`` collects the ``mcp-session-id`` headers the server sent."""
        ids = (seen if seen is not None else {}).setdefault("ids", [])

        async def note(response: httpx2.Response) -> None:
            if "mcp-session-id" in response.headers:
                ids.append(response.headers["mcp-session-id"])

        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=60,
                                      event_hooks={"response": [note]}) as http:
            async with Client(streamable_http_client(self.url + "/mcp", http_client=http), mode=mode) as client:
                yield client


@pytest.fixture
async def api(tmp_path):
    async with Sandbox(latency={"image-segmentation": 60.0}) as sandbox:
        async with ServedApi(sandbox, tmp_path / "data", {"api_keys": [KEY, KEY_B], "max_concurrent_runs": 1}) as served:
            yield served


async def test_over_http_a_key_is_needed(api):
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    async with httpx2.AsyncClient() as http:
        for headers in ({}, {"Authorization": "Bearer sk-wrong"}):
            resp = await http.post(api.url + "/mcp", json=hello,
                                   headers={**headers, "Accept": "application/json, text/event-stream"})
            assert resp.status_code == 401 and resp.headers["www-authenticate"] == "Bearer"
            assert resp.json()["error"]["code"] == "invalid_api_key"


async def test_over_http_a_session_belongs_to_the_key_that_opened_it(api, caplog):
    seen: dict = {}
    async with api.session(KEY, seen) as session:
        assert seen["id"]
        headers = {"mcp-session-id": seen["id"], "mcp-protocol-version": "2025-06-18",
                   "Accept": "application/json, text/event-stream"}
        listing = {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}}
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY_B}"}, timeout=30) as other:
            deleted = await other.delete(api.url + "/mcp", headers=headers)
            used = await other.post(api.url + "/mcp", json=listing, headers=headers)
        for refusal in (deleted, used):  # as if the session did not exist: no oracle for its id
            assert refusal.status_code == 404 and refusal.json()["error"]["message"] == "Session not found"
        assert any("credential does not match" in r.getMessage() for r in caplog.records)
        # the owner's session still works
        assert "plan" in {t.name for t in (await session.list_tools()).tools}
        result, _ = await ask(session, "plan", {"request": "Caption this photo", "files": [data_uri()]})
        assert not result.is_error


@pytest.mark.slow
async def test_over_stdio_both_protocol_eras_are_served(tmp_path):
    """``hugginggpt mcp`` answers the official client in the handshake era and in the stateless
    revision (the SDK's dual-era loop): the client's first request decides."""
    env = {"HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data"), "PATH": os.environ["PATH"],
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    params = StdioServerParameters(command=sys.executable, args=["-m", "hugginggpt", "mcp", "--sandbox"],
                                   cwd=str(tmp_path), env=env)
    for mode, spoken in (("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28")):
        async with Client(params, mode=mode) as client:
            assert client.protocol_version == spoken
            result, progress = await ask(client, "plan", {"request": "Caption this photo", "files": [data_uri()]})
            assert result.structured_content["tasks"][0]["task"] == "image-to-text" and progress == ["Task planning"]


async def test_over_stdio_an_unknown_conversation_id_is_refused_as_the_cli_refuses_it(tmp_path):
    env = {"HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data"), "PATH": os.environ["PATH"],
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}  # the stdio client passes on no other variable
    cli = subprocess.run([sys.executable, "-m", "hugginggpt", "chat", "--sandbox", "--conversation", "0badc0ffee"],
                         cwd=tmp_path, env={**os.environ, **env}, capture_output=True, text=True, timeout=120, input="")
    assert cli.returncode == 3 and cli.stderr.strip() == "Error: There is no conversation 0badc0ffee."
    params = StdioServerParameters(command=sys.executable, args=["-m", "hugginggpt", "mcp", "--sandbox"],
                                   cwd=str(tmp_path), env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        said = await refused(session, "hugginggpt", {"request": "Say hello", "conversation_id": "0badc0ffee"})
        assert said == "There is no conversation 0badc0ffee."
        # the id a call gives back is the one the CLI takes
        first, _ = await ask(session, "hugginggpt", {"request": "Caption this photo", "files": [data_uri()]})
        conversation = first.structured_content["conversation_id"]
    again = subprocess.run([sys.executable, "-m", "hugginggpt", "chat", "--sandbox", "--conversation", conversation],
                           cwd=tmp_path, env={**os.environ, **env}, capture_output=True, text=True, timeout=120, input="")
    assert again.returncode == 0 and f"Resuming conversation {conversation}: 1 earlier turns, 1 files." in again.stdout


async def test_over_http_a_photo_in_and_boxes_out_in_the_api_conversation_of_the_key(api):
    async with api.session() as session:
        tools = {t.name for t in (await session.list_tools()).tools}
        assert {"hugginggpt", "plan", "object-detection"} <= tools
        result, progress = await ask(session, "hugginggpt", {"request": "Detect the objects in this photo",
                                                             "files": [data_uri()], "conversation_id": "shared-1"})
        assert not result.is_error and picture(result.content[1]).size == (451, 300)
        assert any(m.startswith("Task planning done") for m in progress)
        assert "does not fetch links" in await refused(session, "plan", {"request": "x", "files": ["http://127.0.0.1/"]})
    # the same conversation as the OpenAI-compatible API's "shared-1" of this key
    conv = await api.service.conversation_id(ConversationKey("api", key_id(KEY), "chat", "shared-1"))
    [turn] = await api.service.store.turns(conv)
    assert turn["status"] == "ok" and turn["user_text"] == "Detect the objects in this photo"


@pytest.mark.parametrize("mode, spoken", [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28"),
                                          ("auto", "2026-07-28")])
async def test_over_http_both_protocol_eras_are_served(api, mode, spoken):
    """The official client in each era: the initialize handshake and its session, or the
    stateless revision (no handshake, no session; ``auto`` asks ``server/discover`` for the
    server's capabilities); the photo comes back with boxes either way, with progress on the way."""
    seen: dict = {}
    async with api.client(mode, seen) as client:
        assert client.protocol_version == spoken
        if mode != "2026-07-28":  # a pinned revision skips the probe: the SDK assumes what it was told
            assert client.server_capabilities.tools is not None and client.instructions.startswith("HuggingGPT plans")
        result, progress = await ask(client, "hugginggpt", {"request": "Detect the objects in this photo",
                                                            "files": [data_uri()], "conversation_id": f"era-{mode}"})
        assert not result.is_error and picture(result.content[1]).size == (451, 300)
        assert any(m.startswith("Task planning done") for m in progress)
        assert "does not fetch links" in await refused(client, "plan", {"request": "x", "files": ["http://127.0.0.1/"]})
    assert bool(seen["ids"]) == (spoken != "2026-07-28")  # a session only in the handshake era


async def test_over_http_the_stateless_wire_needs_its_envelope_and_has_no_handshake(api):
    """Raw 2026-07-28 requests: ``server/discover`` and ``tools/list`` straight away with the
    ``_meta`` envelope; without it the request is refused with a sentence; ``initialize`` is no
    method of this revision (the SDK's checks, before any of our code)."""
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}}
    headers = {"Authorization": f"Bearer {KEY}", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2026-07-28"}

    async def post(method: str, params: dict) -> httpx2.Response:
        async with httpx2.AsyncClient(timeout=30) as http:
            return await http.post(api.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                                   headers={**headers, "Mcp-Method": method})

    found = await post("server/discover", {"_meta": meta})
    assert found.status_code == 200 and "mcp-session-id" not in found.headers
    assert found.json()["result"]["supportedVersions"] == ["2026-07-28"]
    assert found.json()["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "hugginggpt"
    listed = await post("tools/list", {"_meta": meta})
    assert "hugginggpt" in {t["name"] for t in listed.json()["result"]["tools"]}
    bare = await post("tools/list", {})
    assert bare.status_code == 400 and "io.modelcontextprotocol/protocolVersion" in bare.json()["error"]["message"]
    hello = await post("initialize", {"_meta": meta, "protocolVersion": "2026-07-28", "capabilities": {},
                                      "clientInfo": {"name": "raw", "version": "1"}})
    assert hello.json()["error"]["code"] == -32601


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_over_http_a_cancelled_call_stops_the_run_as_stop_does(api, mode):
    """In either era (stateless: the client closes the call's response stream)."""
    running = asyncio.Event()

    async def progress(value: float, total: float | None, message: str | None) -> None:
        if "running on" in (message or ""):
            running.set()

    async with api.client(mode) as session:
        call = asyncio.create_task(session.call_tool(
            "hugginggpt", {"request": "Segment this photo", "files": [data_uri()], "conversation_id": "cancel-me"},
            progress_callback=progress))
        await asyncio.wait_for(running.wait(), 60)
        started = time.monotonic()
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call
        conv = await api.service.conversation_id(ConversationKey("api", key_id(KEY), "chat", "cancel-me"))
        for _ in range(300):
            turns = await api.service.store.turns(conv)
            if turns and turns[-1]["status"] != "running":
                break
            await asyncio.sleep(0.1)
        record = turns[-1]["record"]
        assert record["stopped"] is True and record["results"]["0"]["error"] == "Stopped before it finished."
        assert "You stopped this run" in turns[-1]["answer"]
        assert time.monotonic() - started < 30  # not the model's 60 s
        # the key's only run slot was given back: the next call runs
        after, _ = await ask(session, "plan", {"request": "Caption this photo", "files": [data_uri()]})
        assert not after.is_error


async def test_an_http_mcp_server_serves_as_experts_its_image_result_a_resource(api, sink):
    """The expert side over streamable HTTP, against our own /mcp: its tools become tasks, and
    the object-detection tool's image comes back as a file of the run."""
    from pipeline.experts.mcp import McpRunner
    from pipeline.mcp_tools import Toolbox
    from tests.conftest import mcp_server
    from tests.conftest import stored_upload

    box = Toolbox([mcp_server("self", url=api.url + "/mcp", headers={"Authorization": f"Bearer {KEY}"})])
    try:
        names = await box.task_names()
        assert {"mcp.self.hugginggpt", "mcp.self.plan", "mcp.self.object-detection"} <= names
        assert box.tool("mcp.self.object-detection").spec.required == {"image": "image"}
        photo = await stored_upload(sink, PHOTO.read_bytes(), "chelsea.png", "image/png")
        out = await McpRunner(box, pipeline_config(Settings()).output).run("mcp.self.object-detection", "mcp:self/object-detection", {"image": photo},
                                       sink, task_id=3)
        [boxes] = out.files
        assert boxes.kind == "image" and boxes.origin == "task:3" and Image.open(boxes.path).size == (451, 300)
        assert out.text and out.data is not None and out.data.to_json()["structured"]["result"]["status"] == "ok"
    finally:
        await box.aclose()

    wrong = Toolbox([mcp_server("self", url=api.url + "/mcp", headers={"Authorization": "Bearer sk-wrong"},
                                     connect_timeout=10)])
    try:
        assert await wrong.task_names() == frozenset()  # refused with 401: no tools, the run goes on
    finally:
        await wrong.aclose()
