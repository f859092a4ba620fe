"""The app manifest asks for every scope and event the Slack front end uses: the Web API methods
the code calls are read from the code itself (through slack_sdk's own client methods), each is
mapped to the scope Slack's method reference requires, and every such scope is in the manifest."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from pathlib import Path

import yaml
from slack_sdk.web import async_client
from slack_sdk.web.async_client import AsyncWebClient

from sandbox.slack_api import METHOD_SCOPES

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "deploy" / "slack-manifest.yaml"


def called_client_methods() -> set[str]:
    """Names of ``AsyncWebClient`` methods called anywhere in the product (``x.chat_update(...)``)."""
    names: set[str] = set()
    for pkg in ("adapters", "bot"):
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    if callable(getattr(AsyncWebClient, node.func.attr, None)) and not node.func.attr.startswith("_"):
                        names.add(node.func.attr)
    return names


def web_api_methods(client_method: str, seen: set[str] | None = None) -> set[str]:
    """The Web API methods (``chat.update``) one client method sends, read from slack_sdk's source:
    its ``api_call("…")``, the client methods it calls, and the helper classes it returns
    (``chat_stream`` → ``AsyncChatStream`` → ``chat.startStream`` …)."""
    seen = set() if seen is None else seen
    if client_method in seen:
        return set()
    seen.add(client_method)
    source = _code(getattr(AsyncWebClient, client_method))
    found = set(re.findall(r"api_call\(\s*['\"]([\w.]+)['\"]", source))
    for cls in re.findall(r"\b([A-Z]\w+)\(", source):
        helper = getattr(async_client, cls, None)
        if inspect.isclass(helper):
            source += _code(helper)
    for other in re.findall(r"(?:self|self\._client|client)\.(\w+)\(", source):
        if other != client_method and callable(getattr(AsyncWebClient, other, None)):
            found |= web_api_methods(other, seen)
    return found


def _code(obj: object) -> str:
    """``obj``'s source without its docstrings (their examples call other methods)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def test_the_method_reader_follows_helpers():
    assert web_api_methods("chat_update") == {"chat.update"}
    assert {"files.getUploadURLExternal", "files.completeUploadExternal"} <= web_api_methods("files_upload_v2")
    assert {"chat.startStream", "chat.appendStream", "chat.stopStream"} <= web_api_methods("chat_stream")


def test_every_called_method_has_its_scope_in_the_manifest():
    called = {api for name in called_client_methods() for api in web_api_methods(name)}
    assert {"chat.postMessage", "assistant.threads.setSuggestedPrompts", "files.completeUploadExternal"} <= called
    unknown = called - set(METHOD_SCOPES)
    assert not unknown, f"add the scope these methods need (docs.slack.dev/reference/methods): {sorted(unknown)}"
    scopes = set(yaml.safe_load(MANIFEST.read_text())["oauth_config"]["scopes"]["bot"])
    missing = {METHOD_SCOPES[m] for m in called if METHOD_SCOPES[m]} - scopes
    assert not missing, missing


def test_manifest_scopes_and_events():
    m = yaml.safe_load(MANIFEST.read_text())
    scopes = set(m["oauth_config"]["scopes"]["bot"])
    # downloads (files:read), mention events and follow-ups in every kind of conversation
    assert {"files:read", "app_mentions:read", "channels:history", "groups:history", "im:history", "mpim:history"} <= scopes
    events = set(m["settings"]["event_subscriptions"]["bot_events"])
    assert {"app_mention", "app_home_opened", "message.channels", "message.groups", "message.im"} <= events
    assert m["settings"]["socket_mode_enabled"] is True
    assert m["settings"]["interactivity"]["is_enabled"] is True  # Stop and feedback buttons (block_actions)
    assert "request_url" not in m["settings"]["event_subscriptions"]  # Socket Mode manifest
