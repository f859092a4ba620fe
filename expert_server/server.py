"""Starting the server: the device, the memory budget, uvicorn.

``python -m expert_server`` and ``hugginggpt experts serve`` both end in :func:`serve`.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

from .access import check_bind
from .config import ServerConfig, format_size
from .memory import available_bytes, cuda_total, tune_allocator

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
    """The ASGI app for ``config`` (device and budget resolved).

    Raises:
        ValueError: it would listen off loopback without an API key (:func:`access.check_bind`),
            or the device is not there (:func:`resolve_device`).
    """
    from . import tracing
    from .app import create_app

    check_bind(config)
    tracing.install(config.otlp_endpoint)
    tune_allocator()
    device = resolve_device(config.device)
    budget = resolve_budget(config.memory_budget, device)
    log.info("expert server on %s with a memory budget of %s", device, format_size(budget))
    return create_app(config, device, budget)


def listen(host: str, port: int) -> socket.socket:
    """A listening, non-blocking TCP socket on ``host:port`` (IPv6 when ``host`` has a colon),
    whose connections send each write at once (``TCP_NODELAY``, inherited by accepted sockets on
    Linux): uvicorn serving a socket it did not open leaves Nagle's algorithm on, and a reply
    written in two parts on a kept-alive connection then waited for the client's delayed ACK
    (40 ms per request, RFC 1122 §4.2.3.2, measured on the expert server).

    Raises:
        OSError: the address cannot be bound (in use, not an address of this machine).
    """
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(2048)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


async def serve(config: ServerConfig) -> None:
    """Serve on ``config.host:config.port`` until SIGINT/SIGTERM (uvicorn's own handling).

    Raises:
        ValueError: the port cannot be opened (one sentence), or the device is not there.
    """
    import uvicorn

    try:
        sock = listen(config.host, config.port)
    except OSError as e:
        raise ValueError(f"I cannot listen on {config.host}:{config.port} ({e.strerror or e.__class__.__name__}); "
                         "choose another --port or the port setting.") from None
    with sock:  # closed also when the app cannot be built
        app = build(config)
        port = sock.getsockname()[1]  # the free port chosen for --port 0
        print(f"Expert server on http://{config.host}:{port}/models ({app.state.experts.device}, budget "
              f"{format_size(app.state.experts.budget)}); press Ctrl-C to stop.", flush=True)
        server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, server_header=False,
                                               timeout_graceful_shutdown=config.shutdown_grace))
        await server.serve(sockets=[sock])
    from . import tracing

    tracing.shutdown()  # the spans still waiting are sent
    _exit_past_running_inference()


def _exit_past_running_inference(wait: float = 1.0) -> None:
    """After the grace period: an inference still running in a thread (a run on the device is not
    interruptible) would keep the interpreter from exiting until it ends (the executor's threads
    are joined at exit), so the process exits at once, its logs flushed."""
    import os
    import threading
    import time

    from .app import THREAD_PREFIX

    end = time.monotonic() + wait
    for t in threading.enumerate():
        if t.name.startswith(THREAD_PREFIX):
            t.join(max(0.0, end - time.monotonic()))
    running = [t.name for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX) and t.is_alive()]
    if running:
        log.warning("exiting with %d inference(s) still running (past the shutdown grace period)", len(running))
        logging.shutdown()
        os._exit(0)
