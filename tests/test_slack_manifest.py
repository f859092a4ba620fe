"""The app manifest asks for every scope and event the Slack front end uses."""

from __future__ import annotations

from pathlib import Path

import yaml

from standins.slack_api import METHOD_SCOPES

MANIFEST = Path(__file__).resolve().parents[1] / "deploy" / "slack-manifest.yaml"


def test_manifest_scopes_and_events():
    m = yaml.safe_load(MANIFEST.read_text())
    scopes = set(m["oauth_config"]["scopes"]["bot"])
    # Web API methods the bot calls, plus downloads (files:read) and mention events
    assert set(METHOD_SCOPES.values()) | {"files:read", "app_mentions:read", "im:history", "groups:history"} <= scopes
    events = set(m["settings"]["event_subscriptions"]["bot_events"])
    assert {"app_mention", "app_home_opened", "message.channels", "message.groups", "message.im"} <= events
    assert m["settings"]["socket_mode_enabled"] is True
    assert m["settings"]["interactivity"]["is_enabled"] is True  # Stop and feedback buttons (block_actions)
    assert "request_url" not in m["settings"]["event_subscriptions"]  # Socket Mode manifest
