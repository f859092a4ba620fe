"""Settings: the one place that reads the environment and the config file, and every default.

Sources, strongest first (docs/configuration.md, generated from the fields below):

1. ``HUGGINGGPT_<SECTION>__<KEY>`` environment variables (e.g. ``HUGGINGGPT_LLM__BASE_URL``);
2. the usual variables ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``HF_TOKEN``, ``DISCORD_BOT_TOKEN``,
   ``SLACK_BOT_TOKEN``, ``SLACK_APP_TOKEN``, ``SLACK_SIGNING_SECRET``, ``DATABASE_URL``,
   ``OTEL_EXPORTER_OTLP_ENDPOINT`` (only fill
   keys left unset);
3. one TOML file: ``--config FILE``, else ``HUGGINGGPT_CONFIG``, else ``./hugginggpt.toml``;
4. the defaults below.

One section a class (``[llm]`` is :class:`LLMSettings`, and so on), fields of :class:`Settings`.

Secrets are ``SecretStr``: they print as ``**********`` in logs and reprs. The environment is
read from the mapping :func:`load_settings` is given (a custom pydantic-settings source); the
process environment is never modified.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.sources.utils import parse_env_vars

from pipeline import decoding
from pipeline.experts.providers import check_choice

from .errors import ConfigError
from .paths import default_data_dir

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


_ORG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")


def _http_url(v: str | None) -> str | None:
    if v is None or not v.strip():
        return None
    u = urlsplit(v.strip())
    if u.scheme not in ("http", "https") or not u.hostname or u.query or u.fragment or u.username or u.password:
        raise ValueError(f"{v[:80]!r} is not an http:// or https:// URL without a query or credentials")
    return v.strip().rstrip("/")


class ProviderKeys(BaseModel):
    """The provider keys of ``[inference]``, in the words of Hugging Face's Inference Providers
    documentation (a provider pinned by ``"model:provider"``, billing through ``X-HF-Bill-To``)."""

    model_config = ConfigDict(extra="forbid")

    provider: str | None = Field("auto", description="auto | fastest | cheapest | preferred | a provider name | none")
    providers: dict[str, str] = Field(default_factory=dict, description="task -> policy, provider or model:provider")
    bill_to: str | None = Field(None, description="organisation whose credits pay expert calls (X-HF-Bill-To)")
    bill_to_teams: dict[str, str] = Field(
        default_factory=dict, description="Slack team id or Discord guild id -> the organisation that pays the expert "
        "calls of requests from there (over bill_to)",
    )
    router_url: str | None = Field(None, description="Inference Providers router (default router.huggingface.co)")

    @field_validator("provider", mode="after")
    @classmethod
    def _provider(cls, v: str | None) -> str | None:
        if v is None or not v.strip() or v.strip().lower() == "none":
            return None
        return check_choice(v.strip())

    @field_validator("providers", mode="after")
    @classmethod
    def _per_task(cls, v: dict[str, str]) -> dict[str, str]:
        from pipeline.tasks import canonical_task

        out = {}
        for task, choice in v.items():
            canon = canonical_task(task)
            if canon is None:
                raise ValueError(f"{task!r} is not a known task")
            out[canon] = check_choice(str(choice).strip(), allow_pin=True)
        return out

    @field_validator("bill_to", mode="after")
    @classmethod
    def _org(cls, v: str | None) -> str | None:
        if v is None or not v.strip():
            return None
        if not _ORG.match(v.strip()):
            raise ValueError(f"{v[:40]!r} is not a Hugging Face organisation or user name")
        return v.strip()

    @field_validator("bill_to_teams", mode="after")
    @classmethod
    def _team_orgs(cls, v: dict[str, str]) -> dict[str, str]:
        return {str(team): org for team, value in v.items() if (org := cls._org(value)) is not None}

    @field_validator("router_url", mode="after")
    @classmethod
    def _urls(cls, v: str | None) -> str | None:
        return _http_url(v)


class LLMSettings(Section):
    """``[llm]``: the controller, any OpenAI-compatible chat completions server."""

    base_url: str | None = Field(
        None, description="the controller's OpenAI-compatible API (OPENAI_BASE_URL); default: the openai SDK's, "
        "https://api.openai.com/v1",
    )
    api_key: SecretStr | None = Field(
        None, description="the controller's key (OPENAI_API_KEY); any string for a local server",
    )
    model: str = Field("gpt-4o-mini", description="the controller model's name on that server")
    api: Literal["chat", "responses"] = Field(
        "chat", description="the protocol the controller is asked in: chat (POST /chat/completions) or responses "
        "(POST /responses, OpenAI's Responses API, spoken by the Hugging Face router and most servers now)",
    )
    timeout: float = Field(60.0, gt=0, le=DAY, description="seconds per controller call")
    max_retries: int = Field(2, ge=0, le=20, description="openai SDK retries (429, 5xx, connection)")
    structured_output: Literal["auto", "json_schema", "json_object", "off"] = Field(
        "auto", description="how plans are asked for: auto tries a JSON schema, then JSON mode, then plain text as "
        "the server refuses each",
    )
    temperature: float = Field(0.0, ge=0, le=2, description="sampling temperature of every controller call")
    max_reply_bytes: int = Field(
        4 * MiB, ge=1024, le=GiB, description="bytes, largest controller reply read (enforced while it arrives)"
    )
    price_input_per_million: float | None = Field(None, ge=0, le=1e4, description="US dollars per million tokens "
                                                  "the controller reads; unset: unknown")
    price_output_per_million: float | None = Field(None, ge=0, le=1e4, description="US dollars per million tokens "
                                                   "the controller writes; unset: unknown")


class InferenceSettings(ProviderKeys, Section):
    """``[inference]``: expert models, model selection and execution limits (and :class:`ProviderKeys`)."""

    token: SecretStr | None = Field(
        None, description="Hugging Face token (HF_TOKEN) for the Hub and Inference Providers; not needed with mode "
        "= \"local\"",
    )
    base_url: str | None = Field(None, description="gateway: every call for M goes to {base_url}/models/{M}")
    endpoints: dict[str, str] = Field(default_factory=dict, description="model id -> dedicated endpoint URL")
    experts_url: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="expert servers, M at {url}/models/{M}",
    )
    experts_api_keys: dict[str, SecretStr] = Field(
        default_factory=dict, description="expert server URL (as in experts_url) -> the API key the bot sends it "
                                          "as 'Authorization: Bearer KEY' (the server's api_key)")
    mode: Literal["providers", "local", "hybrid"] = Field("hybrid", description="hybrid: expert servers, then providers")
    experts_ttl: float = Field(10.0, ge=0, le=DAY, description="seconds a server's GET /models, and the launched ones' "
                               "list (experts launch), are reused")
    experts_timeout: float = Field(3.0, gt=0, le=600, description="seconds to wait for an expert server's GET /models")
    controller_tasks: list[str] = Field(
        default_factory=lambda: ["summarization", "translation", "conversational", "text-generation", "text2text-generation"],
        description="text tasks the controller LLM serves itself",
    )
    selection: Literal["llm", "top"] = Field("llm", description="model selection: the controller picks among the candidates "
                                             "(the paper's stage), or top: the most downloaded available one without a call")
    top_k: int = Field(5, ge=1, le=20, description="candidate models shown to the controller per task")
    task_timeout: float = Field(120.0, gt=0, le=DAY, description="seconds per expert call")
    deadline: float = Field(
        600.0, gt=0, le=DAY, description="seconds for a whole run: planning, execution and the answer, retries included"
    )
    max_attempts: int = Field(3, ge=1, le=20, description="tries per model on 429/503/timeout")
    max_candidates_tried: int = Field(3, ge=1, le=20, description="models tried per task before it fails")
    backoff_max: float = Field(30.0, gt=0, le=3600, description="seconds, cap of one retry wait")
    max_media_bytes: int = Field(
        64 * MiB, ge=1024, le=4 * GiB, description="bytes, largest media reply of an expert (enforced while it arrives)"
    )
    max_json_bytes: int = Field(8 * MiB, ge=1024, le=GiB, description="bytes, largest JSON or text reply of an expert")
    max_image_pixels: int = Field(
        40_000_000, ge=10_000, le=1_000_000_000, description="pixels, largest image decoded (input or output)"
    )
    max_items: int = Field(1000, ge=1, le=1_000_000, description="structured items (boxes, masks, labels) kept per reply")
    max_text_chars: int = Field(
        20_000, ge=100, le=10_000_000, description="characters of a text result kept in the record and shown"
    )

    @field_validator("experts_url", mode="before")
    @classmethod
    def _url_list(cls, v: Any) -> Any:
        return env_list(v)

    @field_validator("experts_url", mode="after")
    @classmethod
    def _check_urls(cls, v: list[str]) -> list[str]:
        return list(dict.fromkeys(u for u in map(_http_url, v) if u is not None))

    @field_validator("experts_api_keys", mode="after")
    @classmethod
    def _keys_of_servers(cls, v: dict[str, SecretStr], info: Any) -> dict[str, SecretStr]:
        urls = info.data.get("experts_url", [])
        keys = {url.strip().rstrip("/"): key for url, key in v.items()}
        for url in keys:
            if url not in urls:
                raise ValueError(f"{url[:80]!r} is not one of [inference] experts_url")
        return keys

    @field_validator("mode", mode="after")
    @classmethod
    def _local_needs_servers(cls, v: str, info: Any) -> str:
        if v == "local" and not info.data.get("experts_url", ["?"]):
            raise ValueError('mode "local" needs [inference] experts_url (the URL of `hugginggpt experts serve`)')
        return v


class PlanningSettings(Section):
    """``[planning]``: what a request may be before task planning starts, and how often a run re-plans."""

    max_request_chars: int = Field(
        20_000, ge=100, le=20_000,
        description="characters of one request's text (a longer one is refused before planning, exit status 3); "
                    "at most 20,000, the longest text a planned task's argument may carry (pipeline.planning.MAX_TEXT_ARG)",
    )
    max_replans: int = Field(
        1, ge=0, le=5,
        description="times a run may ask the controller to re-plan after a task failed, was skipped or found "
                    "nothing (each is one more controller call; 0: answer from the first plan's results)",
    )
    approve: Literal["never", "costly", "always"] = Field(
        "never",
        description="when a plan waits for a person to press Run before any task runs (bot.approval): never; "
                    "costly (its estimate is over approve_above_usd or unknown, or it has a task of approve_tasks); "
                    "always (every plan with a task)",
    )
    approve_above_usd: float = Field(
        0.05, ge=0, description='US dollars a plan may be estimated to cost before it asks (approve = "costly")')
    approve_tasks: list[str] = Field(
        default_factory=lambda: ["text-to-video", "image-to-video"],
        description='pipeline tags that always ask (approve = "costly"), e.g. text-to-video')
    approval_timeout: float = Field(
        900.0, gt=0, le=7 * DAY, description="seconds a plan waits for approval; after that its buttons say it expired")
    approvers: list[str] = Field(
        default_factory=list,
        description="who may run or cancel any plan besides its requester: Slack or Discord user ids, Discord role ids")

    check_images: bool = Field(
        False, description="the controller model can see images: after the tasks, the images the run generated (at "
        "most 4) go to it as image parts of a re-planning round that checks them against the request and says what it "
        "found (one more controller call per run with generated images; needs max_replans >= 1)")

    @field_validator("approve_tasks", "approvers", mode="before")
    @classmethod
    def _approval_lists(cls, v: Any) -> Any:
        return env_list(v)


class PricesSettings(Section):
    """``[prices]``: what expert calls cost (:mod:`pipeline.cost`) and whether answers say it."""

    file: Path | None = Field(None, description="a TOML price table over the shipped one (pipeline/data/prices.toml)")
    show_cost: bool = Field(False, description="end each answer with its estimated and actual cost in US dollars")


class BudgetSettings(Section):
    """``[budgets]``: US dollars a user, a channel or a team (Slack workspace, Discord guild) may spend
    per UTC day and per UTC month, shared by every process on the store; unset: no budget."""

    per_user_day: float | None = Field(None, ge=0, le=1e6, description="US dollars per user per UTC day")
    per_user_month: float | None = Field(None, ge=0, le=1e6, description="US dollars per user per UTC month")
    per_channel_day: float | None = Field(None, ge=0, le=1e6, description="US dollars per channel per UTC day")
    per_channel_month: float | None = Field(None, ge=0, le=1e6, description="US dollars per channel per UTC month")
    per_team_day: float | None = Field(None, ge=0, le=1e6, description="US dollars per workspace/guild per UTC day")
    per_team_month: float | None = Field(None, ge=0, le=1e6, description="US dollars per workspace/guild per UTC month")


class CatalogSettings(Section):
    """``[catalog]``: which models exist for which task."""

    path: Path | None = Field(
        None, description="a model catalog (JSON lines, `hugginggpt catalog refresh` writes one); default: the "
        "catalog shipped with the package",
    )
    availability_ttl: float = Field(3600.0, ge=0, le=30 * DAY, description="seconds to cache provider availability")


class StorageSettings(Section):
    """``[storage]``: media, conversations and limits on user files."""

    data_dir: Path = Field(
        default_factory=default_data_dir, description="conversations, media and logs; default: the user data dir "
        "(platformdirs, e.g. ~/.local/share/hugginggpt), the same from any working directory",
    )
    max_file_bytes: int = Field(25 * MiB, ge=1024, le=4 * GiB, description="bytes, largest file a user may attach")
    max_text_file_bytes: int = Field(
        1 * MiB, ge=1024, le=64 * MiB, description="largest text file (.txt, .md, .csv, .json) a user may attach, bytes"
    )
    max_files: int = Field(5, ge=1, le=100, description="files a user may attach to one message")
    file_read_timeout: float = Field(
        60.0, gt=0, le=3600, description="seconds to read one file named on the command line (--file, /file): a pipe "
        "or FIFO still sending, or that nothing writes to, is refused then",
    )
    context_tokens: int = Field(1500, ge=0, le=1_000_000, description="chat-log budget in the planning prompt")
    max_age_days: float | None = Field(None, gt=0, le=36500, description="days a conversation is kept after its last use")
    max_media_bytes: int | None = Field(
        None, ge=MiB, description="bytes, quota of the media directory (oldest unreferenced files go first)"
    )
    database_url: SecretStr | None = Field(
        None, description="postgresql://USER:PASSWORD@HOST:5432/DATABASE for several processes on one PostgreSQL "
        "database (media stay under data_dir, which they must share); default: the SQLite file in data_dir",
    )
    auto_migrate: bool = Field(
        True, description="apply pending database migrations at start; false: refuse to start until "
        "`hugginggpt db upgrade` ran",
    )
    lease_seconds: float = Field(
        30.0, ge=2.0, le=3600.0, description="seconds after which a silent process counts as gone and its running "
        "turns are marked interrupted (the same in every process sharing the store)",
    )


class DocumentSettings(BaseModel):
    """``[documents]``: PDF attachments (text through pypdf, image-only pages rendered by pypdfium2),
    and the worker processes that decode attachments (PDFs, a video's sound and frames, audio and
    video probes; :class:`pipeline.decoding.Decoder`); sizes in bytes, times in seconds. A PDF's
    pages past ``max_pages`` and a page whose content stream is larger than
    ``max_page_content_bytes`` are left out, and the answer says so."""

    model_config = ConfigDict(extra="forbid")

    pdf: bool = Field(
        True, description="PDF attachments are read (their text, and image-only pages as images); false: refused",
    )
    max_pdf_bytes: int = Field(20 * MiB, ge=1024, le=1024 * MiB, description="bytes, largest PDF accepted")
    max_pages: int = Field(50, ge=1, le=5000, description="pages read of one PDF")
    max_page_images: int = Field(4, ge=0, le=50, description="image-only pages rendered for vision tasks")
    render_dpi: int = Field(110, ge=36, le=300, description="dots per inch of a rendered page")
    max_text_bytes: int = Field(512 * 1024, ge=1024, le=64 * MiB, description="bytes of text kept from one PDF")
    max_page_content_bytes: int = Field(4 * MiB, ge=4096, le=256 * MiB,
                                        description="bytes, largest decoded content stream of a PDF page that is read")
    decode_workers: int = Field(
        decoding.WORKERS, ge=1, le=64, description="decoding jobs (PDF, video, audio) running at once",
    )
    decode_memory_bytes: int = Field(decoding.MEMORY_BYTES, ge=256 * MiB, le=64 * 1024 * MiB,
                                     description="bytes, memory ceiling of one decoding job")
    decode_timeout: float = Field(decoding.TIMEOUT, gt=0, le=3600, description="seconds one decoding job may take")


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
    allowed_channels: list[int] = Field(
        default_factory=list, description="channel ids the bot answers in (a thread counts as its channel); empty: "
        "any",
    )
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


class McpServerSettings(BaseModel):
    """One server: ``command`` (with ``args``, ``env``) or ``url`` (with ``headers``)."""

    model_config = ConfigDict(extra="forbid")

    command: str | None = Field(None, description="program of a stdio server")
    args: list[str] = Field(default_factory=list, description="its arguments")
    env: dict[str, SecretStr] = Field(default_factory=dict, description="its environment (only these and the "
                                      "SDK's safe defaults such as PATH and HOME are passed)")
    url: str | None = Field(None, pattern=r"^https?://", description="streamable HTTP endpoint")
    headers: dict[str, SecretStr] = Field(default_factory=dict, description="HTTP headers for url (Authorization)")
    tools: list[str] = Field(default_factory=list, description="tools to offer the planner ([]: all)")
    connect_timeout: float = Field(20.0, gt=0, le=600, description="seconds to start and list the tools")
    protocol: Literal["auto", "legacy", "2026-07-28"] = Field(
        "auto", description="MCP protocol era: auto (ask server/discover, fall back to the initialize handshake), "
        "legacy (the initialize handshake, 2025-11-25 and older) or 2026-07-28 (stateless, no handshake)")

    @model_validator(mode="after")
    def _one_transport(self) -> "McpServerSettings":
        if bool(self.command) == bool(self.url):
            raise ValueError("set either command (a stdio server) or url (a streamable HTTP server)")
        return self


class McpSettings(BaseModel):
    """``[mcp]``: the servers by short name (their tasks are ``mcp.<name>.<tool>``)."""

    model_config = ConfigDict(extra="forbid")

    servers: dict[str, McpServerSettings] = Field(
        default_factory=dict, description="tool servers by short name: command (with args, env) for stdio, or url "
        "(with headers) for streamable HTTP; tools limits what is offered",
    )
    max_tools: int = Field(40, ge=1, le=1000, description="MCP tools offered to the planner for one request at most "
                           "(when the servers list more, those sharing the most words with the request)")
    max_tool_chars: int = Field(20_000, ge=500, le=1_000_000, description="characters of planning prompt the "
                                "offered MCP tools take at most (their lines, names and schema entries)")
    max_log_bytes: int = Field(
        1 << 20, ge=1024, le=1 << 30,
        description="bytes of a stdio server's stderr written to <data_dir>/logs/mcp-<name>.log per start of the "
                    "program; the rest is discarded, with one line saying so (a larger file is moved to .log.1 first)",
    )

    @model_validator(mode="after")
    def _names(self) -> "McpSettings":
        import re

        for name in self.servers:
            if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,31}", name):
                raise ValueError(f"the server name {name!r} may have 1 to 32 lower-case letters, digits and -")
        return self

    def secret_values(self) -> list[Any]:
        """Header and environment values of 8 characters or more (tokens), for log masking."""
        return [v.get_secret_value() for s in self.servers.values() for v in (*s.env.values(), *s.headers.values())
                if len(v.get_secret_value()) >= 8]


class TelemetrySettings(Section):
    """``[telemetry]``: what operators watch (docs/operations.md): Prometheus metrics, and a trace of
    every turn over OTLP/HTTP (off unless an endpoint is set)."""

    metrics_port: int | None = Field(None, ge=0, le=65535, description="port of a Prometheus /metrics server of "
                                     "the Discord and Socket Mode bots (None: none; serve and the Slack HTTP server "
                                     "answer /metrics on their own port)")
    metrics_host: str = Field("127.0.0.1", description="address the metrics_port server binds to")
    otlp_endpoint: str | None = Field(
        None, description="OTLP/HTTP collector base URL, e.g. http://127.0.0.1:4318: one trace per turn goes to "
                          "{otlp_endpoint}/v1/traces (OTEL_EXPORTER_OTLP_ENDPOINT); unset: no span is made")
    trace_content: bool = Field(
        False, description="put the request's text on the turn's span; off: spans hold ids, tasks, models, places "
                           "and outcomes, never a request's text, a file or a secret")

    _url = field_validator("otlp_endpoint")(_http_url)


ENV_PREFIX, ENV_DELIMITER = "HUGGINGGPT_", "__"  # a setting's variable: HUGGINGGPT_<SECTION>__<KEY>


class Settings(BaseSettings):
    """All settings. Build with :func:`load_settings`."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter=ENV_DELIMITER, extra="forbid",
                                      case_sensitive=False)

    llm: LLMSettings = Field(default_factory=LLMSettings)
    inference: InferenceSettings = Field(default_factory=InferenceSettings)
    planning: PlanningSettings = Field(default_factory=PlanningSettings)
    catalog: CatalogSettings = Field(default_factory=CatalogSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    discord: DiscordSettings = Field(default_factory=DiscordSettings)
    slack: SlackSettings = Field(default_factory=SlackSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    documents: DocumentSettings = Field(default_factory=DocumentSettings)
    mcp: McpSettings = Field(default_factory=McpSettings)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    prices: PricesSettings = Field(default_factory=PricesSettings)
    budgets: BudgetSettings = Field(default_factory=BudgetSettings)

    @field_validator("*", mode="before")
    @classmethod
    def _none_is_default(cls, v: Any) -> Any:
        return {} if v is None else v

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # env beats the file (passed as init kwargs after merging, see load_settings)
        return (MappingEnvSource(settings_cls, _ENVIRONMENT.get()), init_settings)

    def secret_values(self) -> list[str]:
        """Every secret that is set (API keys, tokens, signing secret), for log masking."""
        values = []
        for section in (self.llm, self.inference, self.discord, self.slack, self.storage):
            for name in type(section).model_fields:
                value = getattr(section, name)
                if isinstance(value, SecretStr) and value.get_secret_value():
                    values.append(value.get_secret_value())
        values.extend(k.get_secret_value() for k in self.server.api_keys if k.get_secret_value())
        values.extend(k.get_secret_value() for k in self.inference.experts_api_keys.values() if k.get_secret_value())
        values.extend(self.mcp.secret_values())
        if self.storage.database_url is not None:  # the password alone too, wherever it is printed
            password = urlsplit(self.storage.database_url.get_secret_value()).password
            if password:
                values.append(unquote(password))
        return values


_ENVIRONMENT: ContextVar[Mapping[str, str]] = ContextVar("hugginggpt_settings_environment", default={})
"""The environment :func:`load_settings` reads, for :class:`MappingEnvSource` (task-local)."""


class MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source, reading a given mapping instead of ``os.environ``.

    Args:
        settings_cls: the settings class.
        env: variable name to value.
    """

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._mapping = dict(env)
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(self._mapping, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


# (section, key) filled from a conventional variable when not set otherwise.
USUAL_VARIABLES: dict[str, tuple[str, str]] = {
    "OPENAI_API_KEY": ("llm", "api_key"),
    "OPENAI_BASE_URL": ("llm", "base_url"),
    "HF_TOKEN": ("inference", "token"),
    "DISCORD_BOT_TOKEN": ("discord", "token"),
    "SLACK_BOT_TOKEN": ("slack", "bot_token"),
    "SLACK_APP_TOKEN": ("slack", "app_token"),
    "SLACK_SIGNING_SECRET": ("slack", "signing_secret"),
    "DATABASE_URL": ("storage", "database_url"),
    "OTEL_EXPORTER_OTLP_ENDPOINT": ("telemetry", "otlp_endpoint"),
}


RENAMED: dict[tuple[str, str], str] = {("slack", "followups_without_mention"): "followups_need_mention"}
"""(section, old key) → the key that replaced it, whose value is the old one's opposite (a boolean
that was named in the other sense; the old name still loads, with a warning)."""


def _renamed(data: dict[str, Any], env: dict[str, str], file: Path | None) -> None:
    """Move deprecated keys of ``data`` (the file) and ``env`` to their new names, in place, and
    warn once for each (before logging is set up, Python's last-resort handler prints it on stderr).

    Raises:
        ConfigError: a deprecated key's value is not a boolean.
    """
    from pydantic import TypeAdapter

    for (section, old), new in RENAMED.items():
        old_var, new_var = (_variable(section, key) for key in (old, new))
        found = [(name, env.pop(name), env, new_var) for name in [k for k in env if k.upper() == old_var]]
        if old in (data.get(section) or {}):
            found.append((f"[{section}] {old} in {file}", data[section].pop(old), data[section], new))
        for where, value, target, key in found:
            try:
                flipped = not TypeAdapter(bool).validate_python(value)
            except ValidationError:
                raise ConfigError(f"{where} is invalid: it takes true or false.") from None
            target[key] = str(flipped).lower() if target is env else flipped
            logging.getLogger("hugginggpt.settings").warning(
                "%s is deprecated: write [%s] %s = %s (its opposite) instead.", where, section, new,
                str(flipped).lower())


def config_path(explicit: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None) -> Path | None:
    """The config file to read: ``explicit``, else ``$HUGGINGGPT_CONFIG``, else ``./hugginggpt.toml``
    if it exists, else ``None``."""
    env = os.environ if env is None else env
    if chosen := explicit or env.get("HUGGINGGPT_CONFIG"):
        return Path(chosen)
    return default if (default := Path("hugginggpt.toml")).is_file() else None


def _variable(section: str, key: str = "") -> str:
    """The environment variable of ``[section] key``; no ``key``: what the section's variables begin with."""
    return f"{ENV_PREFIX}{section}{ENV_DELIMITER}{key}".upper()


def load_settings(
    path: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
    overrides: dict[str, dict[str, Any]] | None = None,
) -> Settings:
    """Read and validate all settings.

    Args:
        path: config file; see :func:`config_path` for the search order.
        env: environment to read (default ``os.environ``).
        overrides: ``{section: {key: value}}`` applied last (command-line flags, ``--sandbox``).

    Returns:
        The validated :class:`Settings`.

    Raises:
        ConfigError: the file is missing/unreadable/not TOML, a value is invalid, or a key or a
            section (also a ``HUGGINGGPT_<SECTION>__`` variable's) is unknown; the message names where.
    """
    env = dict(os.environ if env is None else env)
    file = config_path(path, env)
    data: dict[str, Any] = {}
    if file is not None:
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"The config file {file} does not exist.") from None
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"The config file {file} cannot be read ({e.__class__.__name__}).") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"The config file {file} is not valid TOML: {e}.") from None
    _renamed(data, env, file)
    for section in {m[1].lower() for v in env if (m := re.fullmatch(rf"{ENV_PREFIX}(\w+?){ENV_DELIMITER}\w+", v, re.I))}:
        if section not in Settings.model_fields:  # a variable of no section is refused below, not ignored
            data.setdefault(section, {})
    named = {v.upper() for v in env}
    for var, (section, key) in USUAL_VARIABLES.items():
        if env.get(var) and _variable(section, key) not in named and not (data.get(section) or {}).get(key):
            data.setdefault(section, {})[key] = env[var]
    for section, values in (overrides or {}).items():
        data.setdefault(section, {}).update(values)
    token = _ENVIRONMENT.set(env)
    try:
        return Settings(**data)
    except ValidationError as e:
        lines = describe_errors(e, file=file, env=env, overrides=overrides or {})
        raise ConfigError("\n".join(lines), "; ".join(lines)) from None
    finally:
        _ENVIRONMENT.reset(token)


