"""Benchmarks of the program's pieces, run in process as the program runs them: importing the
program's package first gives them its environment defaults (huggingface_hub's telemetry off, so
that no first request pays the library's fetch of its agent registry), and :func:`run_on` runs
them on its event loop."""

import asyncio
from collections.abc import Coroutine
from typing import Any

import hugginggpt  # noqa: F401


def run_on(loop: str, coro: Coroutine[Any, Any, Any]) -> Any:
    """``coro`` run to its end on a new event loop, the program's (``"program"``:
    :func:`hugginggpt.common.loop_factory`) or the standard library's (``"asyncio"``); its result."""
    from hugginggpt.common import loop_factory

    with asyncio.Runner(loop_factory=loop_factory("uvloop" if loop == "program" else "asyncio")) as runner:
        return runner.run(coro)
