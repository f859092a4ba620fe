"""``[mcp]``: Model Context Protocol servers whose tools the planner may use as experts.

Read by :mod:`bot.settings` (the one reader of the config file and the environment), e.g.::

    [mcp.servers.stamps]            # a program spoken to over stdio
    command = "python"
    args = ["-m", "sandbox.mcp_tools"]
    env = { STAMP_FONT_SIZE = "14" }

    [mcp.servers.spaces]            # a streamable HTTP endpoint
    url = "https://huggingface.co/mcp"
    headers = { Authorization = "Bearer hf_..." }
    tools = ["gr1_flux1_schnell_infer"]

or ``HUGGINGGPT_MCP__SERVERS='{"stamps": {"command": "python", "args": [...]}}'``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

if TYPE_CHECKING:  # the MCP runner (and the Hub client under it) loads only when servers are used
    from pipeline.mcp_offer import ToolOffer
    from pipeline.mcp_tools import McpServerConfig


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

    @model_validator(mode="after")
    def _one_transport(self) -> "McpServerSettings":
        if bool(self.command) == bool(self.url):
            raise ValueError("set either command (a stdio server) or url (a streamable HTTP server)")
        return self


class McpSettings(BaseModel):
    """``[mcp]``: the servers by short name (their tasks are ``mcp.<name>.<tool>``)."""

    model_config = ConfigDict(extra="forbid")

    servers: dict[str, McpServerSettings] = Field(default_factory=dict, description="tool servers by short name: command (with args, env) for stdio, or url (with headers) for streamable HTTP; tools limits what is offered")
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

    def configs(self, logs: Path | None = None) -> list[McpServerConfig]:
        """The servers as the pipeline takes them (secrets in plain text); a stdio server's stderr
        goes to ``<logs>/mcp-<name>.log`` when ``logs`` is given."""
        from pipeline.mcp_tools import McpServerConfig

        return [
            McpServerConfig(
                name=name, command=s.command, args=tuple(s.args),
                env={k: v.get_secret_value() for k, v in s.env.items()}, url=s.url,
                headers={k: v.get_secret_value() for k, v in s.headers.items()}, tools=tuple(s.tools),
                connect_timeout=s.connect_timeout, errlog=logs / f"mcp-{name}.log" if logs else None,
                max_log_bytes=self.max_log_bytes,
            )
            for name, s in self.servers.items()
        ]

    def offer(self) -> ToolOffer:
        """The bounds on the tools offered to the planner (``max_tools``, ``max_tool_chars``)."""
        from pipeline.mcp_offer import ToolOffer

        return ToolOffer(self.max_tools, self.max_tool_chars)

    def secret_values(self) -> list[Any]:
        """Header and environment values of 8 characters or more (tokens), for log masking."""
        return [v.get_secret_value() for s in self.servers.values() for v in (*s.env.values(), *s.headers.values())
                if len(v.get_secret_value()) >= 8]