def describe_errors(
    error: ValidationError, *, file: Path | None, env: Mapping[str, str], overrides: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """One sentence per problem in ``error``, naming where the value came from (the
    ``HUGGINGGPT_…`` or usual variable, the command line, or the TOML key in ``file``) and, for an
    unknown key, the nearest valid one. Values are never included (they may be secrets).

    Returns:
        The sentences, in pydantic's order.
    """
    lines = []
    upper_env = {k.upper() for k in env}
    for err in error.errors(include_url=False, include_input=False, include_context=False):
        loc = [str(p) for p in err["loc"]]
        section, key = loc[0], (loc[1] if len(loc) > 1 else None)
        if key is None:
            where = f"[{section}]"
            choices: list[str] = list(Settings.model_fields)
        else:
            where = f"[{section}] {'.'.join(loc[1:])}"
            model = getattr(Settings.model_fields.get(section), "annotation", None)
            choices = list(getattr(model, "model_fields", {}))
        var = _variable(section, key) if key else next((v for v in upper_env if v.startswith(_variable(section))), None)
        usual = next((v for v, sk in USUAL_VARIABLES.items() if sk == (section, key) and env.get(v)), None)
        if var and var in upper_env:
            origin = f"from {var}"
        elif key and key in (overrides.get(section) or {}):
            origin = "from the command line"
        elif usual:
            origin = f"from {usual}"
        elif file is not None:
            origin = f"in {file}"
        else:
            origin = "in the settings"
        if err["type"] == "extra_forbidden":
            name, kind = (key, "key") if key is not None else (section, "section")
            near = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
            hint = f"; did you mean {near[0]}?" if near else f"; valid {kind}s: {', '.join(choices)}."
            lines.append(f"{where} {origin} is not a known {kind}{hint}")
        else:
            lines.append(f"{where} {origin} is invalid: {err['msg']}.")
    return lines
