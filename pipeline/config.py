"""The pipeline's configuration: one typed value the four stages are given, read once from the
settings where the service is built (:func:`bot.backends.pipeline_config`).

Nothing here has a default: each value's default is written once, in the settings model
(``bot/settings.py``, documented in docs/configuration.md), and every field names the setting it
comes from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class ExpertAccess:
    """Where the Hugging Face experts are called and how often a call is tried (``[inference]``).

    Attributes:
        provider: Inference Providers name (``"hf-inference"``, ``"fal-ai"`` ...), a policy
            (``"auto"``, ``"fastest"``, ``"cheapest"``, ``"preferred"``) or ``None`` (``provider``).
        token: Hugging Face token, or ``None`` (``token``).
        bill_to: organisation whose credits pay the calls (``X-HF-Bill-To``), or ``None`` (``bill_to``).
        router_url: where requests for ``https://router.huggingface.co`` go instead (an egress
            proxy or a stand-in forwarding by path), or ``None`` (``router_url``).
        base_url: gateway; model ``M`` is called at ``{base_url}/models/{M}`` (``base_url``).
        endpoints: model id -> dedicated endpoint URL, winning over ``base_url`` (``endpoints``).
        expert_keys: expert server base URL -> the API key sent to it as ``Authorization: Bearer``
            (``experts_api_keys``).
        max_attempts: tries per model for retryable failures: 429, 503, 5xx, timeout (``max_attempts``).
        backoff_max: seconds, cap of one wait between tries (``backoff_max``).
    """

    provider: str | None
    token: str | None = field(repr=False)
    bill_to: str | None
    router_url: str | None
    base_url: str | None
    endpoints: Mapping[str, str]
    expert_keys: Mapping[str, str] = field(repr=False)
    max_attempts: int
    backoff_max: float

    def key_for(self, url: str) -> str | None:
        """The API key of the expert server whose base URL ``url`` is under, or ``None``."""
        return next((key for base, key in self.expert_keys.items() if url.startswith(base.rstrip("/") + "/")), None)


@dataclass(frozen=True)
class OutputLimits:
    """What is read, kept and decoded of one expert's answer, whichever runner called it
    (``[inference]``).

    Attributes:
        max_media_bytes: bytes, largest raw media reply read, enforced while it arrives (``max_media_bytes``).
        max_json_bytes: bytes, largest JSON or text reply read, enforced while it arrives (``max_json_bytes``).
        max_items: structured items (boxes, segments, labels, entities) kept, best scores first (``max_items``).
        max_image_pixels: pixels, largest image, video frame or PDF page decoded, width × height
            (``max_image_pixels``).
        max_text_chars: characters of a text result kept (``max_text_chars``).
    """

    max_media_bytes: int
    max_json_bytes: int
    max_items: int
    max_image_pixels: int
    max_text_chars: int


@dataclass(frozen=True)
class ExecutionLimits:
    """How long a run and each expert call may take, and how often a run may try again.

    Attributes:
        task_timeout: seconds per expert call (``[inference] task_timeout``).
        deadline: seconds for a whole run: planning, execution and the answer (``[inference] deadline``).
        max_candidates_tried: models tried per task before it fails (``[inference] max_candidates_tried``).
        max_replans: times the controller may re-plan from the results, 0: never
            (``[planning] max_replans``, :mod:`pipeline.replanning`).
        check_images: the controller sees the generated images in a re-planning round and checks
            them against the request (``[planning] check_images``).
    """

    task_timeout: float
    deadline: float
    max_candidates_tried: int
    max_replans: int
    check_images: bool


@dataclass(frozen=True)
class ToolOffer:
    """The bounds on the MCP tools offered to the planner for one request (``[mcp]``;
    :func:`pipeline.mcp_offer.offered_tools` applies them).

    Attributes:
        max_tools: tools offered at most (``max_tools``).
        max_chars: characters of planning prompt the offered tools take at most (``max_tool_chars``).
    """

    max_tools: int
    max_chars: int


@dataclass(frozen=True)
class McpServerConfig:
    """One MCP server to use as experts (``[mcp] servers``; secrets in plain text).

    Attributes:
        name: short name, part of its task names (``[a-z0-9-]``).
        command: the program to start (stdio transport), or ``None`` for ``url``.
        args: its arguments.
        env: extra environment of the program (only the SDK's safe defaults are inherited).
        url: the streamable HTTP endpoint, or ``None`` for ``command``.
        headers: HTTP headers sent to ``url`` (``Authorization``).
        tools: the tools to offer (``()``: all the server lists).
        errlog: file the program's stderr is appended to (``None``: this process's stderr).
        connect_timeout: seconds to start, initialise and list tools (``[mcp.servers.NAME] connect_timeout``).
        max_log_bytes: bytes of the program's stderr kept per start (``[mcp] max_log_bytes``,
            :func:`pipeline.mcp_tools.capped_stderr`).
        protocol: how the protocol era is chosen (``[mcp.servers.NAME] protocol``): ``"auto"``
            (the SDK asks ``server/discover`` and falls back to ``initialize``), ``"legacy"`` or a
            stateless revision such as ``"2026-07-28"`` (the ``mcp`` SDK's ``Client(mode=...)``).
    """

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    tools: tuple[str, ...] = ()
    errlog: Path | None = None
    connect_timeout: float = field(kw_only=True)
    max_log_bytes: int = field(kw_only=True)
    protocol: str = field(kw_only=True)


@dataclass(frozen=True)
class PipelineConfig:
    """Everything the pipeline's parts read from the settings, by concern.

    Attributes:
        experts: where experts are called (:class:`ExpertAccess`).
        output: what is kept of an answer (:class:`OutputLimits`).
        execution: time and retry limits of a run (:class:`ExecutionLimits`).
        offer: the MCP tools offered to the planner (:class:`ToolOffer`).
        mcp_servers: the MCP servers whose tools are tasks too (:class:`McpServerConfig`).
    """

    experts: ExpertAccess
    output: OutputLimits
    execution: ExecutionLimits
    offer: ToolOffer
    mcp_servers: tuple[McpServerConfig, ...]
