"""MCP Tasks (the ``io.modelcontextprotocol/tasks`` extension, 2026-07-28), both ways, through the
official ``mcp`` SDK's client and servers against each other:

- our server (``/mcp`` of ``hugginggpt serve`` on uvicorn on 127.0.0.1, and in process) answers a
  ``hugginggpt`` call of a client that declares the extension with a task handle, followed by
  ``tasks/get`` to the same answer a synchronous call gets, stopped by ``tasks/cancel``, found
  only by its own caller, bounded per caller;
- the bot's client polls the stand-in tool server (``sandbox.mcp_tools`` in its ``task`` modes,
  a real stdio subprocess) to the end of its task, says a failed one, and cancels on the tool
  server a task cut by its deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import Result
from PIL import Image

from adapters.http.auth import key_id
from adapters.mcp import build
from adapters.mcp.tasks import MAX_TASKS, NO_TASK, STOPPED, TOO_MANY, TaskTable
from bot.backends import pipeline_config
from bot.incoming import ConversationKey
from bot.service import Service
from bot.settings import Settings, load_settings
from pipeline.experts.mcp import McpRunner
from pipeline.mcp_tasks import POLL_MAX, POLL_MIN, CancelTask, GetTask, TaskHandle, TaskId, TaskState, TasksClient
from pipeline.mcp_tools import Toolbox
from sandbox import Sandbox
from sandbox.mcp_tools import POLLED, TASK_CANCELLED, TASK_FAILED
from tests.conftest import mcp_server, stored_upload
from tests.test_mcp_experts import MEDIA, ROOT, run
from tests.test_mcp_server import KEY, KEY_B, PHOTO, ServedApi, data_uri, picture

SEGMENT = {"request": "Segment this photo", "files": [data_uri()]}


@pytest.fixture
async def api(tmp_path):
    async with Sandbox(latency={"image-segmentation": 60.0}) as sandbox:
        async with ServedApi(sandbox, tmp_path / "data", {"api_keys": [KEY, KEY_B], "max_concurrent_runs": 1}) as served:
            yield served


@contextlib.asynccontextmanager
async def client(api: ServedApi, key: str = KEY, tasks: bool = True):
    """The official client over HTTP in the stateless revision, declaring the Tasks extension
    (our :class:`TasksClient`) unless ``tasks`` is false."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        async with Client(streamable_http_client(api.url + "/mcp", http_client=http), mode="2026-07-28",
                          extensions=[TasksClient()] if tasks else None) as c:
            yield c


async def start(c: Client, arguments: dict) -> TaskHandle:
    """Call ``hugginggpt`` and keep the task handle (no polling by the client)."""
    handle = await c.session.call_tool("hugginggpt", arguments, allow_claimed=True)
    assert isinstance(handle, TaskHandle), handle
    return handle


async def get(c: Client, task_id: str) -> TaskState:
    return await c.session.send_request(GetTask(params=TaskId(task_id=task_id)), TaskState)


async def poll(c: Client, task_id: str, until: set[str], seen: list[str] | None = None) -> TaskState:
    """``tasks/get`` every 0.1 s until the status is in ``until`` (60 s at most); each status
    message goes to ``seen``."""
    for _ in range(600):
        state = await get(c, task_id)
        if seen is not None and state.status_message and (not seen or seen[-1] != state.status_message):
            seen.append(state.status_message)
        if state.status in until:
            return state
        await asyncio.sleep(0.1)
    raise AssertionError(f"task {task_id} still {state.status}")


async def test_a_run_is_a_task_polled_to_the_answer_a_plain_call_gets(api):
    """Handle at once; ``tasks/get`` says how the run goes (one line each) and then carries the
    same answer as a synchronous call; a client without the extension gets that answer itself;
    and our client follows our server's task by itself."""
    ask = {"request": "Detect the objects in this photo", "files": [data_uri()], "conversation_id": "as-task"}
    async with client(api) as c:
        handle = await start(c, ask)
        assert handle.status == "working" and handle.poll_interval_ms == 500 and len(handle.task_id) >= 20
        said: list[str] = []
        done = await poll(c, handle.task_id, {"completed", "failed", "cancelled"}, said)
        assert done.status == "completed", done
        result = done.result
        followed = await c.call_tool("hugginggpt", {**ask, "conversation_id": "followed"})
    assert said[-1] == "Done." and all("\n" not in m for m in said), said
    assert result["isError"] is False and [b["type"] for b in result["content"]][:2] == ["text", "image"]
    assert result["structuredContent"]["conversation_id"] == "as-task"
    async with client(api, tasks=False) as plain:
        sync = await plain.call_tool("hugginggpt", {**ask, "conversation_id": "plain"})
    assert [b.type for b in sync.content] == [b["type"] for b in result["content"]]
    assert result["content"][1]["data"] == sync.content[1].data  # the same picture with boxes
    assert not followed.is_error and picture(followed.content[1]).size == (451, 300)


