"""Secrets, pings, access and start-up failures (issue 14), as an attacker or an unlucky operator
would meet them: the log never holds a secret (tracebacks included), the terminal never runs an
escape sequence from a model, Slack's bot token goes only to Slack's file origin, DMs follow the
allow-lists, and an unreachable Discord is one sentence."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from aiohttp import web

from bot.admission import Admission
from bot.incoming import Requester
from bot.logs import setup_logging
from bot.settings import load_settings
from sandbox.discord_server import StandinDiscord
from sandbox.faulty_controller import FaultyController
from benchmarks.harness.slack import png_file
from tests.test_slack_app import h, service  # noqa: F401 - fixtures (the stand-in Slack one is in conftest)

MEDIA = Path(__file__).parent / "fixtures" / "media"


def test_log_lines_and_tracebacks_never_hold_a_secret_or_url_password(tmp_path):
    log_file = tmp_path / "hugginggpt.log"
    setup_logging(log_file=log_file, secrets=["sk-live-abcdef123456"])
    log = logging.getLogger("test.redaction")
    try:
        raise RuntimeError("calling https://alice:pa55word@llm.internal/v1 with key sk-live-abcdef123456")
    except RuntimeError:
        log.exception("controller call failed for %s", "https://bob:hunter2@gw.example/models/x")
    for handler in logging.getLogger().handlers:
        handler.flush()
    text = log_file.read_text()
    assert "Traceback" in text and "RuntimeError" in text  # the detail is there for the operator ...
    for secret in ("sk-live-abcdef123456", "pa55word", "hunter2", "alice:", "bob:"):
        assert secret not in text  # ... without any credential
    assert "https://***@llm.internal/v1" in text and "https://***@gw.example/models/x" in text
    setup_logging()


def test_a_log_file_the_disk_refuses_is_said_once_on_stderr_not_a_traceback_per_line(tmp_path, capsys):
    target = tmp_path / "hugginggpt.log"
    target.symlink_to("/dev/full")  # every write fails with ENOSPC, as on a full disk
    setup_logging(log_file=target)
    try:
        log = logging.getLogger("test.fulldisk")
        for n in range(3):
            log.warning("line %d", n)
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "cannot be written (No space left on device)" in err
        assert "Traceback" not in err and "Logging error" not in err
        [handler] = [h for h in logging.getLogger().handlers if hasattr(h, "failing")]
        full, handler.stream = handler.stream, open(tmp_path / "writable.log", "a", encoding="utf-8")  # room again
        with contextlib.suppress(OSError):
            full.close()
        log.warning("back")
        assert "back" in (tmp_path / "writable.log").read_text() and capsys.readouterr().err == ""
        handler.stream.close()
        handler.stream = open(target, "a", encoding="utf-8")
        log.warning("full again")
        assert capsys.readouterr().err.count("cannot be written") == 1  # told again after a written line
    finally:
        for h in logging.getLogger().handlers:
            with contextlib.suppress(OSError):
                h.close()  # its stream still holds the refused line
        setup_logging()


def test_terminal_never_writes_escape_sequences_from_the_answer(tmp_path):
    c = FaultyController().start()
    try:
        c.answer = "Done.\x1b]0;pwned title\x07 \x1b[2J\x1b[31mred\x1b[0m\x9b1;1H ok\ttab\nnext line"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_"))}
        env.update({"HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data"), "HUGGINGGPT_LLM__BASE_URL": c.url,
                    "HUGGINGGPT_LLM__API_KEY": "sk-test-0000", "HUGGINGGPT_INFERENCE__BASE_URL": f"http://127.0.0.1:{c.port}"})
        p = subprocess.run([sys.executable, "-m", "hugginggpt", "run", "hello"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60)
    finally:
        c.close()
    assert p.returncode == 0, p.stderr
    assert "\x1b" not in p.stdout and "\x07" not in p.stdout and "\x9b" not in p.stdout
    assert "Done. red ok\ttab\nnext line" in p.stdout.replace("  ", " ")


def test_slack_dms_follow_the_allow_lists():
    def access(section, who):
        return Admission(load_settings(env={}, overrides={"slack": section}), "slack").access(who)

    dm = Requester("slack", "U1", ("D9",), "T1", is_dm=True)
    refused = access({"allowed_channels": ["C1"]}, dm)
    assert refused is not None and refused.reason == "dm"
    assert access({"allowed_channels": ["C1"], "allow_dms": True}, dm) is None
    assert access({}, dm) is None  # no allow-list: DMs work as before
    assert access({"allowed_users": ["U2"], "allow_dms": True}, dm).reason == "user"
    channel_refusal = access({"allowed_channels": ["C1"]}, Requester("slack", "U1", ("C2",), "T1"))
    assert "direct message" not in channel_refusal.sentence  # never suggests a route that is closed


async def test_slack_bot_token_goes_only_to_slacks_file_origin(h):  # noqa: F811 - fixture
    seen: list[str] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        return web.Response(body=(MEDIA / "chelsea.png").read_bytes(), content_type="image/png")

    app = web.Application()
    app.router.add_get("/{tail:.*}", record)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        good = png_file(h.slack)
        path = good["url_private"].split("/", 3)[3]
        for url in (f"http://127.0.0.1:{port}/{path}", f"http://localhost:{port}/{path}",
                    f"http://user:pw@127.0.0.1:{port}/{path}"):
            f = {**png_file(h.slack), "url_private": url, "url_private_download": url}
            body, _, ts = h.mention("describe this image", files=[f])
            assert (await h.deliver(body))[0] == 200
            await h.settle()
            replies = " ".join(m.text for m in h.replies(ts))
            assert "is not hosted by Slack, so I did not download it" in replies
        assert seen == []  # the other port never saw a request, let alone the token
    finally:
        await runner.cleanup()


def test_unreachable_discord_at_start_is_one_sentence_exit_2(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_", "DISCORD_"))}
    env.update({"HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data"), "DISCORD_BOT_TOKEN": "MTIz.fake.token-value",
                "HUGGINGGPT_DISCORD__API_BASE_URL": "http://127.0.0.1:9/api/v10"})
    p = subprocess.run([sys.executable, "-m", "hugginggpt", "discord", "--sandbox", "--grace", "0"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    assert "Discord cannot be reached (127.0.0.1:9" in p.stderr and "fake.token" not in p.stderr
    assert json.dumps(p.stderr).count("Error:") == 1


# ------------------------------------------------------------------------------------------------
# start-up failures of the chat front ends, as real processes: one sentence, exit 2


ROOT = Path(__file__).resolve().parents[1]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _hugginggpt(args: list[str], tmp_path: Path, env_extra: dict[str, str], *, timeout: float = 60,
                      ready: Any = None) -> tuple[int, str, str]:
    """Run ``hugginggpt ARGS`` as a process of its own (this worktree's code); returns (exit status,
    stdout, stderr). With ``ready`` (a coroutine function), SIGTERM is sent once it returns."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_", "DISCORD_", "SLACK_"))}
    env.update({"PYTHONPATH": str(ROOT), "HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data"), **env_extra})
    p = await asyncio.create_subprocess_exec(sys.executable, "-m", "hugginggpt", *args, cwd=tmp_path, env=env,
                                             stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        if ready is not None:
            await ready()
            p.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(p.communicate(), timeout)
    finally:
        if p.returncode is None:
            p.kill()
            await p.wait()
    return p.returncode, out.decode(), err.decode()


def _one_sentence(err: str, needle: str) -> None:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: ") and needle in lines[0], err


async def test_unreachable_discord_gateway_at_start_is_one_sentence_exit_2(tmp_path):
    async with StandinDiscord(MEDIA) as d:  # the REST API answers; the gateway's port is closed
        code, _, err = await _hugginggpt(["discord", "--sandbox", "--grace", "0"], tmp_path, {
            "DISCORD_BOT_TOKEN": d.token, "HUGGINGGPT_DISCORD__API_BASE_URL": d.api_base,
            "HUGGINGGPT_DISCORD__GATEWAY_URL": f"ws://127.0.0.1:{_closed_port()}/gw"})
        assert d.calls, "the bot never reached the stand-in's REST API"
    assert code == 2
    _one_sentence(err, "The Discord gateway cannot be reached (127.0.0.1:")
    log_text = (tmp_path / "data" / "logs" / "hugginggpt.log").read_text()
    assert "gateway" in log_text and d.token not in log_text  # details for the operator, no token


async def test_discord_process_with_proxy_urls_runs_and_stops_cleanly(tmp_path):
    async with StandinDiscord(MEDIA) as d:
        async def connected() -> None:
            await d.wait_for(lambda: d.identifies >= 1 and d.command_syncs >= 1, 30)

        code, _, err = await _hugginggpt(["discord", "--sandbox", "--grace", "0"], tmp_path, {
            "DISCORD_BOT_TOKEN": d.token, "HUGGINGGPT_DISCORD__API_BASE_URL": d.api_base,
            "HUGGINGGPT_DISCORD__GATEWAY_URL": d.gateway_url}, ready=connected)
    assert code == 0 and err == "", err  # ready, then stopped by SIGTERM: no sentence, no traceback


class _SlackAPI:
    """A Web API stand-in for start-up only: ``auth.test`` accepts the bot token and
    ``apps.connections.open`` hands out a websocket URL on a closed port (or refuses the app token)."""

    def __init__(self, bot_token: str, app_token: str) -> None:
        self.bot_token, self.app_token = bot_token, app_token
        self.ws_url = f"ws://127.0.0.1:{_closed_port()}/link"
        self.calls: list[str] = []

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        self.calls.append(method)
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if method == "auth.test" and token == self.bot_token:
            return web.json_response({"ok": True, "user": "hugginggpt", "user_id": "U0BOT", "team": "T",
                                      "team_id": "T0", "bot_id": "B0BOT"})
        if method == "apps.connections.open" and token == self.app_token:
            return web.json_response({"ok": True, "url": self.ws_url})
        return web.json_response({"ok": False, "error": "invalid_auth"})

    async def __aenter__(self) -> str:
        app = web.Application()
        app.router.add_post("/api/{method}", self._api)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/api/"

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()


async def test_unreachable_slack_at_start_is_one_sentence_exit_2(tmp_path):
    tokens = {"SLACK_BOT_TOKEN": "xoxb-1-start-test", "SLACK_APP_TOKEN": "xapp-1-start-test"}
    closed = f"http://127.0.0.1:{_closed_port()}/api/"
    code, _, err = await _hugginggpt(["slack", "--sandbox", "--api-url", closed], tmp_path, tokens)
    assert code == 2
    _one_sentence(err, "Slack is unreachable")

    api = _SlackAPI(tokens["SLACK_BOT_TOKEN"], tokens["SLACK_APP_TOKEN"])
    async with api as url:
        # the Web API answers, the Socket Mode websocket does not
        code, out, err = await _hugginggpt(["slack", "--sandbox", "--api-url", url], tmp_path, tokens)
        assert code == 2 and "running" not in out
        _one_sentence(err, "Slack's Socket Mode connection failed")
        assert api.calls == ["auth.test", "apps.connections.open"]
        # the app-level token is refused
        code, _, err = await _hugginggpt(["slack", "--sandbox", "--api-url", url], tmp_path,
                                         {**tokens, "SLACK_APP_TOKEN": "xapp-1-revoked"})
        assert code == 2
        _one_sentence(err, "Slack refused the app-level token (invalid_auth)")
    log_text = (tmp_path / "data" / "logs" / "hugginggpt.log").read_text()
    assert "xoxb-1-start-test" not in log_text and "xapp-1-revoked" not in log_text


async def test_slack_http_port_in_use_is_one_sentence_exit_2(tmp_path):
    tokens = {"SLACK_BOT_TOKEN": "xoxb-1-start-test", "SLACK_SIGNING_SECRET": "port-test-secret"}
    api = _SlackAPI(tokens["SLACK_BOT_TOKEN"], "")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        async with api as url:
            code, _, err = await _hugginggpt(["slack", "--sandbox", "--mode", "http", "--host", "127.0.0.1", "--port",
                                              str(port), "--api-url", url], tmp_path, tokens)
    assert code == 2
    _one_sentence(err, f"I cannot listen on 127.0.0.1:{port}")


def test_every_handler_gets_the_masked_traceback_and_bad_format_strings_never_raise(tmp_path):
    log_file = tmp_path / "hugginggpt.log"
    setup_logging(log_file=log_file, secrets=["xoxb-secret-987654"])
    seen: list[str] = []

    class Foreign(logging.Handler):  # e.g. a handler a library or a test adds later, with its own formatter
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(logging.Formatter().format(record))

    foreign = Foreign()
    root = logging.getLogger()
    root.addHandler(foreign)
    try:
        log = logging.getLogger("slack_sdk.test")
        try:
            raise ConnectionError("POST https://u:pw-42@proxy.example/api with xoxb-secret-987654 failed")
        except ConnectionError:
            log.exception("call failed")
        log.info("%d files", "many")  # a library's bad format string: logged, not raised at the caller
    finally:
        root.removeHandler(foreign)
        for handler in root.handlers:
            handler.flush()
    text = log_file.read_text()
    assert "ConnectionError" in text and "%d files" in text
    for shown in (text, *seen):
        assert "xoxb-secret-987654" not in shown and "pw-42" not in shown
    assert any("Traceback" in s and "https://***@proxy.example/api" in s for s in seen)
    setup_logging()
