"""The Slack front end on slack-bolt (async): one app, one set of listeners for both transports.

``create_bolt_app(settings, service)`` builds the ``AsyncApp`` that Socket Mode
(``AsyncSocketModeHandler``) and HTTP mode (``app.web_app()`` / Events API) both serve; tests build
the same app production runs (collmbo's app factory; ChatGPT-in-Slack's single
``register_listeners``). The listeners are plain functions: requests go to
:class:`adapters.slack.handler.SlackBot`, the buttons and the DM opening to
:mod:`adapters.slack.controls`, a gone process's leftovers to :mod:`adapters.slack.recovery`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import ConfigError
from bot.settings import Settings

from . import controls, recovery
from .handler import EMPTY_REQUEST, STARTED_OVER, SlackBot
from .live import FEEDBACK_ACTION, STOP_ACTION

if TYPE_CHECKING:
    from bot.service import Service

__all__ = ["EMPTY_REQUEST", "STARTED_OVER", "SlackApp", "SlackBot", "create_bolt_app", "register_listeners"]

log = logging.getLogger(__name__)


def register_listeners(app: AsyncApp, bot: SlackBot) -> None:
    """Register the listeners on ``app`` (the same for Socket Mode and HTTP mode).

    Events: ``app_mention`` and ``message`` (channels, groups, im) both go through
    :meth:`SlackBot.on_event`, which deduplicates them; ``app_home_opened`` and the Stop and
    feedback buttons go to :mod:`adapters.slack.controls`.
    """

    @app.event("app_mention")
    async def on_app_mention(body: dict, event: dict, context: dict) -> None:
        bot.on_event(body, event, context.get("bot_user_id"), context.get("bot_id"))

    @app.event("message")
    async def on_message(body: dict, event: dict, context: dict) -> None:
        bot.on_event(body, event, context.get("bot_user_id"), context.get("bot_id"))

    @app.event("app_home_opened")
    async def on_home_opened(event: dict) -> None:
        await controls.on_home_opened(bot.client, event)

    @app.action(STOP_ACTION)
    async def on_stop(ack: Any, body: dict) -> None:
        await ack()
        await controls.on_stop(bot, body)

    @app.action(FEEDBACK_ACTION)
    async def on_feedback(ack: Any, body: dict) -> None:
        await ack()
        await controls.on_feedback(bot, body)

    @app.error
    async def on_error(error: Exception, body: dict) -> None:
        log.error("bolt listener error for event %s: %r", (body or {}).get("event_id"), error)


@dataclass(frozen=True)
class SlackApp:
    """What :func:`create_bolt_app` builds: bolt's ``app`` (served by Socket Mode or HTTP) and the
    :class:`SlackBot` behind its listeners (for shutdown and stats)."""

    app: AsyncApp
    bot: SlackBot


def create_bolt_app(settings: Settings, service: Service, client: AsyncWebClient | None = None, *,
                    update_interval: float = 1.0) -> SlackApp:
    """Build the bolt ``AsyncApp`` for Socket Mode and HTTP mode, with its listeners.

    Args:
        settings: all settings; ``[slack] bot_token`` is required, ``signing_secret`` is used to
            verify HTTP requests (bad signature: 401).
        service: the service the requests go to; its interrupted turns and adopted deliveries
            reach this bot (:func:`adapters.slack.recovery.listen`).
        client: an ``AsyncWebClient`` to use (tests point it at a stand-in); default: a client
            for ``https://slack.com/api/`` with the bot token.
        update_interval: minimum seconds between two edits of one status message.

    Returns:
        The app and its bot.

    Raises:
        ConfigError: no bot token.
    """
    s = settings.slack
    token = s.bot_token.get_secret_value() if s.bot_token else None
    if client is None:
        if not token:
            raise ConfigError("The Slack bot token is not set: set SLACK_BOT_TOKEN, HUGGINGGPT_SLACK__BOT_TOKEN or [slack] bot_token.")
        client = AsyncWebClient(token=token)
    if not any(isinstance(h, AsyncRateLimitErrorRetryHandler) for h in client.retry_handlers):
        client.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=2))
    secret = s.signing_secret.get_secret_value() if s.signing_secret else ""
    app = AsyncApp(
        client=client,
        signing_secret=secret,
        process_before_response=False,
        logger=logging.getLogger("adapters.slack.bolt"),
    )
    bot = SlackBot(settings, service, client, update_interval=update_interval)
    register_listeners(app, bot)
    recovery.listen(bot, service)
    return SlackApp(app, bot)
