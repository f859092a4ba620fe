"""Stand-in backends for trying the bot without credentials (``--sandbox``) and for the tests.

``Sandbox`` starts, in-process on 127.0.0.1, an OpenAI-compatible controller
(:mod:`sandbox.controller`) and a Hugging Face inference server (:mod:`sandbox.inference`)
that speak the real wire formats and derive their outputs from their inputs. Answers and generated
media are labelled as coming from a stand-in.

This package is optional and separate: the product imports it only from ``hugginggpt/common.py``
(lazily, for ``--sandbox``); it imports nothing of ``bot/``, ``adapters/`` or ``hugginggpt/``. It is
also the one home of the stand-ins that tests and benchmarks share (what needs the service itself,
a harness, lives in ``benchmarks/harness/``). Its modules:

- controller side: :mod:`.controller` (HTTP server), :mod:`.routing` (the ``X-HuggingGPT-Stage``
  / ``X-HuggingGPT-Task`` headers to a rule), :mod:`.planning`, :mod:`.planner`, :mod:`.wording`
  (keyword task planning), :mod:`.heuristics` (model selection, response, controller tasks);
- inference side: :mod:`.inference` (HTTP server), :mod:`.imaging`, :mod:`.audio_video`,
  :mod:`.text_outputs` (outputs per task), :mod:`.faults` (HTTP error answers);
- for tests and benchmarks: :mod:`.slack_api` (Slack's Web API, Events API and Socket Mode),
  :mod:`.discord_server`, :mod:`.discord_rest`, :mod:`.discord_messages` (Discord's gateway, REST
  API and CDN), :mod:`.faulty_controller` (a controller that misbehaves on cue).

What tests and benchmarks share that is not a backend the product calls (tiny checkpoints, crafted
files, real PostgreSQL and nginx servers) is in ``benchmarks/harness/``, outside the installed
product.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.catalog import Catalog

from .controller import ControllerStandIn
from .inference import InferenceStandIn


class Sandbox:
    """Both stand-ins, started together.

    Args:
        catalog_path: catalog whose models the inference stand-in serves (default: shipped one).
        latency: per model id or task name, seconds added to each inference call.
    """

    def __init__(self, *, catalog_path: Path | None = None, latency: dict[str, float] | None = None) -> None:
        catalog = Catalog.load(catalog_path)
        task_of = {}
        for task in catalog.tasks():
            for card in catalog.candidates(task):
                task_of.setdefault(card.id, task)
        self.controller = ControllerStandIn()
        self.inference = InferenceStandIn(task_of=task_of, latency=dict(latency or {}))
        self.controller_url: str | None = None
        self.inference_url: str | None = None

    async def start(self) -> "Sandbox":
        """Start both servers on free loopback ports."""
        self.controller_url = await self.controller.start()
        self.inference_url = await self.inference.start()
        return self

    async def close(self) -> None:
        """Stop both servers."""
        await self.controller.close()
        await self.inference.close()

    async def __aenter__(self) -> "Sandbox":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def overrides(self, data_dir: Path | str | None = None) -> dict[str, dict[str, Any]]:
        """Settings overrides that point the bot at the stand-ins (for ``load_settings``).

        ``[inference] experts_url`` and ``mode`` are left as configured: a team's own expert
        server is still used (first, in hybrid mode), so its models can be tried without any key;
        the stand-in planner plans the tasks it lists, as it plans every served task."""
        out: dict[str, dict[str, Any]] = {
            "llm": {"base_url": self.controller_url, "api_key": "sandbox", "model": "sandbox-controller", "max_retries": 0},
            "inference": {"base_url": self.inference_url, "provider": None, "token": None, "backoff_max": 0.2},
        }
        if data_dir is not None:
            out["storage"] = {"data_dir": str(data_dir)}
        return out


async def serve_loopback(app: Any, **runner_options: Any) -> tuple[Any, int]:
    """Serve the ``aiohttp.web.Application`` ``app`` on 127.0.0.1 at a free port, as every
    stand-in does.

    Args:
        app: the application.
        runner_options: for ``aiohttp.web.AppRunner`` (default: no access log).

    Returns:
        The started ``AppRunner`` (``await runner.cleanup()`` stops it) and the port.
    """
    from aiohttp import web

    runner = web.AppRunner(app, **{"access_log": None, **runner_options})
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, runner.addresses[0][1]
