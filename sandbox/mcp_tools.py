"""A small stand-in MCP tool server (the official ``mcp`` SDK's ``MCPServer``, over stdio), so
the MCP expert path can be tried offline::

    [mcp.servers.standin]
    command = "python"          # the interpreter of the bot's environment
    args = ["-m", "sandbox.mcp_tools"]

Tools (their outputs are derived from their inputs and say they come from a stand-in):

- ``stamp(image, text)``: the image with ``text`` written on a banner across its top (PNG, same
  size), and a sentence saying so;
- ``count_words(text)``: how many words the text has.

``--mode`` makes ``stamp`` misbehave, for tests of failures: ``hang`` never answers (and writes
:data:`CANCELLED` to stderr when the client cancels the call), ``crash``
exits the process mid-call, ``garbage`` returns "image" content that is not an image, ``link``
returns links (a local path, a web address) instead of the image, ``big`` returns 12 MB of
text (and makes ``count_words`` repeat its answer to 100,000 characters). The ``task`` modes
answer ``stamp`` with an MCP task (the ``io.modelcontextprotocol/tasks`` extension, 2026-07-28,
on the SDK's extension API; only to a client that declares it, others get the result):
``task`` completes after ``--polls`` ``tasks/get``, ``task-fail`` fails after one, and
``task-forever`` stays working; ``--poll-ms`` is the ``pollIntervalMs`` it suggests. It writes
each ``tasks/get`` and ``tasks/cancel`` it answers to stderr (:data:`POLLED`, :data:`TASK_CANCELLED`). For tests of bounds,
``--extra-tools N`` lists N more tools (``convert_units_0001``..., each with a description of
its own) and ``--stderr-bytes N`` writes N bytes of noise to stderr before serving.
Imports nothing of ``bot/`` or ``adapters/``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import os
import sys
from typing import Annotated, Any

from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import CancelTaskRequestParams, GetTaskRequestParams
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent, ResourceLink, TextContent
from PIL import Image, ImageDraw
from pydantic import Field

MAX_PIXELS = 40_000_000
CANCELLED = "stand-in tool server: the call of stamp was cancelled by the client"
"""What ``--mode hang`` writes to stderr when the client cancels the call it never answers."""
POLLED = "stand-in tool server: tasks/get of task {} ({})"
"""What the ``task`` modes write to stderr for each ``tasks/get`` (the task id, the status answered)."""
TASK_CANCELLED = "stand-in tool server: tasks/cancel of task {}"
"""What the ``task`` modes write to stderr when the client cancels a task."""
TASK_FAILED = "The stand-in's renderer ran out of ink."
"""The error message of ``--mode task-fail``'s task."""
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"


class StandInTasks(Extension):
    """The Tasks extension of the stand-in: ``stamp`` answers with a task (see the module
    docstring); the wire shapes written out as ext-tasks' ``schema.ts`` has them."""

    identifier = TASKS_EXTENSION

    def __init__(self, mode: str, polls: int, poll_ms: int) -> None:
        self.mode, self.polls, self.poll_ms = mode, polls, poll_ms
        self.tasks: dict[str, dict[str, Any]] = {}

    def methods(self) -> list[MethodBinding]:
        return [MethodBinding("tasks/get", GetTaskRequestParams, self.get),
                MethodBinding("tasks/cancel", CancelTaskRequestParams, self.cancel)]

    async def intercept_tool_call(self, params: Any, ctx: Any, call_next: Any) -> Any:
        capabilities = (ctx.meta or {}).get("io.modelcontextprotocol/clientCapabilities") or {}
        if params.name != "stamp" or TASKS_EXTENSION not in (capabilities.get("extensions") or {}):
            return await call_next(ctx)
        result = await call_next(ctx) if self.mode == "task" else None
        task_id = f"standin-{len(self.tasks) + 1}"
        self.tasks[task_id] = {"polls": 0, "status": "working", "result": result}
        return {"resultType": "task", **self._wire(task_id)}

    def _wire(self, task_id: str) -> dict[str, Any]:
        task = self.tasks[task_id]
        out = {"taskId": task_id, "status": task["status"], "statusMessage": f"stamping, poll {task['polls']}",
               "createdAt": "2026-07-28T00:00:00Z", "lastUpdatedAt": "2026-07-28T00:00:00Z", "ttlMs": 600_000,
               "pollIntervalMs": self.poll_ms}
        if task["status"] == "completed":
            out["result"] = task["result"].model_dump(by_alias=True, mode="json", exclude_none=True)
        if task["status"] == "failed":
            out["error"] = {"code": -32603, "message": TASK_FAILED}
        return out

    async def get(self, ctx: Any, params: Any) -> dict[str, Any]:
        task = self.tasks.get(params.task_id)
        if task is None:
            raise MCPError(-32602, f"No task {params.task_id[:40]!r}.")
        task["polls"] += 1
        if task["status"] == "working" and self.mode == "task" and task["polls"] >= self.polls:
            task["status"] = "completed"
        elif task["status"] == "working" and self.mode == "task-fail":
            task["status"] = "failed"
        print(POLLED.format(params.task_id, task["status"]), file=sys.stderr, flush=True)
        return {"resultType": "complete", **self._wire(params.task_id)}

    async def cancel(self, ctx: Any, params: Any) -> dict[str, Any]:
        task = self.tasks.get(params.task_id)
        if task is None:
            raise MCPError(-32602, f"No task {params.task_id[:40]!r}.")
        task["status"] = "cancelled"
        print(TASK_CANCELLED.format(params.task_id), file=sys.stderr, flush=True)
        return {"resultType": "complete"}