async def test_tasks_cancel_stops_the_run_as_stop_does(api):
    async with client(api) as c:
        handle = await start(c, {**SEGMENT, "conversation_id": "cancel-task"})
        running = await poll(c, handle.task_id, {"working"})
        for _ in range(300):  # the run's progress, one line: the stage and the task
            if "running on" in (running.status_message or ""):
                break
            running = await get(c, handle.task_id)
            await asyncio.sleep(0.1)
        assert running.status_message.startswith("Task execution: task 0 running on"), running.status_message
        started = time.monotonic()
        await c.session.send_request(CancelTask(params=TaskId(task_id=handle.task_id)), Result)  # acknowledged
        ended = await poll(c, handle.task_id, {"completed", "failed", "cancelled"})
        assert ended.status == "cancelled" and ended.status_message == STOPPED and ended.result is None
        assert time.monotonic() - started < 30  # not the model's 60 s
        after = await c.call_tool("plan", {"request": "Caption this photo", "files": [data_uri()]})
        assert not after.is_error  # the key's only run slot was given back
    conv = await api.service.conversation_id(ConversationKey("api", key_id(KEY), "chat", "cancel-task"))
    [turn] = await api.service.store.turns(conv)
    assert turn["record"]["stopped"] is True and "You stopped this run" in turn["answer"]


async def test_a_task_is_found_only_by_its_own_caller(api):
    """Another key's ``tasks/get`` or ``tasks/cancel`` of a task, and an unknown id, get the same
    sentence; the owner's run is untouched."""
    async with client(api) as mine, client(api, KEY_B) as theirs:
        handle = await start(mine, {"request": "Caption this photo", "files": [data_uri()]})
        said = []
        for call in (lambda: get(theirs, handle.task_id),
                     lambda: theirs.session.send_request(CancelTask(params=TaskId(task_id=handle.task_id)), TaskState),
                     lambda: get(mine, "no-such-task")):
            with pytest.raises(MCPError) as info:
                await call()
            assert info.value.code == -32602
            said.append(info.value.message)
        assert said[0] == said[1] == NO_TASK.format(handle.task_id, 10) and said[2] == NO_TASK.format("no-such-task", 10)
        done = await poll(mine, handle.task_id, {"completed", "failed", "cancelled"})
        assert done.status == "completed" and done.result["isError"] is False


async def test_a_caller_holds_a_bounded_number_of_tasks(tmp_path):
    """Over stdio's access (no rate or run limits), the table is what bounds the runs: the
    caller's ``MAX_TASKS`` runs are working, the next call is refused with a sentence."""
    async with Sandbox(latency={"image-segmentation": 60.0}) as sandbox:
        service = await Service.create(load_settings(env={}, overrides=sandbox.overrides(tmp_path / "data")))
        server, table = build(service)
        try:
            async with Client(server, mode="2026-07-28", extensions=[TasksClient()]) as c:
                handles = [await start(c, SEGMENT) for _ in range(MAX_TASKS)]
                with pytest.raises(MCPError) as info:
                    await c.session.call_tool("hugginggpt", SEGMENT, allow_claimed=True)
                assert info.value.message == TOO_MANY.format(MAX_TASKS)
                assert {(await get(c, h.task_id)).status for h in handles} == {"working"}
        finally:
            await table.close()
            await service.close()
    assert {t.status for t in table.tasks.values()} == {"cancelled"} and len(table.tasks) == MAX_TASKS


async def test_finished_tasks_are_dropped_oldest_first_and_after_their_keep_time():
    now = [0.0]
    table = TaskTable(per_caller=2, keep=10.0, clock=lambda: now[0])
    a, b = table.add("me"), table.add("me")
    a.end("completed", 1.0, result={"content": []})
    c = table.add("me")  # full: the oldest finished one goes
    with pytest.raises(MCPError):
        table.get("me", a.task_id)
    with pytest.raises(MCPError) as info:
        table.add("me")  # b and c still working
    assert info.value.message == TOO_MANY.format(2)
    assert table.add("you").caller == "you"  # another caller has room of its own
    b.end("failed", 2.0, error={"code": -32603, "message": "x"})
    now[0] = 11.0
    assert table.get("me", b.task_id) is b
    now[0] = 12.5  # kept 10 s after its end, then forgotten
    with pytest.raises(MCPError) as gone:
        table.get("me", b.task_id)
    assert gone.value.message == NO_TASK.format(b.task_id, 10 / 60)
    assert table.get("me", c.task_id) is c


def standin(name: str, mode: str, tmp_path: Path, *extra: str) -> Toolbox:
    """A toolbox with the stand-in tool server in ``mode`` (its stderr in ``mcp-<name>.log``)."""
    return Toolbox([mcp_server(name, command=sys.executable, args=("-m", "sandbox.mcp_tools", "--mode", mode, *extra),
                               connect_timeout=90, errlog=tmp_path / f"mcp-{name}.log")])


