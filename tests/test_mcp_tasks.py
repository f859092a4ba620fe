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
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

from bot.backends import pipeline_config
from pipeline.experts.mcp import McpRunner
from bot.settings import Settings
from pipeline.mcp_tasks import POLL_MAX, POLL_MIN
from pipeline.mcp_tools import Toolbox
from sandbox.mcp_tools import POLLED, TASK_CANCELLED, TASK_FAILED
from tests.conftest import mcp_server, stored_upload
from tests.test_mcp_experts import MEDIA, run

PHOTO = MEDIA / "chelsea.png"


def standin(name: str, mode: str, tmp_path: Path, *extra: str) -> Toolbox:
    """A toolbox with the stand-in tool server in ``mode`` (its stderr in ``mcp-<name>.log``)."""
    return Toolbox([mcp_server(name, command=sys.executable, args=("-m", "sandbox.mcp_tools", "--mode", mode, *extra),
                               connect_timeout=90, errlog=tmp_path / f"mcp-{name}.log")])


async def stamp(box: Toolbox, name: str, sink) -> object:
    photo = await stored_upload(sink, PHOTO.read_bytes(), "chelsea.png", "image/png")
    await box.task_names()
    return await McpRunner(box, pipeline_config(Settings()).output).run(
        f"mcp.{name}.stamp", f"mcp:{name}/stamp", {"image": photo, "text": "HI"}, sink, task_id=0)


async def test_a_server_suggesting_no_wait_is_polled_no_faster_than_the_floor(tmp_path, sink):
    box = standin("eager", "task", tmp_path, "--polls", "4", "--poll-ms", "0")
    try:
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
        async with asyncio.timeout(2 * POLL_MAX + 20):
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
