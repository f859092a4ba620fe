"""The checks an HTTP-mode delivery passes before bolt sees it.

bolt parses a request's body before it checks the signature, so an unsigned body that is not JSON
(or a timestamp like ``abc``) would end as a 500 with a traceback. Here, in this order, each
refusal is one log line and a plain-text answer:

1. ``X-Slack-Request-Timestamp`` is digits and ``X-Slack-Signature`` is the HMAC of the body
   under the signing secret, within five minutes (slack_sdk's ``SignatureVerifier``, Slack's
   "Verifying requests from Slack"): 401 otherwise;
2. the body is what Slack sends: JSON (Events API), or form-encoded with a JSON ``payload``
   (interactions) or a slash command's fields: 400 otherwise.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs

from aiohttp import web
from slack_sdk.signature import SignatureVerifier

log = logging.getLogger("adapters.slack.serve")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def body_problem(body: bytes, content_type: str) -> str | None:
    """Why ``body`` is not a Slack delivery (one phrase), or ``None``."""
    try:
        text = body.decode("utf-8")
        if content_type == "application/json":
            if not isinstance(json.loads(text), dict):
                return "the JSON body is not an object"
        elif content_type == "application/x-www-form-urlencoded":
            payload = parse_qs(text).get("payload")
            if payload and not isinstance(json.loads(payload[0]), dict):
                return "the form's payload is not a JSON object"
        else:
            return f"the content type {content_type or 'none'} is not one Slack sends"
    except (UnicodeDecodeError, ValueError) as e:
        return f"the body does not parse ({e.__class__.__name__})"
    return None


def intake(signing_secret: str, path: str) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """An aiohttp middleware checking POSTs to ``path`` (the Events API path) as the module says.

    Args:
        signing_secret: the app's signing secret (``[slack] signing_secret``).
        path: the Events API path (``[slack] path``).
    """
    verifier = SignatureVerifier(signing_secret)

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method != "POST" or request.path != path:
            return await handler(request)
        body = await request.read()
        timestamp = request.headers.get("X-Slack-Request-Timestamp", "")
        signature = request.headers.get("X-Slack-Signature")
        if not timestamp.isdigit() or not verifier.is_valid(body, timestamp, signature):
            log.info("refused an unsigned or badly signed request from %s (timestamp %r, %d bytes)",
                     request.remote, timestamp[:20], len(body))
            return web.Response(status=401, text="The request is not signed by Slack.")
        if (problem := body_problem(body, request.content_type)) is not None:
            log.info("refused a signed request from %s: %s", request.remote, problem)
            return web.Response(status=400, text="The request body is not a Slack delivery.")
        return await handler(request)

    return check
