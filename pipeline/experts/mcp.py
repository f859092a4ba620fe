"""The ``mcp`` runner: a task of the plan executed as a tool call on a configured MCP server
(:mod:`pipeline.mcp_tools`), its result normalised into an :class:`~pipeline.types.Output`.

Result content (MCP specification, "Tools", tool result content): text becomes the output text;
image and audio content (base64) become files of the conversation once their bytes prove to be
an image or audio (sniffed, never the server's label) within the size and pixel limits; embedded
resources the same (text or a blob); resource links are not followed (noted in the text);
``structuredContent`` is kept as data (and is the text when there is no other). A result marked
``isError``, a lost connection, an answer that breaks the protocol or media that are not what
they claim end the task as failed with one sentence. A tool that answers with an MCP task is
polled to its end by the client (:mod:`pipeline.mcp_tasks`) within the same per-task timeout;
a task that fails, is cancelled by its server or asks for input is the task's failure sentence.

Bounds, as any expert's answer (``[inference]`` settings): a result whose text and structured
content together pass ``max_json_bytes``, or whose files together pass ``max_media_bytes``, is
refused before anything of it is stored (``too_large``); text over ``max_text_chars`` is cut
(the whole kept as a file, :func:`pipeline.experts.base.condense`), and structured content over
``max_text_chars`` is kept as a ``.json`` file of the task rather than in the run's record.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ExpertError
from ..llm import Usage
from ..media import PixelLimitError, sniff
from ..mcp_tools import McpTool, Toolbox, call_arguments
from ..config import OutputLimits
from ..types import Output, Resource, ResourceSink
from .base import TaskSaver, condense, read_inputs

if TYPE_CHECKING:
    from ..mcp_tasks import TaskEnded

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolData:
    """The structured content of a tool's result (:class:`pipeline.types.TaskData`): as the tool
    returned it, or ``None`` and the id of the file that holds it when it was too long."""

    structured: Any
    file: str | None = None

    def to_json(self) -> dict[str, Any]:
        """``{"structured": ...}`` (with ``"file": id`` when the content is in that file)."""
        return {"structured": self.structured, **({"file": self.file} if self.file else {})}


class McpRunner:
    """:class:`pipeline.experts.base.ExpertRunner` for MCP tasks.

    Args:
        toolbox: the configured MCP servers.
        limits: what a result may be and keep: ``max_media_bytes`` of files and
            ``max_json_bytes`` of text and structured content together, text characters, pixels.
    """

    def __init__(self, toolbox: Toolbox, limits: OutputLimits) -> None:
        self.toolbox = toolbox
        self.limits = limits

    async def run(
        self, task: str, model: str, args: dict[str, Any], sink: ResourceSink, *, task_id: int, usage: Usage | None = None
    ) -> Output:
        """Call the tool behind ``task`` with ``args`` (text or :class:`Resource`); ``model`` is its label.

        Returns:
            The tool's text, files (images, audio) and structured content.

        Raises:
            ExpertError: ``"unavailable"`` (no such tool, server unreachable), ``"refused"``
                (arguments), ``"server"`` (the tool reported an error, the connection failed),
                ``"bad_output"`` (a result that is not what it claims), ``"too_large"``.
            HuggingGPTError: the sink's error, unchanged.
        """
        tool = self.toolbox.tool(task)
        if tool is None:
            raise ExpertError(f"No configured MCP server offers {task}.", reason="unavailable")
        inputs = await read_inputs(tool.spec, args)
        try:
            arguments = call_arguments(tool, inputs.text,
                                       {k: (v, inputs.resources[k].mime) for k, v in inputs.media.items()})
        except ValueError as e:
            raise ExpertError(str(e), reason="refused") from None
        result = await self._call(tool, arguments)
        saver = TaskSaver(sink, task, task_id, self.limits)
        return await condense(await self._output(tool, result, saver), saver)

    async def _call(self, tool: McpTool, arguments: dict[str, Any]) -> Any:
        from ..mcp_tasks import TaskEnded  # imports mcp: only once a tool is called

        try:
            session = await self.toolbox.session_for(tool)
        except ConnectionError as e:
            raise ExpertError(f"The MCP server {tool.server} cannot be reached right now.", str(e),
                              reason="unavailable") from None
        try:
            result = await session.call_tool(tool.name, arguments)
        except TaskEnded as e:  # the server ran the call as a task, which ended without a result
            log.warning("MCP tool %s: its task ended %s: %s", tool.label, e.status, _one_line(e.detail, 300))
            raise ExpertError(_task_sentence(tool, e), str(e), reason="server") from None
        except Exception as e:  # noqa: BLE001 - whatever the server or transport did is this task's failure
            log.warning("MCP tool %s failed: %s: %s", tool.label, e.__class__.__name__, e)
            if not _is_tool_error(e):
                await self.toolbox.drop(tool)  # the next call starts a fresh connection
            raise ExpertError(f"The tool {tool.label} failed ({_short(e)}).", f"{e.__class__.__name__}: {e}",
                              reason="server") from None
        if getattr(result, "is_error", False):
            said = " ".join(getattr(b, "text", "") for b in result.content if getattr(b, "type", "") == "text")
            raise ExpertError(f"The tool {tool.label} reported an error: {_one_line(said or 'no details', 200)}",
                              reason="server")
        return result

    def _check_size(self, tool: McpTool, blocks: list[Any], structured: Any) -> None:
        """Refuse a result over the byte limits before anything of it is stored.

        Raises:
            ExpertError: ``"too_large"``, naming the limit.
        """
        text = media = 0
        for block in blocks:
            kind, res = getattr(block, "type", None), getattr(block, "resource", None)
            if kind == "text":
                text += len(str(block.text).encode("utf-8"))
            elif kind in ("image", "audio"):
                media += len(str(block.data)) * 3 // 4
            elif kind == "resource" and getattr(res, "blob", None) is not None:
                media += len(str(res.blob)) * 3 // 4
            elif kind == "resource" and getattr(res, "text", None) is not None:
                text += len(str(res.text).encode("utf-8"))
        if structured is not None:
            text += len(json.dumps(structured, ensure_ascii=False).encode("utf-8"))
        for seen, limit, what, setting in ((text, self.limits.max_json_bytes, "text and data", "max_json_bytes"),
                                           (media, self.limits.max_media_bytes, "files", "max_media_bytes")):
            if seen > limit:
                raise ExpertError(f"The tool {tool.label} returned {seen / 1e6:,.1f} MB of {what}, more than the limit "
                                  f"of {limit / 1e6:,.1f} MB, so its result was not kept.",
                                  f"{tool.label}: {seen} bytes of {what} (setting [inference] {setting} = {limit})",
                                  reason="too_large")

    async def _output(self, tool: McpTool, result: Any, saver: TaskSaver) -> Output:
        blocks = list(getattr(result, "content", None) or [])
        structured = getattr(result, "structured_content", None)
        self._check_size(tool, blocks, structured)
        texts: list[str] = []
        files: list[Resource] = []
        for block in blocks:
            kind = getattr(block, "type", None)
            if kind == "text":
                texts.append(str(block.text))
            elif kind in ("image", "audio"):
                files.append(await self._media(tool, str(block.data), kind, saver))
            elif kind == "resource":
                res = block.resource
                if getattr(res, "blob", None) is not None:
                    files.append(await self._media(tool, str(res.blob), None, saver))
                elif getattr(res, "text", None) is not None:
                    texts.append(str(res.text))
            elif kind == "resource_link":
                texts.append(f"(The tool returned a link, {_one_line(getattr(block, 'name', ''), 60)!r}, that was not followed.)")
        data = await self._data(tool, structured, texts, files, saver)
        if not texts and not files:
            raise ExpertError(f"The tool {tool.label} returned nothing usable.", reason="bad_output")
        return Output(text="\n".join(texts).strip() or None, files=files, data=data)

    async def _data(self, tool: McpTool, structured: Any, texts: list[str], files: list[Resource],
                    saver: TaskSaver) -> ToolData | None:
        """The structured content as data (and as the text when there is no other); kept in a
        ``.json`` file instead when longer than ``max_text_chars`` (``texts``/``files`` grow)."""
        if structured is None:
            return None
        encoded = json.dumps(structured, ensure_ascii=False)
        if len(encoded) <= self.limits.max_text_chars:
            if not texts:
                texts.append(encoded)
            return ToolData(structured)
        full = await saver.file(encoded.encode("utf-8"), "text", "application/json",
                                f"structured result of {tool.label} ({len(encoded):,} characters)")
        files.append(full)
        texts.append(f"(The tool's structured result, {len(encoded):,} characters, is in {full.id}.)")
        return ToolData(None, full.id)

    async def _media(self, tool: McpTool, encoded: str, claimed: str | None, saver: TaskSaver) -> Resource:
        try:
            data = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise ExpertError(f"The tool {tool.label} returned a file that is not valid base64.", reason="bad_output") from None
        found = sniff(data)
        if found is None or (claimed is not None and found.kind != claimed):
            what = f"{claimed} that is not one" if claimed else "file that is not an image, audio or video"
            raise ExpertError(f"The tool {tool.label} returned an {what}.", reason="bad_output")
        what = f"{found.kind} returned by {tool.label}"
        if found.kind == "image":
            try:
                return await saver.image(data, what)
            except PixelLimitError as e:
                raise ExpertError("The tool's image has too many pixels to process safely.", str(e),
                                  reason="too_large") from None
            except (OSError, ValueError, SyntaxError) as e:  # Pillow could not read the header
                raise ExpertError(f"The tool {tool.label} returned an image that cannot be read.", str(e),
                                  reason="bad_output") from None
        return await saver.file(data, found.kind, found.mime, f"{what} ({len(data):,} bytes)")


def _task_sentence(tool: McpTool, ended: TaskEnded) -> str:
    """The user's sentence for a task of ``tool`` that ended without a result
    (:class:`pipeline.mcp_tasks.TaskEnded`); what the server said is cut to one line."""
    said = _one_line(ended.detail, 200).rstrip(".")
    if ended.status == "failed":
        return f"The tool {tool.label} failed: {said or 'its server gave no reason'}."
    if ended.status == "cancelled":
        return f"The tool {tool.label} was cancelled by its server before it finished{': ' + said if said else ''}."
    if ended.status == "input_required":
        return f"The tool {tool.label} asked for input that HuggingGPT cannot give it, so its task was cancelled."
    return f"The tool {tool.label} finished its task without a result."


def _is_tool_error(e: Exception) -> bool:
    """An error answer to the call (the connection itself is fine)."""
    from mcp.shared.exceptions import MCPError

    return isinstance(e, MCPError) and "closed" not in str(e).lower()


def _short(e: BaseException) -> str:
    from mcp.shared.exceptions import MCPError

    if isinstance(e, MCPError):
        return _one_line(e.message, 120) or "an error answer"
    return "the connection to its server failed" if isinstance(e, (OSError, EOFError)) else "an unusable answer"


def _one_line(text: Any, limit: int) -> str:
    words = " ".join(str(text or "").split())
    return words if len(words) <= limit else words[: limit - 1] + "…"
