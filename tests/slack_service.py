"""The service the Slack tests and the Slack benchmark run against: the real
``bot.service.Service`` on the sandbox stand-in backends (``sandbox.Sandbox``: an
OpenAI-compatible controller and Hugging Face inference servers on 127.0.0.1)."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path
from typing import AsyncIterator

from bot.settings import load_settings
from sandbox import Sandbox
from bot.service import Service

SERVICE_KIND = "real bot.service.Service on sandbox stand-in backends"


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.asynccontextmanager
async def make_service(tmp_path: Path, *, controller_down: bool = False,
                       latency: dict[str, float] | None = None) -> AsyncIterator[Service]:
    """A started Service on sandbox backends, data under ``tmp_path / "service-data"``.

    Args:
        controller_down: point the controller at a closed port (the backend is down).
        latency: seconds added per model id or task name by the inference stand-in.
    """
    async with Sandbox(latency=latency) as sb:
        overrides = sb.overrides(tmp_path / "service-data")
        if controller_down:
            overrides["llm"]["base_url"] = f"http://127.0.0.1:{_dead_port()}/v1"
        svc = await Service.create(load_settings(env={}, overrides=overrides))
        try:
            yield svc
        finally:
            await svc.close()
