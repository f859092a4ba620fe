"""Loaded models under a memory budget.

* A model loads on first use; however many requests arrive at once it loads once (a lock per
  model), and one load runs at a time (so a load's measurement is its own and two loads never
  overshoot the budget together).
* Before a load, least recently used models are unloaded until the new model's weights (their size
  on disk) fit beside the others; after it, its measured size (:mod:`expert_server.memory`) is
  charged, and models are evicted again if the measure was larger than the estimate.
* A model that cannot fit even alone is *refused*: listed with one sentence, never loaded.
* Evicting a model that is running drops the pool's reference; its memory is freed when that run
  ends (the run is not interrupted).
* Requests' inputs share the budget (:meth:`Pool.hold`): a body as it arrives, a decoded image or
  audio clip before it is decoded, until its job is done. When one does not fit beside the loaded
  models and the inputs already held, it is refused with 503 (they will be done soon); when no
  input is held, least recently used models are evicted to make room as for a load, and an input
  that still does not fit is refused with 413 (it never could). When the inputs
  held fall back to none, freed memory is handed back to the system (:func:`memory.release`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from . import memory
from .cache import CachedModel
from .config import format_size
from .errors import Busy, ModelFailed, Refused, TooLarge

log = logging.getLogger(__name__)


@dataclass
class Loaded:
    """A model in memory: the object the task runs (``runner``), bytes charged to the budget,
    the RSS growth of its load and its load time (seconds)."""

    runner: Any
    charged: int
    rss_delta: int
    load_seconds: float


@dataclass
class Slot:
    """The pool's state for one model."""

    model: CachedModel
    loaded: Loaded | None = None
    refused: str | None = None
    last_used: float = 0.0
    loads: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


Loader = Callable[[CachedModel, str], Any]

SMALL_INPUT = 2**20
"""Bytes of an input that may use the last 1/SMALL_SHARE of the budget, which larger ones leave
free: a small request is still answered while large inputs hold the rest."""
SMALL_SHARE = 20
RELEASE_AFTER = 16 * 2**20
"""Bytes of inputs freed after which memory is handed back to the system once none is held."""


