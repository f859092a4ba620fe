"""MCP tools as experts: ``hugginggpt run --sandbox`` (a real subprocess) with ``[mcp] servers``
pointing at the sandbox's stand-in MCP tool server (a real ``mcp`` SDK server over stdio).

The sandbox planner plans the tool the request names; its image result feeds a later Hub task;
a tool server that hangs, crashes or returns garbage ends as that task's failure with a
sentence while the rest of the run finishes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from bot.backends import pipeline_config
from bot.settings import Settings
from pipeline.mcp_tools import Toolbox, call_arguments, tool_from_listing
from pipeline.tasks import TASKS
from tests.conftest import mcp_server

MEDIA = Path(__file__).parent / "fixtures" / "media"
ROOT = Path(__file__).parents[1]


def run(tmp_path: Path, text: str, modes: dict[str, str], task_timeout: float = 60) -> tuple[subprocess.CompletedProcess, dict]:
    """``hugginggpt run --sandbox --json TEXT --file chelsea.png`` with one stand-in tool server
    per entry of ``modes`` (server name → its ``--mode``) in ``[mcp] servers``."""
    config = tmp_path / "hugginggpt.toml"
    lines = [f"[inference]\ntask_timeout = {task_timeout}\n"]
    for name, mode in modes.items():
        lines.append(f"[mcp.servers.{name}]\ncommand = {json.dumps(sys.executable)}\nconnect_timeout = 90\n"
                     f'args = ["-m", "sandbox.mcp_tools", "--mode", "{mode}"]\n'
                     f"env = {{ PYTHONPATH = {json.dumps(str(ROOT))} }}\n")  # this checkout's stand-in, not the installed one
    config.write_text("\n".join(lines), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_TOKEN"))}
    env["HUGGINGGPT_STORAGE__DATA_DIR"] = str(tmp_path / "data")
    p = subprocess.run([sys.executable, "-m", "hugginggpt", "--config", str(config), "run", "--sandbox", "--json", text,
                        "--file", str(MEDIA / "chelsea.png")], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert "Traceback" not in p.stdout, p.stdout
    return p, json.loads(p.stdout)


@pytest.mark.slow
def test_a_planned_tool_stamps_the_photo_and_a_hub_task_detects_objects_in_its_result(tmp_path):
    p, doc = run(tmp_path, 'Stamp "HELLO" on chelsea.png, then detect the objects in the stamped picture.',
                 {"standin": "ok"})
    assert p.returncode == 0, p.stderr
    stamp, detect = doc["tasks"]
    assert stamp["task"] == "mcp.standin.stamp" and stamp["args"] == {"image": "image-1", "text": "HELLO"}
    assert detect["task"] == "object-detection" and detect["dep"] == [0] and detect["args"] == {"image": "<resource>-0"}
    assert doc["selections"]["0"]["runner"] == "mcp" and doc["selections"]["0"]["model"] == "mcp:standin/stamp"
    assert doc["selections"]["1"]["runner"] == "hub"
    out = doc["results"]["0"]["output"]
    assert "Stamped 'HELLO' on a 451x300 image" in out["text"]
    [stamped] = out["files"]
    original = Image.open(MEDIA / "chelsea.png").convert("RGB")
    image = Image.open(stamped["path"]).convert("RGB")
    assert image.size == original.size and image.getpixel((2, 2)) != original.getpixel((2, 2))  # the banner
    assert image.getpixel((200, 200)) == original.getpixel((200, 200))  # the rest untouched
    # the Hub task got the tool's image: its annotated picture is the stamped photo with boxes
    [boxes] = doc["results"]["1"]["output"]["files"]
    assert doc["results"]["1"]["status"] == "ok" and Image.open(boxes["path"]).size == (451, 300)
    assert doc["response"]


@pytest.mark.slow
def test_tool_servers_that_hang_crash_or_return_garbage_fail_their_tasks_and_the_rest_of_the_run_goes_on(tmp_path):
    modes = {"hangs": "hang", "crashes": "crash", "garbles": "garbage"}
    p, doc = run(tmp_path, 'Stamp "HI" on chelsea.png. Also describe chelsea.png.', modes, task_timeout=3)
    assert p.returncode == 6, p.stderr  # answered, but tasks failed
    tasks = {t["task"]: str(t["id"]) for t in doc["tasks"]}
    assert set(tasks) == {"mcp.hangs.stamp", "mcp.crashes.stamp", "mcp.garbles.stamp", "image-to-text"}
    sentences = {
        "mcp.hangs.stamp": "mcp:hangs/stamp did not answer within 3 seconds",
        "mcp.crashes.stamp": "The tool mcp:crashes/stamp failed",
        "mcp.garbles.stamp": "The tool mcp:garbles/stamp returned an image that is not one",
    }
    for task, sentence in sentences.items():
        result = doc["results"][tasks[task]]
        assert result["status"] == "failed" and sentence in result["error"], result["error"]
        assert result["error"].endswith(".") and "\n" not in result["error"]
    caption = doc["results"][tasks["image-to-text"]]
    assert caption["status"] == "ok" and caption["output"]["text"]
    assert doc["status"] == "partial" and doc["response"]


async def test_tools_of_a_server_become_tasks_with_argument_kinds_from_their_schema():
    box = Toolbox([mcp_server("standin", command=sys.executable, args=("-m", "sandbox.mcp_tools"))])
    try:
        names = await box.task_names()
        assert names == {"mcp.standin.stamp", "mcp.standin.count-words"}
        stamp = box.tool("mcp.standin.stamp")
        assert TASKS["mcp.standin.stamp"] is stamp.spec
        assert stamp.spec.required == {"image": "image", "text": "text"}
        assert "words to stamp" in stamp.spec.description and "MCP server standin" in stamp.spec.description
        assert box.tool("object-detection") is None and box.tool("mcp.other.stamp") is None
    finally:
        await box.aclose()
    assert "mcp.standin.stamp" not in TASKS  # taken out of the registry on close


async def test_links_a_tool_returns_are_never_followed(sink):
    from pipeline.experts.mcp import McpRunner
    from tests.conftest import stored_upload

    box = Toolbox([mcp_server("linky", command=sys.executable, args=("-m", "sandbox.mcp_tools", "--mode", "link"),
                                   connect_timeout=90)])
    try:
        await box.task_names()
        photo = await stored_upload(sink, (MEDIA / "chelsea.png").read_bytes(), "chelsea.png", "image/png")
        out = await McpRunner(box, pipeline_config(Settings()).output).run("mcp.linky.stamp", "mcp:linky/stamp", {"image": photo, "text": "HI"}, sink, task_id=0)
    finally:
        await box.aclose()
    assert out.files == []  # neither the path nor the URL was read
    assert "file:///etc/passwd" in out.text and "'stamped.png', that was not followed" in out.text
    assert "root:" not in out.text


async def test_unreachable_server_offers_no_tool_and_says_why_in_the_log(caplog):
    box = Toolbox([mcp_server("gone", command=sys.executable, args=("-c", "import sys; sys.exit(1)"),
                                   connect_timeout=5)])
    try:
        assert await box.task_names() == frozenset()
    finally:
        await box.aclose()
    assert any("MCP server gone could not be used" in r.getMessage() for r in caplog.records)


def test_text_arguments_are_converted_to_the_schema_types_and_files_sent_as_data_uris():
    class Listed:
        name = "Resize_Image"
        description = "Resize an image."
        input_schema = {"type": "object", "required": ["photo", "width"], "properties": {
            "photo": {"type": "string", "contentMediaType": "image/png", "contentEncoding": "base64"},
            "width": {"type": "integer"}, "keepRatio": {"type": "boolean"}, "tags": {"type": "array"}}}

    tool = tool_from_listing("imgs", Listed())
    assert tool.task == "mcp.imgs.resize-image" and tool.spec.required == {"photo": "image", "width": "text"}
    assert tool.spec.optional == {"keepratio": "text", "tags": "text"}
    args = call_arguments(tool, {"width": "64", "keepratio": "yes", "tags": '["a", "b"]'}, {"photo": (b"\x89PNG", "image/png")})
    assert args == {"width": 64, "keepRatio": True, "tags": ["a", "b"], "photo": "iVBORw=="}
    with pytest.raises(ValueError, match="'width' of mcp:imgs/Resize_Image must be integer"):
        call_arguments(tool, {"width": "wide"}, {})


async def test_a_tool_servers_stderr_reaches_its_log_only_up_to_the_cap(tmp_path, caplog, sink):
    """A server that writes 8 MB to stderr on start: its log keeps 64 KiB and says the rest was
    cut (one warning), an older, larger log is moved aside, and the server still answers."""
    from pipeline.experts.mcp import McpRunner

    logs = tmp_path / "logs"
    logs.mkdir()
    older = b"an earlier start\n" * 10_000
    (logs / "mcp-noisy.log").write_bytes(older)
    cap = 64 * 1024
    box = Toolbox([mcp_server("noisy", command=sys.executable, connect_timeout=90, errlog=logs / "mcp-noisy.log",
                                   args=("-m", "sandbox.mcp_tools", "--stderr-bytes", str(8 << 20)), max_log_bytes=cap)])
    try:
        assert await box.task_names() == {"mcp.noisy.stamp", "mcp.noisy.count-words"}
        out = await McpRunner(box, pipeline_config(Settings()).output).run("mcp.noisy.count-words", "mcp:noisy/count-words", {"text": "one two three"},
                                       sink, task_id=0)
        assert out.text.startswith("3 words")
    finally:
        await box.aclose()
    kept = (logs / "mcp-noisy.log").read_bytes()
    assert kept.startswith(b"stand-in tool server: noise") and len(kept) <= cap + 200
    assert kept.rstrip().endswith(b"the rest of its output is discarded]")
    assert (logs / "mcp-noisy.log.1").read_bytes() == older
    cut = [r for r in caplog.records if "MCP server noisy wrote more than 65536 bytes" in r.getMessage()]
    assert len(cut) == 1 and cut[0].levelname == "WARNING"


def stored_bytes(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


async def test_a_large_tool_result_is_bounded_like_any_experts_answer(tmp_path, sink):
    """12 MB of text (over [inference] max_json_bytes) is refused before anything is stored; a
    100,000-character answer is cut in the record, its text and structured content kept as files."""
    from pipeline.errors import ExpertError
    from pipeline.experts.mcp import McpRunner
    from tests.conftest import stored_upload

    box = Toolbox([mcp_server("big", command=sys.executable, args=("-m", "sandbox.mcp_tools", "--mode", "big"),
                                   connect_timeout=90)])
    runner = McpRunner(box, pipeline_config(Settings(inference=dict(max_json_bytes=8 << 20))).output)
    try:
        await box.task_names()
        photo = await stored_upload(sink, (MEDIA / "chelsea.png").read_bytes(), "chelsea.png", "image/png")
        before = stored_bytes(tmp_path / "data")
        with pytest.raises(ExpertError) as info:
            await runner.run("mcp.big.stamp", "mcp:big/stamp", {"image": photo, "text": "HI"}, sink, task_id=0)
        out = await runner.run("mcp.big.count-words", "mcp:big/count-words", {"text": "one two"}, sink, task_id=1)
    finally:
        await box.aclose()
    assert info.value.reason == "too_large"
    assert info.value.user_message == ("The tool mcp:big/stamp returned 12.0 MB of text and data, more than the limit "
                                       "of 8.4 MB, so its result was not kept.")
    assert len(out.text) <= 20_000 and out.text.startswith("2 words") and "[cut: " in out.text
    assert out.data.to_json()["structured"] is None  # the record keeps no 100,000 characters of it
    json_file = next(f for f in out.files if f.mime == "application/json")
    assert out.data.to_json()["file"] == json_file.id and json_file.size > 90_000
    assert stored_bytes(tmp_path / "data") - before < 300_000  # the two files, nothing of the 12 MB


async def test_a_server_listing_3000_tools_still_runs_offering_the_planner_the_closest_ones(sandbox, tmp_path):
    """Through the real MCP client of our server: a tool server lists 3,002 tools; the planning
    prompt shows at most [mcp] max_tools of them within max_tool_chars, the stamp tool the
    request names among them, a note says how many were left out, and the run succeeds."""
    import base64

    from mcp import Client

    from adapters.mcp import build_server
    from bot.service import Service
    from bot.settings import load_settings

    server = {"command": sys.executable, "args": ["-m", "sandbox.mcp_tools", "--extra-tools", "3000"],
              "connect_timeout": 180}
    settings = load_settings(env={}, overrides={**sandbox.overrides(tmp_path / "data"),
                                                "mcp": {"servers": {"many": server}, "max_tools": 30}})
    photo = "data:image/png;base64," + base64.b64encode((MEDIA / "chelsea.png").read_bytes()).decode()
    service = await Service.create(settings)
    try:
        async with Client(build_server(service)) as client:
            result = await client.call_tool("hugginggpt", {"request": 'Stamp "HELLO" on this photo', "files": [photo]})
    finally:
        await service.close()
    doc = result.structured_content
    assert not result.is_error and doc["status"] == "ok", doc
    assert [t["task"] for t in doc["tasks"]] == ["mcp.many.stamp"] and doc["results"]["0"]["status"] == "ok"
    assert any(n.startswith("The MCP servers list 3,002 tools, more than the planner can be shown: the ")
               and n.endswith("were left out.") for n in doc["notes"]), doc["notes"]
    [planning] = [r for r in sandbox.controller.requests if r.stage == "task-planning"]
    system = planning.body["messages"][0]["content"]
    offered = [line for line in system.splitlines() if line.startswith("- mcp.many.")]
    assert "- mcp.many.stamp: " in system and 1 < len(offered) <= 30
    assert sum(len(line) for line in offered) <= settings.mcp.max_tool_chars
    assert len(json.dumps(planning.body)) < 100_000  # 3,002 tools would be over 1.5 MB


@pytest.mark.parametrize("protocol, spoken", [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28"),
                                              ("auto", "2026-07-28")])
async def test_a_tool_server_is_spoken_to_in_the_era_the_setting_names(protocol, spoken, sink):
    """The official client settles the era: the initialize handshake, the stateless revision
    (no handshake, ``_meta`` on each request) or ``server/discover`` first; the photo is stamped
    the same way in each."""
    from pipeline.experts.mcp import McpRunner
    from tests.conftest import stored_upload

    box = Toolbox([mcp_server("standin", command=sys.executable, args=("-m", "sandbox.mcp_tools"),
                              connect_timeout=90, protocol=protocol)])
    try:
        assert await box.task_names() == {"mcp.standin.stamp", "mcp.standin.count-words"}
        assert box.servers["standin"].session.protocol_version == spoken
        photo = await stored_upload(sink, (MEDIA / "chelsea.png").read_bytes(), "chelsea.png", "image/png")
        out = await McpRunner(box, pipeline_config(Settings()).output).run(
            "mcp.standin.stamp", "mcp:standin/stamp", {"image": photo, "text": "HI"}, sink, task_id=0)
    finally:
        await box.aclose()
    [stamped] = out.files
    assert "Stamped 'HI' on a 451x300 image" in out.text and Image.open(stamped.path).size == (451, 300)


@pytest.mark.parametrize("protocol", ["legacy", "2026-07-28"])
async def test_a_tool_call_cut_at_its_deadline_is_cancelled_on_the_tool_server(protocol, tmp_path, sink):
    """A tool that never answers: the run's time limit cancels the call, the SDK tells the tool
    server (its stamp stops: its own log says so), and the connection serves the next call."""
    from pipeline.experts.mcp import McpRunner
    from sandbox.mcp_tools import CANCELLED
    from tests.conftest import stored_upload

    log_file = tmp_path / "mcp-hangs.log"
    box = Toolbox([mcp_server("hangs", command=sys.executable, args=("-m", "sandbox.mcp_tools", "--mode", "hang"),
                              connect_timeout=90, errlog=log_file, protocol=protocol)])
    runner = McpRunner(box, pipeline_config(Settings()).output)
    try:
        await box.task_names()
        photo = await stored_upload(sink, (MEDIA / "chelsea.png").read_bytes(), "chelsea.png", "image/png")
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(2):
                await runner.run("mcp.hangs.stamp", "mcp:hangs/stamp", {"image": photo, "text": "HI"}, sink, task_id=0)
        for _ in range(100):
            if CANCELLED in log_file.read_text():
                break
            await asyncio.sleep(0.1)
        assert CANCELLED in log_file.read_text()
        out = await runner.run("mcp.hangs.count-words", "mcp:hangs/count-words", {"text": "still here"}, sink, task_id=1)
        assert out.text.startswith("2 words")
    finally:
        await box.aclose()


def test_a_tool_that_runs_only_as_an_mcp_task_is_not_offered(caplog):
    """A tool that declares ``execution.taskSupport: "required"`` (MCP 2025-11-25) would refuse
    a call that does not ask for a task of that revision, which this client does not speak (it
    follows the 2026-07-28 Tasks extension, tests/test_mcp_tasks.py): it is left out, saying
    why; a tool that only allows tasks is offered and called plainly."""
    from mcp import types

    def listed(support: str | None) -> types.Tool:
        return types.Tool(name="generate_video", input_schema={"type": "object", "properties": {"prompt": {"type": "string"}}},
                          execution=types.ToolExecution(task_support=support))

    assert tool_from_listing("gen", listed("required")) is None
    assert any("runs only as a 2025-11-25 MCP task" in r.getMessage() for r in caplog.records)
    assert tool_from_listing("gen", listed("optional")).task == "mcp.gen.generate-video"
    assert tool_from_listing("gen", listed(None)).task == "mcp.gen.generate-video"
