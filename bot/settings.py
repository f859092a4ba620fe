"""Settings: the one place that reads the environment and the config file.

Sources, strongest first (ARCHITECTURE.md, "Configuration and command line"):

1. ``HUGGINGGPT_<SECTION>__<KEY>`` environment variables (e.g. ``HUGGINGGPT_LLM__BASE_URL``);
2. the usual variables ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``HF_TOKEN``, ``DISCORD_BOT_TOKEN``,
   ``SLACK_BOT_TOKEN``, ``SLACK_APP_TOKEN``, ``SLACK_SIGNING_SECRET`` (only fill keys left unset);
3. one TOML file: ``--config FILE``, else ``HUGGINGGPT_CONFIG``, else ``./hugginggpt.toml``;
4. the defaults below.

Secrets are ``SecretStr``: they print as ``**********`` in logs and reprs. The environment is
read from the mapping :func:`load_settings` is given (a custom pydantic-settings source); the
process environment is never modified.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.sources.utils import parse_env_vars

from .errors import ConfigError

MiB = 1024 * 1024


def secret(value: SecretStr | str | None) -> str | None:
    """The plain value of a secret setting (``SecretStr``), a plain string as is, ``None`` as is."""
    if value is None:
        return None
    return value.get_secret_value() if isinstance(value, SecretStr) else str(value)


class LLMSettings(BaseModel):
    """``[llm]``: the controller, any OpenAI-compatible chat completions server."""

    base_url: str | None = None  # None: the SDK default (api.openai.com)
    api_key: SecretStr | None = None
    model: str = "gpt-4o-mini"
    timeout: float = Field(60.0, gt=0, description="seconds per controller call")
    max_retries: int = Field(2, ge=0, description="openai SDK retries (429, 5xx, connection)")
    structured_output: Literal["auto", "json_schema", "json_object", "off"] = "auto"
    temperature: float = 0.0


class InferenceSettings(BaseModel):
    """``[inference]``: expert models, model selection and execution limits."""

    provider: str | None = Field("hf-inference", description="Inference Providers name, 'auto', or none")
    token: SecretStr | None = None
    base_url: str | None = Field(None, description="gateway: every call for M goes to {base_url}/models/{M}")
    endpoints: dict[str, str] = Field(default_factory=dict, description="model id -> dedicated endpoint URL")
    controller_tasks: list[str] = Field(
        default_factory=lambda: ["summarization", "translation", "conversational", "text-generation", "text2text-generation"],
        description="text tasks the controller LLM serves itself",
    )
    selection: Literal["llm", "top"] = "llm"
    top_k: int = Field(5, ge=1, le=20)
    task_timeout: float = Field(120.0, gt=0, description="seconds per expert call")
    deadline: float = Field(600.0, gt=0, description="seconds for a whole run")
    max_attempts: int = Field(3, ge=1, description="tries per model on 429/503/timeout")
    max_candidates_tried: int = Field(3, ge=1, description="models tried per task before it fails")
    backoff_max: float = Field(30.0, gt=0, description="seconds, cap of one retry wait")


class CatalogSettings(BaseModel):
    """``[catalog]``: which models exist for which task."""

    path: Path | None = None  # None: the catalog shipped with the package
    availability_ttl: float = Field(3600.0, description="seconds to cache provider availability")


class StorageSettings(BaseModel):
    """``[storage]``: media, conversations and limits on user files."""

    data_dir: Path = Path("hugginggpt-data")
    max_file_bytes: int = Field(25 * MiB, gt=0)
    max_files: int = Field(5, ge=1)
    context_tokens: int = Field(1500, ge=0, description="chat-log budget in the planning prompt")
    max_age_days: float | None = None
    max_media_bytes: int | None = None


class DiscordSettings(BaseModel):
    """``[discord]``: the Discord front end."""

    token: SecretStr | None = None
    command_name: str = "ask"
    allowed_guilds: list[int] = Field(default_factory=list)
    allowed_channels: list[int] = Field(default_factory=list)
    allowed_roles: list[int] = Field(default_factory=list)
    rate_limit_per_minute: int = 6
    max_concurrent_runs: int = 2
    followups_need_mention: bool = False


class SlackSettings(BaseModel):
    """``[slack]``: the Slack front end."""

    bot_token: SecretStr | None = None
    app_token: SecretStr | None = None
    signing_secret: SecretStr | None = None
    mode: Literal["socket", "http"] = "socket"
    host: str = "0.0.0.0"
    port: int = 3000
    path: str = "/slack/events"
    allowed_channels: list[str] = Field(default_factory=list)
    allowed_users: list[str] = Field(default_factory=list)
    rate_limit_per_minute: int = 6
    followups_without_mention: bool = True


class Settings(BaseSettings):
    """All settings. Build with :func:`load_settings`."""

    model_config = SettingsConfigDict(
        env_prefix="HUGGINGGPT_", env_nested_delimiter="__", extra="forbid", case_sensitive=False
    )

    llm: LLMSettings = Field(default_factory=LLMSettings)
    inference: InferenceSettings = Field(default_factory=InferenceSettings)
    catalog: CatalogSettings = Field(default_factory=CatalogSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    discord: DiscordSettings = Field(default_factory=DiscordSettings)
    slack: SlackSettings = Field(default_factory=SlackSettings)

    @field_validator("llm", "inference", "catalog", "storage", "discord", "slack", mode="before")
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
        for section in (self.llm, self.inference, self.discord, self.slack):
            for name in type(section).model_fields:
                value = getattr(section, name)
                if isinstance(value, SecretStr) and value.get_secret_value():
                    values.append(value.get_secret_value())
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
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        origin = f" in {file}" if file else ""
        raise ConfigError(f"The setting {where}{origin} is invalid: {first['msg']}.", str(e)) from None
    finally:
        _ENVIRONMENT.reset(token)