async def stamp(box: Toolbox, name: str, sink) -> object:
    """Run the stamp tool of the connected server ``name`` on the photo."""
    photo = await stored_upload(sink, PHOTO.read_bytes(), "chelsea.png", "image/png")
    return await McpRunner(box, pipeline_config(Settings()).output).run(
        f"mcp.{name}.stamp", f"mcp:{name}/stamp", {"image": photo, "text": "HI"}, sink, task_id=0)


async def test_a_server_suggesting_no_wait_is_polled_no_faster_than_the_floor(tmp_path, sink):
    box = standin("eager", "task", tmp_path, "--polls", "4", "--poll-ms", "0")
    try:
        await box.task_names()  # connected first: only the call is timed
        started = time.monotonic()
        out = await stamp(box, "eager", sink)
        took = time.monotonic() - started
    finally:
        await box.aclose()
    polls = [line for line in (tmp_path / "mcp-eager.log").read_text().splitlines() if "tasks/get" in line]
    assert polls[-1] == POLLED.format("standin-1", "completed") and len(polls) == 4
    assert took >= 4 * POLL_MIN and "Stamped 'HI' on a 451x300 image" in out.text


async def test_a_server_suggesting_an_hour_between_polls_is_polled_within_the_ceiling(tmp_path, sink):
    box = standin("lazy", "task", tmp_path, "--polls", "2", "--poll-ms", "3600000")
    try:
        await box.task_names()
        async with asyncio.timeout(2 * POLL_MAX + 10):
            out = await stamp(box, "lazy", sink)
    finally:
        await box.aclose()
    [stamped] = out.files
    assert Image.open(stamped.path).size == (451, 300)


@pytest.mark.slow
def test_tool_servers_answering_with_tasks_are_polled_said_failed_or_cancelled_at_the_deadline(tmp_path):
    """A whole run (``hugginggpt run --sandbox``) with three stand-in servers whose stamp is a
    task: one completes after 3 polls (its picture is the task's result), one fails (its
    sentence), one never finishes: cut at the 3-second task timeout, with ``tasks/cancel`` sent
    (the stand-in's own log shows it)."""
    modes = {"polls": "task", "fails": "task-fail", "forever": "task-forever"}
    p, doc = run(tmp_path, 'Stamp "HI" on chelsea.png. Also describe chelsea.png.', modes, task_timeout=3)
    assert p.returncode == 6, p.stderr  # answered, but tasks failed
    tasks = {t["task"]: str(t["id"]) for t in doc["tasks"]}
    done = doc["results"][tasks["mcp.polls.stamp"]]
    assert done["status"] == "ok" and "Stamped 'HI' on a 451x300 image" in done["output"]["text"]
    assert len(done["output"]["files"]) == 1
    failed = doc["results"][tasks["mcp.fails.stamp"]]
    assert failed["status"] == "failed" and f"The tool mcp:fails/stamp failed: {TASK_FAILED[:-1]}." in failed["error"]
    cut = doc["results"][tasks["mcp.forever.stamp"]]
    assert cut["status"] == "failed" and "mcp:forever/stamp did not answer within 3 seconds" in cut["error"]
    logs = tmp_path / "data" / "logs"
    assert TASK_CANCELLED.format("standin-1") in (logs / "mcp-forever.log").read_text()
    polled = (logs / "mcp-polls.log").read_text()
    assert polled.count("tasks/get") == 3 and POLLED.format("standin-1", "completed") in polled
    assert doc["status"] == "partial" and doc["response"]


@pytest.mark.slow
def test_a_run_stopped_with_ctrl_c_cancels_the_tool_servers_task(tmp_path):
    """Ctrl-C on ``hugginggpt run`` while a tool server's task is being polled: the run stops and
    ``tasks/cancel`` reaches the tool server (its own log shows it), not only at a deadline."""
    config = tmp_path / "hugginggpt.toml"
    config.write_text(f"[inference]\ntask_timeout = 120\n\n[mcp.servers.forever]\ncommand = {json.dumps(sys.executable)}\n"
                      'connect_timeout = 90\nargs = ["-m", "sandbox.mcp_tools", "--mode", "task-forever"]\n'
                      f"env = {{ PYTHONPATH = {json.dumps(str(ROOT))} }}\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_TOKEN"))}
    env["HUGGINGGPT_STORAGE__DATA_DIR"] = str(tmp_path / "data")
    log = tmp_path / "data" / "logs" / "mcp-forever.log"
    p = subprocess.Popen([sys.executable, "-m", "hugginggpt", "--config", str(config), "run", "--sandbox",
                          'Stamp "HI" on chelsea.png.', "--file", str(MEDIA / "chelsea.png")],
                         cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (log.exists() and "tasks/get" in log.read_text()):
            assert p.poll() is None and time.monotonic() < deadline, "the tool server's task was never polled"
            time.sleep(0.1)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode != 0 and "Traceback" not in out + err, (out, err)
    assert TASK_CANCELLED.format("standin-1") in log.read_text()
