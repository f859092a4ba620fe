"""The backends of the pipeline, built from settings: the pipeline's configuration (read once,
:func:`pipeline_config`), the controller LLM, the model catalog and its live availability, the
experts and model selection.

This is the part of the composition root that knows the pipeline's classes; the service
(:meth:`bot.service.Service.create`) adds storage around it.

First-use imports are paid when the service starts instead of in a user's first run: a run's
first image, its first HTTP request to a host and its first streamed call import modules that
nothing imports earlier (measured: Pillow's common image plugins, the IDNA codec for host names,
anyio's asyncio back end; 27 modules, about 0.1 s of a first run's time on a loaded machine).
:func:`start_first_use_imports` imports them on a worker thread as the service is built: a
long-running bot has them long before its first request, and ``hugginggpt run`` while its plan is
being written.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import importlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from huggingface_hub import get_token

from pipeline.catalog import Availability, Catalog
from pipeline.catalog.placement import Mode
from pipeline.catalog.servers import ExpertServers, RegisteredServer, Registry
from pipeline.config import ExecutionLimits, ExpertAccess, McpServerConfig, OutputLimits, PipelineConfig, ToolOffer
from pipeline.core import Pipeline
from pipeline.cost import PriceFileError, PriceTable, Pricing, likely_provider
from pipeline.decoding import Decoder
from pipeline.experts.controller import ControllerRunner
from pipeline.experts.hub import HubRunner
from pipeline.experts.local import LocalRunner
from pipeline.experts.providers import ProviderPolicy, watch_providers
from pipeline.experts.routing import RoutingRunner
from pipeline.experts.mcp import McpRunner
from pipeline.llm import Controller
from pipeline.mcp_tools import Toolbox, ToolSelector

from .errors import ConfigError
from .settings import Settings, secret

log = logging.getLogger(__name__)


def require_credentials(settings: Settings, *, experts: bool = True) -> None:
    """Check that the backends have what they need (``experts=False``: the controller only).

    Raises:
        ConfigError: naming exactly the missing setting and where to set it.
    """
    if not secret(settings.llm.api_key):
        raise ConfigError(
            "No API key for the controller LLM: set [llm] api_key in the config file, "
            "HUGGINGGPT_LLM__API_KEY or OPENAI_API_KEY (any string for a local server), or try --sandbox."
        )
    if not experts:
        return
    inf = settings.inference
    if uses_experts_only(settings):
        return
    if not inf.base_url and inf.provider and not secret(inf.token):
        raise ConfigError(
            "No Hugging Face token for Inference Providers: set [inference] token in the config file, "
            "HUGGINGGPT_INFERENCE__TOKEN or HF_TOKEN, or set [inference] base_url to your own gateway, or try --sandbox."
        )


def uses_experts_only(settings: Settings) -> bool:
    """Whether no Hugging Face token is needed: ``mode = "local"``, or ``"hybrid"`` with expert
    servers and no token (providers are then left out, with a warning at start)."""
    inf = settings.inference
    if inf.mode == "local":
        return True
    return inf.mode == "hybrid" and bool(inf.experts_url) and not inf.base_url and not secret(inf.token)


def expert_servers(settings: Settings, registry: Registry | None = None,
                   registered: Sequence[RegisteredServer] = ()) -> ExpertServers | None:
    """The expert servers of ``[inference] experts_url``, then those registered in the store by
    ``hugginggpt experts launch``: followed through ``registry`` (a running bot) or as read once
    (``registered``: a command). ``None`` when there are none and no registry, or with
    ``mode = "providers"``; close with ``aclose``."""
    inf = settings.inference
    if not (inf.experts_url or registry or registered) or inf.mode == "providers":
        return None

    async def once() -> Sequence[RegisteredServer]:  # the records a command read once
        return registered

    return ExpertServers(list(inf.experts_url), ttl=inf.experts_ttl, timeout=inf.experts_timeout,
                         keys={url: key.get_secret_value() for url, key in inf.experts_api_keys.items()},
                         registry=registry or (once if registered else None))


class RegisteredExperts:
    """The registry of a running bot: the servers registered in its store (``live_experts`` of
    :class:`bot.store.protocol.ExpertRegistry`), once :attr:`source` is set (the pipeline is
    built before the store opens); none before."""

    def __init__(self) -> None:
        self.source: Callable[[], Awaitable[Sequence[RegisteredServer]]] | None = None

    async def __call__(self) -> Sequence[RegisteredServer]:
        """The live registered servers (``[]`` while no store is open).

        Raises:
            StorageError: the store could not be read.
        """
        return await self.source() if self.source is not None else []


def _mode(settings: Settings) -> Mode:
    inf = settings.inference
    if inf.mode == "hybrid" and uses_experts_only(settings) and inf.provider:
        log.warning("[inference] mode is hybrid but no Hugging Face token is set: only the expert servers (%s) are "
                    "used; set [inference] token or HF_TOKEN to fall back to Inference Providers",
                    ", ".join(inf.experts_url))
        return "local"
    return inf.mode


def pipeline_config(settings: Settings) -> PipelineConfig:
    """The settings the pipeline's parts read, in the one typed value they are given: the only
    place they are copied out of ``settings`` (their defaults are the settings model's).

    Args:
        settings: the loaded settings.

    Returns:
        :class:`pipeline.config.PipelineConfig`, secrets in plain text (its repr leaves them out).

    The experts' Hugging Face token is ``[inference] token`` (``HF_TOKEN``), else the one
    ``huggingface_hub`` finds on this machine (``hf auth login``'s file under ``HF_HOME``), looked up
    here once: given none, the hub client would read that file on every expert call, on the event
    loop. A login made after start is used from the next start.
    """
    inf = settings.inference
    experts = ExpertAccess(
        provider=inf.provider, token=secret(inf.token) or get_token(), bill_to=inf.bill_to, router_url=inf.router_url,
        base_url=inf.base_url, endpoints=dict(inf.endpoints),
        expert_keys={url: key.get_secret_value() for url, key in inf.experts_api_keys.items()},
        max_attempts=inf.max_attempts, backoff_max=inf.backoff_max,
    )
    output = OutputLimits(max_media_bytes=inf.max_media_bytes, max_json_bytes=inf.max_json_bytes,
                          max_items=inf.max_items, max_image_pixels=inf.max_image_pixels,
                          max_text_chars=inf.max_text_chars)
    execution = ExecutionLimits(task_timeout=inf.task_timeout, deadline=inf.deadline,
                                max_candidates_tried=inf.max_candidates_tried, max_replans=settings.planning.max_replans,
                                check_images=settings.planning.check_images)
    mcp = settings.mcp
    offer = ToolOffer(max_tools=mcp.max_tools, max_chars=mcp.max_tool_chars)
    return PipelineConfig(experts=experts, output=output, execution=execution, offer=offer,
                          mcp_servers=mcp_servers(settings))


def mcp_servers(settings: Settings) -> tuple[McpServerConfig, ...]:
    """The servers of ``[mcp] servers`` as the pipeline takes them (secrets in plain text, left out
    of their repr); a stdio server's stderr goes to ``<data_dir>/logs/mcp-<name>.log``."""
    logs = settings.storage.data_dir / "logs"
    return tuple(
        McpServerConfig(
            name=name, command=s.command, args=tuple(s.args),
            env={k: v.get_secret_value() for k, v in s.env.items()}, url=s.url,
            headers={k: v.get_secret_value() for k, v in s.headers.items()}, tools=tuple(s.tools),
            errlog=logs / f"mcp-{name}.log", connect_timeout=s.connect_timeout, max_log_bytes=settings.mcp.max_log_bytes,
            protocol=s.protocol,
        )
        for name, s in settings.mcp.servers.items()
    )


def build_controller(settings: Settings) -> Controller:
    """The controller LLM client of ``[llm]`` (close it with ``aclose``).

    Raises:
        ConfigError: no API key is set.
    """
    require_credentials(settings, experts=False)
    llm = settings.llm
    return Controller(
        model=llm.model,
        base_url=llm.base_url,
        api_key=secret(llm.api_key) or "",
        timeout=llm.timeout,
        max_retries=llm.max_retries,
        structured_output=llm.structured_output,
        temperature=llm.temperature,
        max_reply_bytes=llm.max_reply_bytes,
        api=llm.api,
    )


def build_pricing(settings: Settings, mode: Mode) -> Pricing:
    """The prices runs are estimated and charged with: the shipped table, ``[prices] file`` over
    it, the controller's ``[llm] price_*_per_million``, and where each task will likely run.

    Raises:
        ConfigError: the price file cannot be used (one sentence naming it and the key).
    """
    try:
        table = PriceTable.load(settings.prices.file, input_per_million=settings.llm.price_input_per_million,
                                output_per_million=settings.llm.price_output_per_million)
    except PriceFileError as e:
        raise ConfigError(str(e)) from None
    inf = settings.inference
    guess = functools.partial(likely_provider, provider=inf.provider, per_task=dict(inf.providers),
                              mode=mode, controller_tasks=frozenset(inf.controller_tasks))
    return Pricing(table, guess)


def build_pipeline(settings: Settings, registry: Registry | None = None) -> tuple[Pipeline, list[Callable[[], Awaitable[None]]]]:
    """Build the four stages' backends from ``settings`` (``registry``: where the expert servers
    registered by ``hugginggpt experts launch`` are read, :class:`RegisteredExperts`).

    Returns:
        The pipeline and the coroutine functions that close its HTTP clients (call each once).

    Raises:
        ConfigError: a credential is missing.
        CatalogError: the catalog file is unusable.
    """
    require_credentials(settings)
    inf = settings.inference
    catalog = Catalog.load(settings.catalog.path)
    controller = build_controller(settings)
    availability = Availability(
        provider=inf.provider,
        base_url=inf.base_url,
        endpoints=inf.endpoints,
        token=secret(inf.token),
        ttl=settings.catalog.availability_ttl,
        policy=ProviderPolicy(inf.provider, dict(inf.providers)),
    )
    watch = start_provider_watch(availability, settings) if availability.policy is not None else None
    config = pipeline_config(settings)
    servers = expert_servers(settings, registry)
    if servers is not None:  # the hub sends each server its key, registered servers' included
        config = replace(config, experts=replace(config.experts, expert_keys=servers.keys))
    hub = HubRunner(config)
    toolbox = Toolbox(config.mcp_servers)  # [mcp] servers: tools are tasks too
    mode = _mode(settings)
    selector = ToolSelector(
        toolbox, catalog, availability, controller, strategy=inf.selection, top_k=inf.top_k,
        controller_tasks=inf.controller_tasks, servers=servers, mode=mode, offer=config.offer,
    )
    runners = {
        "hub": RoutingRunner(hub, selector.placement),
        "controller": ControllerRunner(controller, config.output),
        "local": LocalRunner(config.output),
        "mcp": McpRunner(toolbox, config.output),
    }
    docs = settings.documents
    decoder = Decoder(max_pixels=config.output.max_image_pixels, workers=docs.decode_workers,
                      memory_bytes=docs.decode_memory_bytes, timeout=docs.decode_timeout)
    pipeline = Pipeline(controller, selector, runners, config.execution, decoder, pricing=build_pricing(settings, mode))
    closers = [pipeline.aclose, hub.aclose, controller.aclose, toolbox.aclose, *([watch] if watch else [])]
    if servers is not None:
        closers.append(servers.aclose)
    return pipeline, closers


log = logging.getLogger(__name__)


def start_provider_watch(availability: Availability, settings: Settings) -> Callable[[], Awaitable[None]] | None:
    """Check the provider settings against the live provider list now (a warning line per
    removed or unknown provider, :func:`pipeline.experts.providers.watch_providers`) and again
    every ``[catalog] availability_ttl`` seconds, while a loop runs (``None`` without one, or in
    ``mode = "local"`` or behind a gateway, where no provider is used).

    Returns:
        An async closer that stops the checks.
    """
    if settings.inference.mode == "local" or settings.inference.base_url or availability.policy is None:
        return None
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    task = loop.create_task(watch_providers(availability.policy, availability.live_of,
                                            settings.catalog.availability_ttl), name="provider checks")

    async def stop() -> None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    return stop


FIRST_USE_MODULES = (
    "encodings.idna",  # host names in URLs (httpx)
    "anyio._backends._asyncio",  # the HTTP clients' first request (httpx over anyio)
    "PIL.BmpImagePlugin", "PIL.GifImagePlugin", "PIL.JpegImagePlugin", "PIL.PngImagePlugin",
    "PIL.PpmImagePlugin",  # what PIL.Image.preinit() loads at the first image opened or saved
    "PIL.ImageSequence", "PIL.ImageChops",  # frames and image differences (tasks' outputs)
)
"""The modules a first run imports that the service's own imports do not (found by comparing
``sys.modules`` before and after a first request through the sandbox)."""
YOUNG_COLLECTION = 20_000
"""Container allocations (net of deallocations) between two young garbage collections once the
service has started (``gc.set_threshold``'s first value; Python's default is 700)."""


def _import_all() -> None:
    for name in FIRST_USE_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as e:  # an optional part not installed: the run that needs it says so
            log.debug("first-use import of %s skipped: %s", name, e)
    _warm_agent_registry()
    # What start-up built (modules, catalog, clients: about 190,000 objects) lives as long as the
    # process: out of the collector's generations, a full collection no longer scans it on the
    # event loop (one took 140 ms of the loop with 100 conversations in flight; ``gc.freeze``).
    gc.collect()  # start-up's garbage is collected, not frozen
    gc.freeze()
    # A young collection every YOUNG_COLLECTION container allocations instead of Python's 700: a
    # full collection (every 100 young ones, over all that runs in flight hold) then comes 28
    # times less often; collections took 257-394 ms of the loop's time in a burst of 100
    # conversations, 14-114 ms with this (``benchmarks.bench_loop --plan chain``).
    gc.set_threshold(YOUNG_COLLECTION, *gc.get_threshold()[1:])


def _warm_agent_registry() -> None:
    """huggingface_hub (2.4) names the AI agent running the process in its user agent, from a
    registry it fetches from the Hub (a synchronous request, up to 3 s) the first time it builds
    request headers: with telemetry on, that would be on the event loop in a run's first expert
    call. Here it is done on this worker thread instead. The program turns telemetry off
    (``HF_HUB_DISABLE_TELEMETRY``, :mod:`hugginggpt`): then nothing is fetched."""
    from huggingface_hub import constants

    if constants.HF_HUB_DISABLE_TELEMETRY:
        return
    try:
        from huggingface_hub.utils import detect_agent
    except ImportError:  # a huggingface_hub without agent detection fetches nothing
        return
    detect_agent()


def start_first_use_imports() -> Callable[[], Awaitable[None]]:
    """Start importing :data:`FIRST_USE_MODULES` on a worker thread (call it from a running loop)
    and fetching what the Hub client fetches at its first request, then move what start-up built
    out of the collector's reach (``gc.freeze``) and space young collections
    :data:`YOUNG_COLLECTION` allocations apart.

    Returns:
        An async closer that waits for the imports to end (a service's close awaits it, so that
        no import is left running at shutdown).
    """
    task = asyncio.get_running_loop().create_task(asyncio.to_thread(_import_all), name="first-use imports")

    async def wait() -> None:
        await asyncio.gather(task, return_exceptions=True)

    return wait
