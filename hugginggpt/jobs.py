"""``hugginggpt experts launch``: the expert server on a rented GPU, as a Hugging Face Job.

    hugginggpt experts launch --image IMAGE --flavor a10g-small [--preset minimal] [--port 8081]
                              [--idle-minutes 15] [--max-minutes 60] [--namespace NS] [--no-register]

With huggingface_hub's ``HfApi`` (the Jobs API: ``list_jobs_hardware``, ``run_job``,
``inspect_job``, ``cancel_job``) and the bot's HF token (``[inference] token``):

1. the flavour is checked against ``list_jobs_hardware``, and its price per minute said;
2. the job runs ``hugginggpt experts download --preset PRESET`` (the server serves only what its
   cache holds) and ``hugginggpt experts serve --host 0.0.0.0 --port PORT`` in IMAGE (an image
   with the bot and its experts extra installed), the port exposed through the Jobs proxy without HF
   authentication (``expose_public``): the server's own ``api_key``, a fresh random key given to
   the job as the secret ``HUGGINGGPT_EXPERTS_API_KEY``, guards it, and the HF token is a secret
   so the server can download models. The job's own timeout is ``--max-minutes``, so Hugging Face
   stops it even if this command dies;
3. once the job runs and its server answers ``GET /models`` with the key and ``GET /readyz``,
   it is registered with the bot: its URL, key, job id and the launch's deadline are recorded in
   the store the bot shares (``[storage]``, :mod:`bot.store.sql.experts`), and every running bot
   process sharing that store routes to it within ``[inference] experts_ttl`` seconds, no restart
   needed. The key is a secret: it is kept only in the store, never logged or printed (only the
   URL is). With ``--no-register`` nothing is recorded and the two settings to give the bot by
   hand are printed instead (``[inference] experts_url`` and ``experts_api_keys``);
4. it is watched every ``--poll`` seconds and cancelled when its server has been idle
   (``GET /models`` ``idle_seconds``) for ``--idle-minutes``, at ``--max-minutes``, or on Ctrl-C;
   its record is removed first (if this command dies, the record expires at the deadline, when
   Hugging Face stops the job anyway, and bots ignore it from then on);
5. what it cost is said: the job's running time (``durations.runningSecs``) at the flavour's
   ``unitCostUSD`` per ``unitLabel`` (minute).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import secrets
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from bot.errors import ConfigError, StorageError
from pipeline.errors import HubError

log = logging.getLogger("hugginggpt.jobs")

SECRET_KEY = "HUGGINGGPT_EXPERTS_API_KEY"
"""The job's secret that the expert server reads as its ``api_key`` (its settings' env prefix)."""
STORE_SECONDS = 60.0
"""Seconds a registration or its removal may take before the launch says the store did not answer."""
ENDED = ("COMPLETED", "CANCELED", "ERROR", "DELETED")
"""Job stages after which it runs no more (huggingface_hub's ``TERMINAL_JOB_STAGES``)."""


@dataclass(frozen=True)
class LaunchSpec:
    """What to rent, from the command line.

    Attributes:
        image: the Docker image (or ``hf.co/spaces/...``) with the bot and its experts extra.
        flavor: the hardware flavour (``a10g-small``, ...).
        port: the expert server's port, exposed through the Jobs proxy.
        idle: seconds without a model request after which the job is cancelled.
        deadline: seconds after which the job is cancelled (also its own timeout).
        poll: seconds between looks at the job.
        namespace: the user or organisation billed (``None``: the token's owner).
        preset: the models downloaded into the job's cache before serving (``experts download
            --preset``), or ``"none"`` when the image holds its cache.
    """

    image: str
    flavor: str
    port: int
    idle: float
    deadline: float
    poll: float
    namespace: str | None = None
    preset: str = "minimal"


def _hub(action: str, e: Exception) -> HubError:
    """One sentence for a failed Jobs API call (the details in the log)."""
    log.warning("Jobs API: %s failed: %s: %s", action, e.__class__.__name__, e)
    status = getattr(getattr(e, "response", None), "status_code", None)
    why = {401: "the HF token was refused", 403: "the token may not run jobs in that namespace",
           402: "the account has no payment method or credits for Jobs"}.get(status or 0, "the Hub answered "
                                                                                          f"{status or 'nothing'}")
    return HubError(f"Could not {action} on Hugging Face Jobs: {why}.", f"{action}: {e}")


def choose_hardware(api: Any, flavor: str) -> Any:
    """The ``JobHardwareInfo`` of ``flavor``.

    Raises:
        ConfigError: no such flavour (the sentence names the GPU ones).
        HubError: the Jobs API failed.
    """
    try:
        listed = api.list_jobs_hardware()
    except Exception as e:  # noqa: BLE001 - any failure of the Hub is one sentence
        raise _hub("list the hardware", e) from None
    found = {h.name: h for h in listed}
    if flavor not in found:
        gpus = ", ".join(h.name for h in listed if h.accelerator is not None) or "none"
        raise ConfigError(f"There is no Jobs hardware flavour {flavor!r}; the GPU ones are: {gpus}.")
    return found[flavor]


def start_job(api: Any, spec: LaunchSpec, key: str, token: str) -> Any:
    """Run the expert server as a job; returns its ``JobInfo``.

    Raises:
        HubError: the Jobs API refused or failed.
    """
    serve = f"exec hugginggpt experts serve --host 0.0.0.0 --port {spec.port}"
    fill = f"hugginggpt experts download --preset {spec.preset} && " if spec.preset != "none" else ""
    command = ["sh", "-c", fill + serve]
    try:
        return api.run_job(image=spec.image, command=command, flavor=spec.flavor, timeout=int(spec.deadline),
                           secrets={SECRET_KEY: key, "HF_TOKEN": token}, expose_public=[spec.port],
                           labels={"app": "hugginggpt-experts"}, namespace=spec.namespace)
    except Exception as e:  # noqa: BLE001 - any failure of the Hub is one sentence
        raise _hub("start the job", e) from None


def idle_seconds(url: str, key: str) -> float | None:
    """The server's ``idle_seconds`` (``GET {url}/models`` with ``key``); ``None`` while it does
    not answer that (starting, or a proxy error)."""
    from huggingface_hub import get_session

    try:
        r = get_session().get(f"{url}/models", headers={"Authorization": f"Bearer {key}"}, timeout=10)
        return float(r.json()["idle_seconds"]) if r.status_code == 200 else None
    except Exception as e:  # noqa: BLE001 - a transport error or an answer without it: not answering yet
        log.info("expert server at %s not answering yet: %s", url, e.__class__.__name__)
        return None


def _look(api: Any, spec: LaunchSpec, job_id: str) -> Any:
    try:
        return api.inspect_job(job_id=job_id, namespace=spec.namespace)
    except Exception as e:  # noqa: BLE001 - any failure of the Hub is one sentence
        raise _hub("look at the job", e) from None


def answers_ready(url: str) -> bool:
    """Whether the server says it is ready (``GET {url}/readyz`` 200: its cache was scanned;
    the route needs no key)."""
    from huggingface_hub import get_session

    try:
        return get_session().get(f"{url}/readyz", timeout=10).status_code == 200
    except Exception as e:  # noqa: BLE001 - a transport error: not ready yet
        log.info("expert server at %s not ready yet: %s", url, e.__class__.__name__)
        return False


def watch(api: Any, spec: LaunchSpec, job: Any, key: str, stop: threading.Event, ready: Callable[[str], None]) -> str:
    """Follow the job until it ends or is to be stopped, calling ``ready(url)`` once when its
    server first answers ``GET /models`` with ``key`` and ``GET /readyz``; returns why (a sentence).

    Raises:
        HubError: the job ended with an error before its server answered, or the API failed.
        StorageError: ``ready`` could not register the server.
    """
    end = time.monotonic() + spec.deadline
    url: str | None = None
    while not stop.wait(spec.poll):
        job = _look(api, spec, job.id)
        stage = str(job.status.stage)
        if stage in ENDED:
            if url is None:
                raise HubError(f"The job {job.id} ended ({stage.lower()}) before its expert server answered"
                               f"{': ' + job.status.message if job.status.message else ''}.")
            return f"The job ended by itself ({stage.lower()})."
        if time.monotonic() >= end:
            return f"The deadline of {spec.deadline / 60:g} minutes passed."
        urls = job.status.expose_urls or []
        idle = idle_seconds(urls[0].rstrip("/"), key) if urls else None
        if idle is None:
            continue
        if url is None:
            if not answers_ready(urls[0].rstrip("/")):
                continue
            url = urls[0].rstrip("/")
            ready(url)
        if idle >= spec.idle:
            return f"Its expert server was idle for {spec.idle / 60:g} minutes."
    return "Stopped on request."


def register_lines(url: str, key: str) -> str:
    """What to tell the bot by hand (``--no-register``): the server's URL and key as
    ``[inference]`` environment variables."""
    return (f"The expert server answers at {url}.\nGive it to the bot (until this command stops it):\n"
            f"  HUGGINGGPT_INFERENCE__EXPERTS_URL={url}\n"
            f"  HUGGINGGPT_INFERENCE__EXPERTS_API_KEYS={json.dumps({url: key})}")


def cost_line(job: Any, hardware: Any) -> str:
    """``Ran N s on FLAVOUR: $X`` from the job's running time and the flavour's unit price."""
    secs = (job.durations.running_secs if job.durations else None) or 0
    per = {"minute": 60, "hour": 3600, "second": 1}.get(str(hardware.unit_label), 60)
    return (f"It ran {secs} seconds on {hardware.name} at ${hardware.unit_cost_usd:g} per {hardware.unit_label}: "
            f"${secs / per * hardware.unit_cost_usd:.4f}.")


class Registration:
    """The launched server's record in the bot's store (:mod:`bot.store.sql.experts`), written from
    the launch's thread on the event loop the store's database was opened on.

    Args:
        database: the open :class:`bot.store.sql.database.Database`.
        loop: the loop it was opened on (running while the launch runs).
    """

    def __init__(self, database: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.database, self.loop = database, loop
        self.url: str | None = None

    def add(self, url: str, key: str, job: str, expires: float) -> None:
        """Record the server (``expires``: epoch seconds).

        Raises:
            StorageError: the store failed or did not answer within :data:`STORE_SECONDS`.
        """
        from bot.store.sql import experts

        self._call(experts.register(self.database, url, key, job, expires))
        self.url = url

    def remove(self, job: str) -> None:
        """Remove the record :meth:`add` made, if any.

        Raises:
            StorageError: as :meth:`add`.
        """
        from bot.store.sql import experts

        if self.url is not None:
            self._call(experts.unregister(self.database, self.url, job))
            self.url = None

    def _call(self, coro: Any) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(STORE_SECONDS)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise StorageError(f"The conversation store did not answer within {STORE_SECONDS:g} seconds.") from None


def _when(at: float) -> str:
    return time.strftime("%H:%M UTC", time.gmtime(at))


def launch(api: Any, spec: LaunchSpec, token: str, stop: threading.Event, say: Callable[[str], None],
           registration: Registration | None = None) -> int:
    """Check the flavour, start the job, watch it, register its server with the bot (or print
    the settings to give it, without ``registration``), remove the record, cancel the job and say
    what it cost (see the module docstring). Returns the exit status (0).

    Raises:
        ConfigError: no such flavour.
        HubError: the Jobs API failed, or the job ended before its server answered.
        StorageError: the server could not be registered (the job is cancelled).
    """
    hardware = choose_hardware(api, spec.flavor)
    key = secrets.token_urlsafe(32)
    expires = time.time() + spec.deadline  # the job's own timeout: the record lasts no longer than the job
    job = start_job(api, spec, key, token)
    say(f"Started job {job.id} on {hardware.name} (${hardware.unit_cost_usd:g} per {hardware.unit_label}); "
        f"follow it at {job.url}.")

    def ready(url: str) -> None:
        if registration is None:
            return say(register_lines(url, key))
        registration.add(url, key, job.id, expires)
        say(f"The expert server answers at {url} and is registered with the bot until this command stops it "
            f"(at the latest {_when(expires)}).")

    try:
        why = watch(api, spec, job, key, stop, ready)
        _unregister(registration, job.id, expires, say)
        say(f"{why} Job {job.id} is cancelled." if _cancel(api, spec, job.id, say) else why)
    except BaseException:
        _unregister(registration, job.id, expires, say)
        _cancel(api, spec, job.id, say)
        raise
    finally:  # said even when the job failed: its minutes are billed all the same
        with contextlib.suppress(HubError):
            say(cost_line(_look(api, spec, job.id), hardware))
    return 0


def _unregister(registration: Registration | None, job_id: str, expires: float, say: Callable[[str], None]) -> None:
    """Remove the server's record; a failure is said (bots stop using it when it expires)."""
    if registration is None or registration.url is None:
        return
    try:
        registration.remove(job_id)
    except StorageError as e:
        log.warning("could not remove the registration of job %s: %s", job_id, e)
        say(f"Its registration could not be removed from the conversation store; bots stop using it when it "
            f"expires at {_when(expires)}.")


def _cancel(api: Any, spec: LaunchSpec, job_id: str, say: Callable[[str], None]) -> bool:
    """Cancel the job; ``False`` when the API would not (said: its own timeout still ends it)."""
    try:
        api.cancel_job(job_id=job_id, namespace=spec.namespace)
        return True
    except Exception as e:  # noqa: BLE001 - said; the job's own timeout still ends it
        log.warning("Jobs API: cancel %s failed: %s", job_id, e)
        say(f"Could not cancel job {job_id}; it stops at its timeout of {spec.deadline / 60:g} minutes.")
        return False


async def main(args: Any, settings: Any) -> int:
    """``experts launch``: :func:`launch` in a thread, Ctrl-C and SIGTERM stopping it; the store
    (``[storage]``) is opened first, so a store that cannot register the server rents nothing.

    Raises:
        ConfigError: no HF token, or no such flavour.
        HubError: the Jobs API failed.
        StorageError: the store cannot be opened or the server registered.
    """
    from huggingface_hub import HfApi

    from adapters.signals import on_signals

    if settings.inference.token is None:
        raise ConfigError("Launching an expert server on Hugging Face Jobs needs an HF token (HF_TOKEN) with the "
                          "right to run jobs.")
    token = settings.inference.token.get_secret_value()
    spec = LaunchSpec(args.image, args.flavor, args.port, args.idle_minutes * 60, args.max_minutes * 60, args.poll,
                      args.namespace, args.preset)
    stop = threading.Event()
    loop = asyncio.get_running_loop()
    database = None
    if not args.no_register:
        from bot.store.sql.experts import database_of

        database = database_of(settings.storage)
        await database.open(upgrade=settings.storage.auto_migrate)
    try:
        with on_signals(lambda _sig: stop.set(), signal.SIGINT, signal.SIGTERM):
            registration = Registration(database, loop) if database is not None else None
            return await asyncio.to_thread(launch, HfApi(token=token), spec, token, stop,
                                           lambda s: print(s, flush=True), registration)
    finally:
        if database is not None:
            await database.close()
