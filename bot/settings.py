"""Settings: the one place that reads the environment and the config file.

Sources, strongest first (ARCHITECTURE.md, "Configuration and command line"):

1. ``HUGGINGGPT_<SECTION>__<KEY>`` environment variables (e.g. ``HUGGINGGPT_LLM__BASE_URL``);
2. the usual variables ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``HF_TOKEN``, ``DISCORD_BOT_TOKEN``,
   ``SLACK_BOT_TOKEN``, ``SLACK_APP_TOKEN``, ``SLACK_SIGNING_SECRET``, ``DATABASE_URL`` (only fill
   keys left unset);
3. one TOML file: ``--config FILE``, else ``HUGGINGGPT_CONFIG``, else ``./hugginggpt.toml``;
4. the defaults below.

Secrets are ``SecretStr``: they print as ``**********`` in logs and reprs. The environment is
read from the mapping :func:`load_settings` is given (a custom pydantic-settings source); the
process environment is never modified.
"""

from __future__ import annotations

import difflib
import os
from urllib.parse import unquote, urlsplit
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.sources.utils import parse_env_vars

from .errors import ConfigError
from .paths import default_data_dir
from .settings_inference import DocumentSettings, ProviderKeys
from .settings_mcp import McpSettings

from .settings_sections import (  # noqa: F401 (re-exported: settings users import them from here)
    DAY, GiB, MiB, DiscordSettings, Section, ServerSettings, SlackSettings, env_list, secret,
)


class LLMSettings(Section):
    """``[llm]``: the controller, any OpenAI-compatible chat completions server."""

    base_url: str | None = None  # None: the SDK default (api.openai.com)
    api_key: SecretStr | None = None
    model: str = "gpt-4o-mini"
    timeout: float = Field(60.0, gt=0, le=DAY, description="seconds per controller call")
    max_retries: int = Field(2, ge=0, le=20, description="openai SDK retries (429, 5xx, connection)")
    structured_output: Literal["auto", "json_schema", "json_object", "off"] = "auto"
    temperature: float = Field(0.0, ge=0, le=2)
    max_reply_bytes: int = Field(
        4 * MiB, ge=1024, le=GiB, description="bytes, largest controller reply read (enforced while it arrives)"
    )


class InferenceSettings(ProviderKeys, Section):
    """``[inference]``: expert models, model selection and execution limits (provider keys:
    :class:`bot.settings_inference.ProviderKeys`)."""

    token: SecretStr | None = None
    base_url: str | None = Field(None, description="gateway: every call for M goes to {base_url}/models/{M}")
    endpoints: dict[str, str] = Field(default_factory=dict, description="model id -> dedicated endpoint URL")
    experts_url: Annotated[list[str], NoDecode] = Field(default_factory=list, description="expert servers, M at {url}/models/{M}")
    experts_api_keys: dict[str, SecretStr] = Field(
        default_factory=dict, description="expert server URL (as in experts_url) -> the API key the bot sends it "
                                          "as 'Authorization: Bearer KEY' (the server's api_key)")
    mode: Literal["providers", "local", "hybrid"] = Field("hybrid", description="hybrid: expert servers, then providers")
    experts_ttl: float = Field(10.0, ge=0, le=DAY, description="seconds an expert server's GET /models answer is reused")
    experts_timeout: float = Field(3.0, gt=0, le=600, description="seconds to wait for an expert server's GET /models")
    controller_tasks: list[str] = Field(
        default_factory=lambda: ["summarization", "translation", "conversational", "text-generation", "text2text-generation"],
        description="text tasks the controller LLM serves itself",
    )
    selection: Literal["llm", "top"] = "llm"
    top_k: int = Field(5, ge=1, le=20)
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
        for url in v:
            u = urlsplit(url)
            if u.scheme not in ("http", "https") or not u.hostname or u.query or u.fragment or u.username or u.password:
                raise ValueError(f"{url[:80]!r} is not an http:// or https:// URL without a query or credentials")
        return list(dict.fromkeys(url.strip().rstrip("/") for url in v))

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


class CatalogSettings(Section):
    """``[catalog]``: which models exist for which task."""

    path: Path | None = None  # None: the catalog shipped with the package
    availability_ttl: float = Field(3600.0, ge=0, le=30 * DAY, description="seconds to cache provider availability")


class StorageSettings(Section):
    """``[storage]``: media, conversations and limits on user files."""

    data_dir: Path = Field(
        default_factory=default_data_dir, description="conversations, media and logs; default: the user data dir "
        "(platformdirs, e.g. ~/.local/share/hugginggpt), the same from any working directory",
    )
    max_file_bytes: int = Field(25 * MiB, ge=1024, le=4 * GiB)
    max_text_file_bytes: int = Field(
        1 * MiB, ge=1024, le=64 * MiB, description="largest text file (.txt, .md, .csv, .json) a user may attach, bytes"
    )
    max_files: int = Field(5, ge=1, le=100)
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


class Settings(BaseSettings):
    """All settings. Build with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix="HUGGINGGPT_", env_nested_delimiter="__", extra="forbid", case_sensitive=False
    )

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

    @field_validator("llm", "inference", "planning", "catalog", "storage", "discord", "slack", "server", "documents",
                     "mcp", mode="before")
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
_USUAL_VARIABLES: dict[str, tuple[str, str]] = {
    "OPENAI_API_KEY": ("llm", "api_key"),
    "OPENAI_BASE_URL": ("llm", "base_url"),
    "HF_TOKEN": ("inference", "token"),
    "DISCORD_BOT_TOKEN": ("discord", "token"),
    "SLACK_BOT_TOKEN": ("slack", "bot_token"),
    "SLACK_APP_TOKEN": ("slack", "app_token"),
    "SLACK_SIGNING_SECRET": ("slack", "signing_secret"),
    "DATABASE_URL": ("storage", "database_url"),
}


def config_path(explicit: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None) -> Path | None:
    """The config file to read: ``explicit``, else ``$HUGGINGGPT_CONFIG``, else ``./hugginggpt.toml``
    if it exists, else ``None``."""
    env = os.environ if env is None else env
    if explicit:
        return Path(explicit)
    if env.get("HUGGINGGPT_CONFIG"):
        return Path(env["HUGGINGGPT_CONFIG"])
    default = Path("hugginggpt.toml")
    return default if default.is_file() else None


def _env_has(env: dict[str, str], section: str, key: str) -> bool:
    name = f"HUGGINGGPT_{section}__{key}".upper()
    return any(k.upper() == name for k in env)


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
        ConfigError: the file is missing/unreadable/not TOML, or a value is invalid; the message
            names the file and the key.
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
    for var, (section, key) in _USUAL_VARIABLES.items():
        if env.get(var) and not _env_has(env, section, key) and not (data.get(section) or {}).get(key):
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
            field = Settings.model_fields.get(section)
            model = field.annotation if field is not None else None
            choices = list(getattr(model, "model_fields", {}))
        var = f"HUGGINGGPT_{section}__{key}".upper() if key else None
        usual = next((v for v, sk in _USUAL_VARIABLES.items() if sk == (section, key) and env.get(v)), None)
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
            name = key if key is not None else section
            kind = "key" if key is not None else "section"
            near = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
            hint = f"; did you mean {near[0]}?" if near else f"; valid {kind}s: {', '.join(choices)}."
            lines.append(f"{where} {origin} is not a known {kind}{hint}")
        else:
            lines.append(f"{where} {origin} is invalid: {err['msg']}.")
    return lines
