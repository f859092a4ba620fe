"""First-use imports, paid when the service starts instead of in a user's first run.

A run's first image, its first HTTP request to a host and its first streamed call import modules
that nothing imports earlier (measured: Pillow's common image plugins, the IDNA codec for host
names, anyio's asyncio back end; 27 modules, about 0.1 s of a first run's time on a loaded
machine). :func:`start_first_use_imports` imports them on a worker thread as the service is built:
a long-running bot has them long before its first request, and ``hugginggpt run`` while its plan
is being written.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

FIRST_USE_MODULES = (
    "encodings.idna",  # host names in URLs (httpx)
    "anyio._backends._asyncio",  # the HTTP clients' first request (httpx over anyio)
    "PIL.BmpImagePlugin", "PIL.GifImagePlugin", "PIL.JpegImagePlugin", "PIL.PngImagePlugin",
    "PIL.PpmImagePlugin",  # what PIL.Image.preinit() loads at the first image opened or saved
    "PIL.ImageSequence", "PIL.ImageChops",  # frames and image differences (tasks' outputs)
)
"""The modules a first run imports that the service's own imports do not (found by comparing
``sys.modules`` before and after a first request through the sandbox)."""


def _import_all() -> None:
    for name in FIRST_USE_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as e:  # an optional part not installed: the run that needs it says so
            log.debug("first-use import of %s skipped: %s", name, e)


def start_first_use_imports() -> Callable[[], Awaitable[None]]:
    """Start importing :data:`FIRST_USE_MODULES` on a worker thread (call it from a running loop).

    Returns:
        An async closer that waits for the imports to end (a service's close awaits it, so that
        no import is left running at shutdown).
    """
    task = asyncio.get_running_loop().create_task(asyncio.to_thread(_import_all), name="first-use imports")

    async def wait() -> None:
        await asyncio.gather(task, return_exceptions=True)

    return wait
