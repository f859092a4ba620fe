"""Secrets, pings, access and start-up failures (issue 14), as an attacker or an unlucky operator
would meet them: the log never holds a secret (tracebacks included), the terminal never runs an
escape sequence from a model, Slack's bot token goes only to Slack's file origin, DMs follow the
allow-lists, and an unreachable Discord is one sentence."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from aiohttp import web

from bot.admission import Admission, Requester
from bot.logs import setup_logging
from bot.settings import load_settings
from tests.standins.faulty_controller import FaultyController
from tests.test_slack_app import h, png_file, service, slack  # noqa: F401 - fixtures

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


def test_terminal_never_writes_escape_sequences_from_the_answer(tmp_path):
    c = FaultyController().start()
    try:
        c.answer = "Done.\x1b]0;pwned title\x07 \x1b[2J\x1b[31mred\x1b[0m\x9b1;1H ok\ttab\nnext line"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_"))}
        env.update({"HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data"), "HUGGINGGPT_LLM__BASE_URL": c.url,
                    "HUGGINGGPT_LLM__API_KEY": "sk-test-0000", "HUGGINGGPT_INFERENCE__BASE_URL": f"http://127.0.0.1:{c.port}"})
        p = subprocess.run([sys.executable, "-m", "bot.cli", "run", "hello"], cwd=tmp_path, env=env,
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
    p = subprocess.run([sys.executable, "-m", "bot.cli", "discord", "--sandbox", "--grace", "0"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    assert "Discord cannot be reached (127.0.0.1:9" in p.stderr and "fake.token" not in p.stderr
    assert json.dumps(p.stderr).count("Error:") == 1