def stamped(data: bytes, text: str) -> tuple[bytes, tuple[int, int]]:
    """``data`` (an image) with ``text`` on a dark banner across its top, as PNG; and its size.

    Raises:
        ValueError: not an image, or larger than 40 million pixels.
    """
    try:
        image = Image.open(io.BytesIO(data))
        if image.width * image.height > MAX_PIXELS:
            raise ValueError("the image is too large")
        image = image.convert("RGB")
    except (OSError, Image.DecompressionBombError) as e:
        raise ValueError(f"not an image ({e.__class__.__name__})") from None
    draw = ImageDraw.Draw(image)
    band = max(12, image.height // 10)
    draw.rectangle((0, 0, image.width, band), fill=(20, 20, 20))
    draw.text((4, max(0, band // 2 - 6)), f"{text[:80]} [stand-in stamp]", fill=(255, 230, 0))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue(), image.size


def _bytes_of(value: str) -> bytes:
    """The bytes of a ``data:`` URI or of plain base64."""
    if value.startswith("data:"):
        value = value.split(",", 1)[1] if "," in value else ""
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise ValueError("the image must be a data: URI or base64") from None


_SUBJECTS = ("length", "mass", "temperature", "pressure", "energy", "speed", "volume", "area", "time", "angle")


def _converter(i: int) -> Any:
    def convert(value: Annotated[float, Field(description="the quantity to convert")],
                unit: Annotated[str, Field(description="the unit to convert to")]) -> str:
        return f"{value} converted to {unit} by converter {i} (stand-in tool)"

    return convert


def add_extra_tools(server: MCPServer, count: int) -> None:
    """``count`` unit-conversion tools, each describing its own subject at some length."""
    for i in range(1, count + 1):
        subject = _SUBJECTS[i % len(_SUBJECTS)]
        server.add_tool(_converter(i), name=f"convert_units_{i:04d}",
                        description=f"Convert a quantity of {subject} between units of measure, variant {i}: "
                                    f"metric, imperial and customary units, with rounding to the precision asked "
                                    f"for and the name of the target unit in the answer (stand-in catalogue tool).")


def build(mode: str = "ok", extra_tools: int = 0, polls: int = 3, poll_ms: int = 100) -> MCPServer:
    """The stand-in server; ``mode``, ``extra_tools``, ``polls`` and ``poll_ms`` as ``--mode``,
    ``--extra-tools``, ``--polls`` and ``--poll-ms`` (see the module docstring)."""
    extensions = [StandInTasks(mode, polls, poll_ms)] if mode.startswith("task") else []
    server = MCPServer("hugginggpt-standin-tools", instructions="Stand-in tools for trying HuggingGPT's MCP experts.",
                       extensions=extensions)

    @server.tool(description="Write a short text on a banner across the top of an image (a stamp or watermark).")
    async def stamp(
        image: Annotated[str, Field(description="the image, as a data: URI", json_schema_extra={"contentMediaType": "image/*"})],
        text: Annotated[str, Field(description="the words to stamp on it")],
    ) -> list[TextContent | ImageContent | ResourceLink]:
        if mode == "hang":
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:  # the client gave up: say so where its log can show it
                print(CANCELLED, file=sys.stderr, flush=True)
                raise
        if mode == "crash":
            os._exit(3)
        if mode == "link":
            return [TextContent(type="text", text="The stamped image is at file:///etc/passwd"),
                    ResourceLink(type="resource_link", uri="file:///etc/passwd", name="stamped.png", mime_type="image/png"),
                    ResourceLink(type="resource_link", uri="http://127.0.0.1:9/stamped.png", name="mirror")]
        if mode == "big":
            return [TextContent(type="text", text="stamped " * (12_000_000 // 8))]
        if mode == "garbage":
            junk = base64.b64encode(b"this is not a picture at all").decode()
            return [ImageContent(type="image", data=junk, mime_type="image/png")]
        try:
            png, (w, h) = await asyncio.to_thread(stamped, _bytes_of(image), text)
        except ValueError as e:
            raise ToolError(f"Cannot stamp: {e}.") from None
        return [TextContent(type="text", text=f"Stamped {text[:80]!r} on a {w}x{h} image (stand-in tool)."),
                ImageContent(type="image", data=base64.b64encode(png).decode(), mime_type="image/png")]

    @server.tool(description="Count the words of a text.")
    def count_words(text: Annotated[str, Field(description="the text")]) -> str:
        said = f"{len(text.split())} words (stand-in tool)"
        return (said + " ") * (100_000 // (len(said) + 1)) if mode == "big" else said

    add_extra_tools(server, extra_tools)
    return server


def main(argv: list[str] | None = None) -> None:
    """Serve the stand-in tools over stdio until the client closes the connection."""
    parser = argparse.ArgumentParser(prog="python -m sandbox.mcp_tools", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("ok", "hang", "crash", "garbage", "link", "big", "task", "task-fail",
                                           "task-forever"), default="ok")
    parser.add_argument("--polls", type=int, default=3, help="task mode: tasks/get answered 'working' before the result")
    parser.add_argument("--poll-ms", type=int, default=100, help="task modes: the pollIntervalMs suggested")
    parser.add_argument("--extra-tools", type=int, default=0, help="list this many more tools")
    parser.add_argument("--stderr-bytes", type=int, default=0, help="write this much noise to stderr first")
    args = parser.parse_args(argv)
    line = b"stand-in tool server: noise " + b"x" * 995 + b"\n"
    for _ in range(args.stderr_bytes // len(line)):
        sys.stderr.buffer.write(line)
    sys.stderr.buffer.flush()
    asyncio.run(build(args.mode, args.extra_tools, args.polls, args.poll_ms).run_stdio_async())


if __name__ == "__main__":  # pragma: no cover
    main()
