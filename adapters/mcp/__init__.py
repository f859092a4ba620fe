"""HuggingGPT as a Model Context Protocol server (the official ``mcp`` SDK): over stdio
(``hugginggpt mcp``, :func:`serve_stdio`) and over streamable HTTP at ``/mcp`` inside
``hugginggpt serve`` (:mod:`adapters.mcp.http`). The tools are described in :mod:`.server`.
"""

from .server import LocalAccess, build, build_server, serve_stdio

__all__ = ["LocalAccess", "build", "build_server", "serve_stdio"]
