"""The expert server's own settings: the command line, else a TOML file (``--config FILE``), else
``HUGGINGGPT_EXPERTS_<KEY>`` environment variables, else the defaults below.

    # experts.toml
    device = "auto"                 # auto | cpu | cuda | cuda:N
    memory_budget = "12GB"          # RAM on CPU, VRAM on GPU; default: 80 % of what is free
    default_deadline = 120          # seconds, when a request sends no X-Request-Timeout
    max_deadline = 900              # seconds; longer X-Request-Timeout values are cut to this
    queue_limit = 64                # requests waiting per model before 503 "busy"
    max_batch_size = 16             # requests run as one batch, for the tasks whose pipelines batch
    batch_window_ms = 5             # how long a batch's oldest request waits for others
    batch_refill_ms = 30            # after a batch of several, how long the model may wait for
                                    # the callers it answered to send again
    allow_models = ["*"]            # fnmatch patterns of model ids; deny_models likewise
    allow_tasks = []                # empty: every task the server knows
    controlnet_base = "stable-diffusion-v1-5/stable-diffusion-v1-5"
    depth_model = ""                # backing of depth-control (default: a cached depth model)
    seg_model = ""                  # backing of seg-control (default: a cached segmentation model)
    annotators = "lllyasviel/Annotators"
    min_free_memory = "0"           # refuse to start an inference below this much free RAM
                                    # (answered as out of memory: 503, the model unloaded)
    otlp_endpoint = "http://127.0.0.1:4318"   # traces (OTLP/HTTP); also OTEL_EXPORTER_OTLP_ENDPOINT
    api_key = "..."                 # access (api_key, allowed_hosts, cors_origins) and the limits of
    max_image_pixels = 12000000     # one request (max_body_bytes, max_text_chars, max_image_pixels,
                                    # max_audio_seconds, max_output_pixels): the fields' descriptions
    [min_free_memory_for]           # the same floor for single models
    "org/big-model" = "6GB"
    [ray."org/name"]                # Ray Serve: this model's deployment options (docs/experts.md)
    ray_actor_options = {num_gpus = 0.5}
    [tasks]                         # task of a cached model whose card and config say nothing
    "org/name" = "image-classification"
    [local_models]                  # your own checkpoints: model id → folder (save_pretrained)
    "my-team/vit-pets" = "/srv/models/vit-pets"
    [default_parameters.canny-text-to-image]   # parameters a request of this task leaves out
    num_inference_steps = 20                   # (fewer denoising steps: faster drawings on a CPU)

The server never reads the bot's settings (it is a separate deployable).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?")
"""A model id as the Hub spells them (``name`` or ``org/name``): what ``local_models`` may name."""
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "p": 10**15, "pb": 10**15, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40, "pib": 2**50}


def parse_size(text: str | int | float | None) -> int | None:
    """Bytes in ``text``: an integer, or a number with a unit (``"4GB"``, ``"512 MiB"``, ``"1.5g"``;
    decimal units are powers of 1000, ``*iB`` of 1024). ``None`` or ``""`` gives ``None``.

    Raises:
        ValueError: the text is not a size.
    """
    if text is None or text == "":
        return None
    if isinstance(text, (int, float)):
        return int(text)
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"{text!r} is not a size (examples: 4GB, 512MiB, 1000000)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def format_size(n: int | None) -> str:
    """``n`` bytes for people: ``"1.2 GB"``, ``"35 MB"``, ``"512 kB"``."""
    if n is None:
        return "unknown"
    for unit, size in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= size:
            return f"{n / size:.1f} {unit}".replace(".0 ", " ")
    return f"{n} B"


class ServerConfig(BaseSettings):
    """Settings of one expert server process (see the module docstring for the file format)."""

    model_config = SettingsConfigDict(env_prefix="HUGGINGGPT_EXPERTS_", extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(8081, ge=0, le=65535)
    device: str = "auto"
    memory_budget: int | None = None
    min_free_memory: int = 0
    default_deadline: float = Field(120.0, gt=0)
    max_deadline: float = Field(900.0, gt=0)
    queue_limit: int = Field(64, ge=1)
    max_batch_size: int = Field(
        16, ge=1, le=256, description="requests for one model run as one batch at most (one call of its pipeline on "
                                      "the list), for the tasks whose pipelines batch; 1 turns batching off")
    batch_window_ms: float = Field(
        5.0, ge=0, le=1000, description="milliseconds the oldest request of a batch may wait, from its arrival, for "
                                        "more to fill the batch (a request whose deadline passes meanwhile is not run)")
    batch_refill_ms: float = Field(
        30.0, ge=0, le=1000, description="after a batch of several requests, milliseconds the model may wait for as "
                                         "many as it answered (their callers sending again) before it runs a smaller "
                                         "batch, and at most half the batch's run time; 0 turns this wait off")
    allow_models: list[str] = ["*"]
    deny_models: list[str] = []
    allow_tasks: list[str] = []
    controlnet_base: str = "stable-diffusion-v1-5/stable-diffusion-v1-5"
    depth_model: str = ""
    seg_model: str = ""
    annotators: str = "lllyasviel/Annotators"
    tasks: dict[str, str] = {}
    default_parameters: dict[str, dict[str, Any]] = {}
    min_free_memory_for: dict[str, int] = {}
    ray: dict[str, dict] = {}
    cache_dir: str | None = None
    local_models: dict[str, Path] = Field(
        default_factory=dict, description="model id → a folder on disk holding a checkpoint (what save_pretrained "
        "or a Trainer writes), served under that id beside the cache's models; only these configured folders are "
        "read, never a path from a request")
    api_key: SecretStr | None = Field(
        None, description="bearer token every model request must carry ('Authorization: Bearer KEY'); "
                          "required when bound to an address other than loopback")
    allowed_hosts: list[str] = Field(
        default_factory=list, description="Host header names answered ('*.domain' for subdomains, '*' for any; "
                                          "empty: localhost, 127.0.0.1, ::1 and the bound address; any with a "
                                          "wildcard bind, where api_key is required)")
    cors_origins: list[str] = Field(
        default_factory=list, description="origins (scheme://host[:port]) whose web pages may call; others get 403")
    max_body_bytes: int = Field(40 * 2**20, ge=1024, description="bytes of one request body (413 beyond, "
                                                                 "before it is read when Content-Length says so)")
    max_text_chars: int = Field(100_000, ge=1, description="characters of one text input (413 beyond); "
                                                           "texts are also truncated to the model's maximum tokens")
    max_image_pixels: int = Field(40_000_000, ge=64, description="pixels of one input image, read from its "
                                                                 "header before it is decoded (413 beyond)")
    max_audio_seconds: float = Field(600.0, gt=0, description="seconds of one input audio file, probed before "
                                                              "it is decoded and counted while it is (413 beyond)")
    max_video_frames: int = Field(9000, ge=1, description="frames of one input video a model that watches it "
                                                          "(video-text-to-text) decodes: the count its container "
                                                          "declares before decoding, the frames counted while "
                                                          "decoding (413 beyond); 5 minutes at 30 fps")
    shutdown_grace: float = Field(20.0, gt=0, description="seconds requests in flight get to finish after "
                                                          "SIGTERM/SIGINT before their connections are closed")
    max_output_pixels: int = Field(1024 * 1024, ge=64, description="pixels image-to-image and ControlNet draw: "
                                                                   "a larger input is scaled down to fit")
    otlp_endpoint: str | None = Field(
        None, validation_alias=AliasChoices("otlp_endpoint", "HUGGINGGPT_EXPERTS_OTLP_ENDPOINT",
                                            "OTEL_EXPORTER_OTLP_ENDPOINT"),
        description="OTLP/HTTP collector base URL, e.g. http://127.0.0.1:4318 (also OTEL_EXPORTER_OTLP_ENDPOINT): "
                    "each model request is a span continuing the caller's trace (W3C traceparent), with its queueing "
                    "and inference, sent to {otlp_endpoint}/v1/traces; unset: no span is made")

    @field_validator("memory_budget", "min_free_memory", "max_body_bytes", mode="before")
    @classmethod
    def _size(cls, v: Any) -> Any:
        return parse_size(v) if isinstance(v, str) else v

    @field_validator("min_free_memory_for", mode="before")
    @classmethod
    def _sizes(cls, v: Any) -> Any:
        return {k: parse_size(x) if isinstance(x, str) else x for k, x in v.items()} if isinstance(v, dict) else v

    @field_validator("local_models")
    @classmethod
    def _folders(cls, v: dict[str, Path]) -> dict[str, Path]:
        for model_id, folder in v.items():
            if not _MODEL_ID.fullmatch(model_id) or ".." in model_id:
                raise ValueError(f"{model_id!r} is not a model id (name or org/name: letters, digits, - _ .)")
            if not folder.is_absolute():
                raise ValueError(f"the folder of {model_id} must be an absolute path, not {str(folder)!r}")
            if not folder.is_dir():
                raise ValueError(f"the folder {folder} of {model_id} does not exist")
            if not (folder / "config.json").is_file() and not (folder / "model_index.json").is_file():
                raise ValueError(f"the folder {folder} of {model_id} holds no checkpoint (no config.json or "
                                 "model_index.json)")
        return v

    @field_validator("otlp_endpoint")
    @classmethod
    def _endpoint(cls, v: str | None) -> str | None:
        if v is None or not v.strip():
            return None
        if not re.fullmatch(r"https?://[^\s/?#@]+(/[^\s?#]*)?", v.strip()):
            raise ValueError("must be an http:// or https:// URL without credentials, query or fragment")
        return v.strip().rstrip("/")

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not re.fullmatch(r"auto|cpu|cuda(:[0-9]+)?|mps", v):
            raise ValueError("device must be auto, cpu, cuda, cuda:N or mps")
        return v

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings)


def load_config(path: str | Path | None = None, **overrides: Any) -> ServerConfig:
    """Settings from the TOML file at ``path`` (optional), the environment, then ``overrides``
    (command-line values; ``None`` values are ignored).

    Raises:
        OSError: the file cannot be read. tomllib.TOMLDecodeError: it is not TOML.
        pydantic.ValidationError: a value is unusable (the message names the key).
    """
    data: dict[str, Any] = {}
    if path:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    data.update({k: v for k, v in overrides.items() if v is not None})
    return ServerConfig(**data)  # the environment fills what neither the file nor the options set
