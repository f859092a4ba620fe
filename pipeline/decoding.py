"""Media decoding in worker processes that can be stopped: video frames and sound, audio and
video probes, PDF text and pages.

A crafted file can make a decoder run for minutes or ask for gigabytes (a 4K video with a
single keyframe, a 200-inch PDF page). Run in a thread, such a decode cannot be stopped: it
keeps its thread after its caller gave up, fills the event loop's default thread pool (every
``asyncio.to_thread`` of the process then waits, health checks included) and holds up the
interpreter's exit. Here each job runs in a process of its own, forked from a ``forkserver``
that has the FFmpeg and PDF libraries loaded (a job starts in about 10 ms; the server itself
starts with the first job, not with the service), with a memory ceiling
(``RLIMIT_DATA``, so a crafted file ends in :class:`MemoryError`, not in the machine's swap).
A job that outlives its time is killed (``SIGKILL``); :meth:`Decoder.close` kills those left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import multiprocessing
import os
import resource
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from .errors import HuggingGPTError

log = logging.getLogger(__name__)

T = TypeVar("T")
MiB = 1024 * 1024

WORKERS = 2
"""Decoding jobs running at once when none is set (``[documents] decode_workers``)."""
MEMORY_BYTES = 1024 * MiB
"""Bytes, a job's memory ceiling when none is set (``[documents] decode_memory_bytes``)."""
TIMEOUT = 60.0
"""Seconds a job may take when none is set (``[documents] decode_timeout``)."""

PRELOAD = ["av", "pypdf", "pypdfium2", "PIL.Image", "PIL.PngImagePlugin", "pipeline.media", "pipeline.video_parts"]
"""Modules the fork server imports once, so a job does not import them again."""


class DecodeError(HuggingGPTError, ValueError):
    """A decoding job failed; ``user_message`` is one sentence about the file.

    Attributes:
        reason: ``"refused"`` (the job said why: unreadable, over a limit), ``"timeout"`` (killed
            after its time), ``"memory"`` (over the memory ceiling), ``"crashed"`` (the worker
            died or raised something unexpected), ``"closed"`` (the service is shutting down).
    """

    def __init__(self, user_message: str, detail: str | None = None, *, reason: str = "refused") -> None:
        super().__init__(user_message, detail)
        self.reason = reason

    def __reduce__(self) -> tuple:  # crosses the process boundary with its sentence and reason
        return (_rebuild, (self.user_message, str(self), self.reason))


def _rebuild(user_message: str, detail: str, reason: str) -> DecodeError:
    return DecodeError(user_message, detail, reason=reason)


class _Kept(logging.Handler):
    """Keeps a job's log records (at most :data:`KEPT_RECORDS`) to be logged by the parent."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.records) < KEPT_RECORDS:
            record.msg, record.args, record.exc_info, record.exc_text = record.getMessage()[:1000], None, None, None
            self.records.append(record)


KEPT_RECORDS = 50
"""Log records of one job passed back to the service's log, at most."""


def _job(conn: Connection, memory_bytes: int, cpu_seconds: int, fn: Callable[..., Any], args: tuple) -> None:
    """The worker's side: limits set, ``fn(*args)`` run, its outcome and log records sent back once."""
    resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))  # an orphaned job ends anyway
    kept = _Kept()
    logging.getLogger().addHandler(kept)
    logging.getLogger().setLevel(logging.INFO)
    try:
        outcome: tuple = ("ok", fn(*args))
    except DecodeError as e:
        outcome = ("error", e)
    except HuggingGPTError as e:
        outcome = ("error", DecodeError(e.user_message, str(e)))
    except MemoryError:
        outcome = ("memory", None)
    except Exception as e:  # noqa: BLE001 - a library's own error: one sentence in the parent
        outcome = ("crashed", f"{e.__class__.__name__}: {e}"[:500])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    try:
        conn.send((*outcome, peak, kept.records))
    except MemoryError:
        conn.send(("memory", None, peak, []))
    conn.close()


