"""The building blocks of the settings and the front ends' sections (``[discord]``, ``[slack]``,
``[server]``); :mod:`bot.settings` assembles them and is the only reader of the environment and the
config file."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic_settings import NoDecode

MiB = 1024 * 1024
GiB = 1024 * MiB
DAY = 86400.0


def env_list(v: Any) -> Any:
    """A list from the environment: JSON (``["a", "b"]``) or comma-separated (``a,b``); else ``v``."""
    if isinstance(v, str):
        text = v.strip()
        if text.startswith("["):
            try:
                return json.loads(text)
            except ValueError:
                raise ValueError("not a valid JSON list") from None
        return [k.strip() for k in text.split(",") if k.strip()]
    return v


class Section(BaseModel):
    """A ``[section]`` of the config: unknown keys are refused (with the nearest valid key)."""

    model_config = ConfigDict(extra="forbid")


def secret(value: SecretStr | str | None) -> str | None:
    """The plain value of a secret setting (``SecretStr``), a plain string as is, ``None`` as is."""
    if value is None:
        return None
    return value.get_secret_value() if isinstance(value, SecretStr) else str(value)


class DiscordSettings(Section):
    """``[discord]``: the Discord front end."""

    token: SecretStr | None = Field(None, description="the bot's token (DISCORD_BOT_TOKEN)")
    api_base_url: str | None = Field(
        None, pattern=r"^https?://", description="Discord REST API base (a proxy); default https://discord.com/api/v10"
    )
    gateway_url: str | None = Field(
        None, pattern=r"^wss?://", description="Discord gateway websocket (a proxy); default wss://gateway.discord.gg/"
    )
    command_name: str = Field("ask", pattern=r"^[-_a-z0-9]{1,32}$", description="the slash command's name")
    allowed_guilds: list[int] = Field(default_factory=list, description="server (guild) ids the bot answers in; empty: any")
    allowed_channels: list[int] = Field(default_factory=list, description="channel ids the bot answers in (a thread counts as its channel); empty: any")
    allowed_roles: list[int] = Field(default_factory=list, description="role ids of the members it answers; empty: anyone")
    rate_limit_per_minute: int = Field(6, ge=0, le=10_000, description="0: no limit")
    max_concurrent_runs: int = Field(2, ge=1, le=1000, description="runs in flight per user")
    followups_need_mention: bool = Field(False, description="messages in the bot's threads must mention it to be answered")


class SlackSettings(Section):
    """``[slack]``: the Slack front end."""

    bot_token: SecretStr | None = Field(None, description="the app's bot token, xoxb-... (SLACK_BOT_TOKEN)")
    app_token: SecretStr | None = Field(None, description="Socket Mode's app-level token, xapp-... (SLACK_APP_TOKEN)")
    signing_secret: SecretStr | None = Field(None, description="HTTP mode's signing secret (SLACK_SIGNING_SECRET)")
    mode: Literal["socket", "http"] = Field("socket", description="Socket Mode (no public URL) or the HTTP Events API")
    host: str = Field("0.0.0.0", description="HTTP mode: address to bind (--host)")
    port: int = Field(3000, ge=1, le=65535, description="HTTP mode: port to listen on (--port)")
    path: str = Field("/slack/events", pattern=r"^/", description="HTTP mode: the Events API request URL's path")
    allowed_channels: list[str] = Field(default_factory=list, description="channel ids the bot answers in; empty: any")
    allowed_users: list[str] = Field(default_factory=list, description="user ids it answers; empty: anyone")
    allow_dms: bool | None = Field(
        None, description="direct messages; default: allowed unless allowed_channels is set (allowed_users always applies)"
    )
    rate_limit_per_minute: int = Field(6, ge=0, le=10_000, description="0: no limit")
    followups_need_mention: bool = Field(False, description="replies in the bot's threads must mention it to be "
                                         "answered (formerly followups_without_mention, its opposite)")
    admins: list[str] = Field(default_factory=list, description="user ids who may stop anyone's run")
    streaming: bool = Field(True, description="the plan as task cards and the answer in a chat stream; "
                            "false: a status message edited with chat.update")


class ServerSettings(Section):
    """``[server]``: the HTTP API (``hugginggpt serve``; docs/http-api.md).

    ``api_keys`` are the bearer tokens clients send (``Authorization: Bearer KEY``, as the OpenAI
    API); several may be set (one per client, rotation). From the environment,
    ``HUGGINGGPT_SERVER__API_KEYS`` takes a JSON list or comma-separated keys. With no key the
    server only starts bound to a loopback address and only answers loopback peers.
    """

    api_keys: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list, description="bearer tokens of the clients")
    host: str = Field("127.0.0.1", description="address to bind (--host)")
    port: int = Field(8000, ge=0, le=65535, description="port to listen on (--port; 0: any free port)")
    max_body_bytes: int = Field(
        40 * MiB, ge=1024, le=4 * GiB, description="bytes, largest request body (413 beyond); base64 adds a third to files"
    )
    rate_limit_per_minute: int = Field(30, ge=0, le=100_000, description="requests per API key per minute; 0: no limit")
    max_concurrent_runs: int = Field(4, ge=1, le=10_000, description="runs in flight per API key (429 beyond)")
    allowed_url_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="hosts whose http(s) image/audio URLs may be fetched ('*.example.org' for subdomains); empty: none",
    )
    url_timeout: float = Field(20.0, gt=0, le=600, description="seconds to download one remote image/audio URL")
    progress: Literal["reasoning", "preamble", "none"] = Field(
        "reasoning", description="how a streamed reply shows the plan's progress: reasoning_content deltas, a short "
                                 "preamble in the content, or nothing",
    )
    public_url: str | None = Field(
        None, pattern=r"^https?://", description="base URL clients reach the server at, for file links (default: the "
                                                 "address the server is bound to; never the request's Host header)",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="browser origins ('https://chat.example.org') whose pages may call the API; "
                                          "empty: none (CORS off, cross-origin requests refused)",
    )
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="names clients may reach the server by (Host header; '*.example.org' for "
                                          "subdomains, '*' any); empty: the bound address, its loopback names and "
                                          "public_url's host (any name when bound to 0.0.0.0 or ::)",
    )
    link_ttl: float = Field(7 * DAY, ge=60, le=3650 * DAY, description="seconds a signed file link stays valid (410 after)")
    ready_min_free_bytes: int = Field(
        256 * MiB, ge=0, description="bytes the data directory's file system must have free for /readyz to say ready",
    )
    external_images: Literal["link", "drop"] = Field(
        "link", description="images the controller's answer points at elsewhere than this server's files: shown as a "
                            "plain link naming the host, or dropped",
    )

    @field_validator("api_keys", "allowed_url_hosts", "cors_origins", "allowed_hosts", mode="before")
    @classmethod
    def _split_list(cls, v: Any) -> Any:
        return env_list(v)

    @field_validator("cors_origins", mode="after")
    @classmethod
    def _origins(cls, v: list[str]) -> list[str]:
        out = [o.strip().lower().rstrip("/") for o in v if o.strip()]
        for o in out:
            if not re.fullmatch(r"https?://[a-z0-9.\-\[\]:]+", o):
                raise ValueError(f"{o!r} is not an origin: write scheme://host[:port], without a path")
        return out

    @field_validator("allowed_hosts", mode="after")
    @classmethod
    def _hosts(cls, v: list[str]) -> list[str]:
        return [h.strip().lower().rstrip(".").strip("[]") for h in v if h.strip()]

    @field_validator("allowed_url_hosts", mode="after")
    @classmethod
    def _lower_hosts(cls, v: list[str]) -> list[str]:
        return [h.strip().lower().rstrip(".") for h in v if h.strip()]
