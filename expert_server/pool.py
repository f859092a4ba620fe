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
from .errors import ModelFailed, Refused

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
        self._make_room(slot.model.size_bytes, keep=slot)
        loop = asyncio.get_running_loop()
        loaded = await loop.run_in_executor(self._executor, self._measured_load, slot.model)
        if self.budget is not None and loaded.charged > self.budget:
            slot.refused = self._refusal(loaded.charged)
            del loaded
            memory.release(self.device)
            raise Refused(slot.refused)
        slot.loaded, slot.loads = loaded, slot.loads + 1
        self._make_room(0, keep=slot)
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

    def unload(self, model_id: str) -> None:
        """Drop the model from memory (it stays servable and reloads on its next request)."""
        slot = self.slots[model_id]
        if slot.loaded is not None:
            slot.loaded = None
            memory.release(self.device)
