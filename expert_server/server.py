"""Starting the server: the device, the memory budget, uvicorn.

``python -m expert_server`` and ``hugginggpt experts serve`` both end in :func:`serve`.
"""

from __future__ import annotations

import logging
from typing import Any

from .config import ServerConfig, format_size
from .memory import available_bytes, cuda_total

log = logging.getLogger("expert_server")

CPU_SHARE = 0.8   # default budget: this share of the RAM free at start
GPU_SHARE = 0.9   # default budget: this share of the GPU's memory


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda:0`` when torch sees a GPU, else ``cpu``; ``cuda`` → ``cuda:0``.

    Raises:
        ValueError: a CUDA device was asked for and torch sees none (or not that one).
    """
    if device == "cpu":
        return "cpu"
    import torch

    if device == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if device == "mps":
        return device
    index = int(device.split(":")[1]) if ":" in device else 0
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        raise ValueError(f"device {device} was asked for, but torch sees {torch.cuda.device_count()} CUDA device(s)")
    return f"cuda:{index}"


def resolve_budget(budget: int | None, device: str) -> int | None:
    """The memory budget in bytes: ``budget`` when set, else 80 % of the free RAM (CPU) or 90 % of
    the GPU's memory."""
    if budget is not None:
        return budget
    if device.startswith("cuda"):
        return int(cuda_total(device) * GPU_SHARE)
    free = available_bytes()
    return None if free is None else int(free * CPU_SHARE)


def build(config: ServerConfig) -> Any:
    """The ASGI app for ``config`` (device and budget resolved)."""
    from .app import create_app

    device = resolve_device(config.device)
    budget = resolve_budget(config.memory_budget, device)
    log.info("expert server on %s with a memory budget of %s", device, format_size(budget))
    return create_app(config, device, budget)


async def serve(config: ServerConfig) -> None:
    """Serve on ``config.host:config.port`` until SIGINT/SIGTERM (uvicorn's own handling)."""
    import uvicorn

    app = build(config)
    print(f"Expert server on http://{config.host}:{config.port}/models ({app.state.experts.device}, budget "
          f"{format_size(app.state.experts.budget)}); press Ctrl-C to stop.", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, host=config.host, port=config.port, log_config=None, access_log=False,
                                           server_header=False))
    await server.serve()