class Pool:
    """Models loaded under ``budget`` bytes on ``device``.

    Args:
        models: model id → :class:`CachedModel` (the scan, plus the virtual annotator models).
        device: ``cpu`` or ``cuda:N``. budget: bytes (``None``: no limit).
        loader: ``(model, device) -> runner``, called in ``executor`` (blocking).
    """

    def __init__(self, models: dict[str, CachedModel], device: str, budget: int | None, loader: Loader,
                 executor: Executor) -> None:
        self.device, self.budget, self._loader, self._executor = device, budget, loader, executor
        self.slots = {mid: Slot(m) for mid, m in models.items()}
        self.inputs = 0  # bytes held by requests' inputs (hold / free)
        self.evictions = 0  # models unloaded to make room under the budget (the metrics' counter)
        self._freed = 0  # bytes freed since memory was last handed back
        self._gate = asyncio.Lock()
        for slot in self.slots.values():
            if budget is not None and slot.model.size_bytes > budget:
                slot.refused = self._refusal(slot.model.size_bytes)

    def _refusal(self, need: int) -> str:
        return (f"This model needs {format_size(need)} and the server's memory budget is "
                f"{format_size(self.budget)}, so it is never loaded here.")

    @property
    def used(self) -> int:
        """Bytes charged by the loaded models."""
        return sum(s.loaded.charged for s in self.slots.values() if s.loaded)

    def hold(self, nbytes: int, model_id: str) -> None:
        """Count ``nbytes`` of a request's input for ``model_id`` against the budget (call on the
        event loop; give them back with :meth:`free`). The model is counted too when it is not
        loaded yet (it will be, to run the input). Inputs over :data:`SMALL_INPUT` bytes leave the
        last 1/:data:`SMALL_SHARE` of the budget to small ones.

        Raises:
            Busy: they do not fit now, other requests' inputs hold the memory (503, retry).
            TooLarge: they could never fit beside the model (413).
        """
        if self.budget is not None:
            slot = self.slots[model_id]
            model = 0 if slot.loaded else slot.model.size_bytes
            budget = self.budget if nbytes <= SMALL_INPUT else self.budget - self.budget // SMALL_SHARE
            if self.used + self.inputs + nbytes + model > budget and self.inputs == 0:  # else: wait for them
                self._make_room(nbytes + model + self.budget - budget, keep=slot)
            if self.used + self.inputs + nbytes + model > budget:
                if self.inputs == 0 or nbytes + model + (slot.loaded.charged if slot.loaded else 0) > self.budget:
                    raise TooLarge("inputs", f"needs {format_size(nbytes)} of memory beside the model",
                                   f"memory_budget = {format_size(self.budget)}")
                raise Busy(f"The inputs of the requests already waiting hold the server's memory budget "
                           f"({format_size(self.inputs)}); try again shortly.")
        self.inputs += nbytes

    def free(self, nbytes: int) -> None:
        """Give back ``nbytes`` held with :meth:`hold`; once no input is held and at least
        :data:`RELEASE_AFTER` bytes were freed, hand freed memory back to the system (in the
        executor: a young garbage collection and ``malloc_trim`` take milliseconds)."""
        self.inputs = max(0, self.inputs - nbytes)
        self._freed += nbytes
        if self.inputs == 0 and self._freed >= RELEASE_AFTER:
            self._freed = 0
            asyncio.get_running_loop().run_in_executor(self._executor, memory.release, self.device, memory.YOUNG)

    def state(self, model_id: str) -> str:
        """``loaded`` | ``on_disk`` | ``refused``."""
        slot = self.slots[model_id]
        return "refused" if slot.refused else "loaded" if slot.loaded else "on_disk"

    async def get(self, model_id: str) -> Loaded:
        """The loaded model ``model_id``, loading it first if needed.

        Raises:
            Refused: it can never fit the budget. ModelFailed: its files do not load.
        """
        slot = self.slots[model_id]
        if slot.loaded is None:
            async with slot.lock:
                if slot.loaded is None:
                    async with self._gate:
                        await self._load(slot)
        assert slot.loaded is not None
        slot.last_used = time.monotonic()
        return slot.loaded

    async def _load(self, slot: Slot) -> None:
        if slot.refused:
            raise Refused(slot.refused)
        self._make_room(slot.model.size_bytes + self.inputs, keep=slot)
        loop = asyncio.get_running_loop()
        loaded = await loop.run_in_executor(self._executor, self._measured_load, slot.model)
        if self.budget is not None and loaded.charged > self.budget:
            slot.refused = self._refusal(loaded.charged)
            del loaded
            memory.release(self.device)
            raise Refused(slot.refused)
        slot.loaded, slot.loads = loaded, slot.loads + 1
        self._make_room(self.inputs, keep=slot)
        log.info("loaded %s (%s) in %.1f s: %s charged, RSS +%s", slot.model.id, slot.model.task, loaded.load_seconds,
                 format_size(loaded.charged), format_size(loaded.rss_delta))

    def _measured_load(self, model: CachedModel) -> Loaded:
        memory.release(self.device)
        rss0, gpu0, t0 = memory.rss_bytes(), memory.cuda_allocated(self.device), time.perf_counter()
        try:
            runner = self._loader(model, self.device)
        except Exception as e:
            log.warning("loading %s failed: %s: %s", model.id, e.__class__.__name__, e)
            raise ModelFailed(f"The model {model.id} could not be loaded on this server ({e.__class__.__name__}).") from None
        seconds = time.perf_counter() - t0
        charged = max(memory.tensor_bytes(runner), memory.cuda_allocated(self.device) - gpu0)
        return Loaded(runner, charged, max(0, memory.rss_bytes() - rss0), seconds)

    def _make_room(self, need: int, keep: Slot) -> None:
        """Unload least recently used models (never ``keep``) until ``need`` more bytes fit."""
        if self.budget is None:
            return
        victims = sorted((s for s in self.slots.values() if s.loaded and s is not keep), key=lambda s: s.last_used)
        while victims and self.used + need > self.budget:
            victim = victims.pop(0)
            log.info("evicting %s (least recently used) to stay under the budget of %s", victim.model.id,
                     format_size(self.budget))
            self.unload(victim.model.id)
            self.evictions += 1

    def unload(self, model_id: str) -> None:
        """Drop the model from memory (it stays servable and reloads on its next request)."""
        slot = self.slots[model_id]
        if slot.loaded is not None:
            slot.loaded = None
            memory.release(self.device)
