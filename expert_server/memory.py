"""Measuring memory: process RSS, free RAM, a loaded object's parameter and buffer bytes, and giving
freed memory back to the system.

A model is charged the bytes of its parameters and buffers (torch's own count, exact on CPU and GPU)
or, on a GPU, the growth of ``torch.cuda.memory_allocated`` during its load when that is larger.
The RSS growth of the load is recorded too (``/models`` shows it), but not charged: the first load
of a library also maps the library's code, which is not the model's.
"""

from __future__ import annotations

import ctypes
import gc
import os
from typing import Any


def rss_bytes(pid: int | None = None) -> int:
    """Resident set size of process ``pid`` (default: this one), in bytes, from ``/proc``; 0 where
    ``/proc`` is missing."""
    try:
        with open(f"/proc/{pid or 'self'}/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def available_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (what can be allocated without swapping), or
    ``None`` where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def modules_of(obj: Any) -> list[Any]:
    """The distinct ``torch.nn.Module`` objects inside a loaded pipeline: a transformers pipeline's
    ``model``, a diffusers pipeline's components, a ControlNet annotator's networks."""
    import torch

    seen: dict[int, Any] = {}
    stack = [obj]
    depth = 0
    while stack and depth < 3:
        nxt = []
        for o in stack:
            if isinstance(o, torch.nn.Module):
                seen.setdefault(id(o), o)
                continue
            if isinstance(o, dict):
                nxt.extend(o.values())
            elif hasattr(o, "components") and isinstance(getattr(o, "components"), dict):
                nxt.extend(o.components.values())
            elif hasattr(o, "__dict__"):
                nxt.extend(v for v in vars(o).values() if isinstance(v, (torch.nn.Module, dict)) or hasattr(v, "__dict__"))
        stack, depth = nxt, depth + 1
    return list(seen.values())


def tensor_bytes(obj: Any) -> int:
    """Bytes of the parameters and buffers of every module in ``obj`` (shared tensors once)."""
    seen: set[int] = set()
    total = 0
    for module in modules_of(obj):
        for t in list(module.parameters()) + list(module.buffers()):
            key = t.data_ptr()
            if key in seen:
                continue
            seen.add(key)
            total += t.numel() * t.element_size()
    return total


def cuda_allocated(device: str) -> int:
    """``torch.cuda.memory_allocated`` of ``device`` (0 on CPU)."""
    if not device.startswith("cuda"):
        return 0
    import torch

    return int(torch.cuda.memory_allocated(torch.device(device)))


def cuda_total(device: str) -> int:
    """Total memory of the GPU ``device`` in bytes."""
    import torch

    return int(torch.cuda.get_device_properties(torch.device(device)).total_memory)


MMAP_THRESHOLD = 2**20
"""Bytes from which glibc serves an allocation by ``mmap``, returned to the system when freed."""
TRIM_THRESHOLD = 4 * 2**20
"""Free bytes at the top of an arena's heap that glibc keeps rather than hands back at each
``free``. Its default (128 KiB, which a fixed :data:`MMAP_THRESHOLD` leaves in place) made the
inference thread's arena give back the 1.0–1.4 MiB a 6-layer BERT's batch had just freed after
most batches (``madvise``, 112 times in 3 s), and the next batch fault the pages in again: 355
requests a second at 16 concurrent instead of 390 (ViT 6x384: 272 instead of 287; medians of
alternated 4 s runs of ``benchmarks.bench_experts``' ``concurrent``), with its ``--flood`` peak
no higher. What it keeps is at most this much per arena, and goes back at the next :func:`release`."""
ARENAS = 2
"""glibc malloc arenas: each thread that decodes an input otherwise gets its own, whose freed
pages other threads cannot reuse."""


def tune_allocator() -> bool:
    """Make freed inputs go back to the system at once: a fixed ``mmap`` threshold of
    :data:`MMAP_THRESHOLD` (glibc otherwise raises it to the largest block freed, after which
    decoded images live in the heap and stay resident), :data:`ARENAS` arenas, and a trim
    threshold of :data:`TRIM_THRESHOLD` so that the smaller buffers a model's run frees are reused
    by the next run (``mallopt``, glibc only). Returns whether it applied (``False`` on another libc)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold, m_arena_max = -1, -3, -8  # <malloc.h>
        return all(libc.mallopt(option, value) for option, value in ((m_mmap_threshold, MMAP_THRESHOLD),
                                                                   (m_arena_max, ARENAS),
                                                                   (m_trim_threshold, TRIM_THRESHOLD)))
    except (OSError, AttributeError):
        return False


YOUNG = 1
"""The collector's generation a release after requests' inputs walks (``gc.collect``'s argument):
the young ones. An input is freed by reference counting when its job drops it; the collection is
for one caught in a reference cycle, and a cycle already moved to the oldest generation waits for
Python's next full collection (or the next model load or unload, which run one). A full
collection here would walk what the loaded models are made of (about 470,000 objects with a
6-layer ViT loaded: 245 ms holding the interpreter's lock, during which no request and no batch
moves)."""


def release(device: str, generation: int = 2) -> None:
    """Collect garbage (``gc.collect(generation)``: 2, every generation, after a model is gone;
    :data:`YOUNG` after requests' inputs) and hand freed memory back: CUDA's cached blocks, glibc's
    free heap pages."""
    gc.collect(generation)
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