class Decoder:
    """Runs decoding jobs in killable worker processes, ``workers`` at a time.

    Args:
        workers: jobs running at once (others wait their turn, within their own time).
        memory_bytes: bytes, the memory ceiling of one job (``RLIMIT_DATA``: heap and private
            mappings, the libraries' code not counted).
        max_pixels: pixels, the largest video frame or PDF page a job decodes (width × height,
            checked from the file's metadata before decoding; ``[inference] max_image_pixels``).
        timeout: seconds a job may take at most (a caller may give less).

    The fork server starts with the first job. A process sharing this one's fork server (one
    per process, :mod:`multiprocessing.forkserver`) gets the same preloaded modules. Each job
    imports the main module again (multiprocessing's rule; skipped for ``python -m pkg`` whose
    main is ``pkg.__main__``, as ``python -m hugginggpt``; the ``hugginggpt`` script imports only
    ``hugginggpt``): a main script's top level must stay light.
    """

    def __init__(self, *, max_pixels: int, workers: int = WORKERS, memory_bytes: int = MEMORY_BYTES,
                 timeout: float = TIMEOUT) -> None:
        self.workers = workers
        self.timeout = timeout
        self.memory_bytes = memory_bytes
        self.max_pixels = max_pixels
        self._slots: asyncio.Semaphore | None = None
        self._running: set[multiprocessing.process.BaseProcess] = set()
        self._closed = False

    async def run(self, fn: Callable[..., T], *args: Any, what: str, timeout: float | None = None) -> T:
        """``fn(*args)`` in a worker process, given at most ``timeout`` seconds in all (waiting
        for a free worker included); the worker is killed when the time is up or the caller is
        cancelled.

        Args:
            fn: a module-level function (pickled by name); its arguments and result are pickled.
            timeout: seconds (``None``: :attr:`timeout`).
            what: the file, for the log line and the sentences ("the video video-1").

        Returns:
            What ``fn`` returned.

        Raises:
            DecodeError: ``fn`` raised one (its sentence), or a :class:`HuggingGPTError` (its
                sentence), or the job took longer than ``timeout``, went over the memory ceiling,
                crashed, or the decoder is closed (``reason`` says which).
        """
        if self._closed:
            raise _closed(what)
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.workers)
        timeout = self.timeout if timeout is None else min(timeout, self.timeout)
        started = time.monotonic()
        try:
            async with asyncio.timeout(timeout), self._slots:
                return await self._in_process(fn, args, timeout, what, started)
        except TimeoutError:
            log.warning("decoding %s stopped after %.1f s (the limit is %g s)", what, time.monotonic() - started, timeout)
            raise DecodeError(f"Decoding {what} took too long (more than {timeout:g} s).",
                              f"decode of {what} killed after {timeout:g} s", reason="timeout") from None

    async def _in_process(self, fn: Callable[..., T], args: tuple, timeout: float, what: str, started: float) -> T:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        receive, send = ctx.Pipe(duplex=False)
        cpu = math.ceil(timeout + 5) * (os.cpu_count() or 1)
        proc = ctx.Process(target=_job, args=(send, self.memory_bytes, cpu, fn, args), daemon=True,
                           name=f"decode {what}")
        try:
            proc.start()
        except (OSError, RuntimeError) as e:  # out of processes or memory to fork
            receive.close()
            send.close()
            log.error("could not start a worker to decode %s: %r", what, e)
            raise DecodeError(f"The server could not start reading {what}; please try again later.", repr(e),
                              reason="crashed") from None
        self._running.add(proc)
        try:
            send.close()
            await _readable(receive.fileno())
            try:
                kind, value, peak, records = receive.recv()
            except Exception as e:  # noqa: BLE001 - killed while sending, or an outcome that does not unpickle
                kind, value, peak, records = "died", repr(e), 0, []
        finally:
            receive.close()
            await self._reap(proc)
        for record in records:
            logging.getLogger(record.name).handle(record)
        log.info("decoded %s in %.2f s, peak memory %d MiB (%s)", what, time.monotonic() - started, peak // MiB, kind)
        return self._outcome(kind, value, proc.exitcode, what)

    def _outcome(self, kind: str, value: Any, exitcode: int | None, what: str) -> Any:
        if kind == "ok":
            return value
        if kind == "error":
            raise value
        if self._closed:
            raise _closed(what)
        if kind == "memory" or exitcode in (-6, -9, -11):  # SIGABRT/SIGKILL/SIGSEGV: a C library out of memory
            log.warning("decoding %s went over the memory ceiling of %d MiB (%s, exit %s)", what,
                        self.memory_bytes // MiB, kind, exitcode)
            raise DecodeError(f"Decoding {what} needs more memory than the limit of {self.memory_bytes // MiB:,} MiB.",
                              f"decode of {what}: {kind}, exit {exitcode}", reason="memory")
        log.warning("decoding %s failed: %s (exit %s)", what, value or kind, exitcode)
        raise DecodeError(f"Decoding {what} failed; the file may be damaged.", f"decode of {what}: {value or kind}",
                          reason="crashed")

    async def _reap(self, proc: multiprocessing.process.BaseProcess) -> None:
        """Kill ``proc`` if it still runs and collect its exit status without blocking the loop."""
        try:
            if proc.exitcode is None:
                with contextlib.suppress(ProcessLookupError, ValueError, AttributeError):
                    proc.kill()
                with contextlib.suppress(TimeoutError, ValueError):
                    async with asyncio.timeout(5.0):
                        await _readable(proc.sentinel)
            proc.join(timeout=0)
        finally:
            self._running.discard(proc)

    async def close(self) -> None:
        """Kill the jobs still running (their callers get :class:`DecodeError`) and refuse new ones."""
        self._closed = True
        for proc in list(self._running):
            with contextlib.suppress(ProcessLookupError, ValueError, AttributeError):
                proc.kill()

    async def __aenter__(self) -> Decoder:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _closed(what: str) -> DecodeError:
    return DecodeError(f"The server is shutting down, so {what} was not read.", f"decode of {what}: decoder closed",
                       reason="closed")


async def _readable(fd: int) -> None:
    """Wait until ``fd`` can be read (data, end of file, or a process sentinel's exit); ``fd`` is
    left in blocking mode, so that ``Connection.recv`` then reads a whole message (uvloop's
    ``add_reader`` makes it non-blocking, as libuv's ``uv_poll_init`` does: a message still
    arriving then failed with ``BlockingIOError``)."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await ready
    finally:
        loop.remove_reader(fd)
        os.set_blocking(fd, True)
