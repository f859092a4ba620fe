"""``hugginggpt experts launch``: the expert server on a rented GPU, as a Hugging Face Job.

    hugginggpt experts launch --image IMAGE --flavor a10g-small [--preset minimal] [--port 8081]
                              [--idle-minutes 15] [--max-minutes 60] [--namespace NS]

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
3. once the job runs and its server answers ``GET /models`` with the key, the two settings that
   register it with the bot are printed (``[inference] experts_url`` and ``experts_api_keys``,
   as environment variables);
4. it is watched every ``--poll`` seconds and cancelled when its server has been idle
   (``GET /models`` ``idle_seconds``) for ``--idle-minutes``, at ``--max-minutes``, or on Ctrl-C;
5. what it cost is said: the job's running time (``durations.runningSecs``) at the flavour's
   ``unitCostUSD`` per ``unitLabel`` (minute).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from bot.errors import ConfigError
from pipeline.errors import HubError

log = logging.getLogger("hugginggpt.jobs")

SECRET_KEY = "HUGGINGGPT_EXPERTS_API_KEY"
"""The job's secret that the expert server reads as its ``api_key`` (its settings' env prefix)."""
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


def watch(api: Any, spec: LaunchSpec, job: Any, key: str, stop: threading.Event, say: Callable[[str], None]) -> str:
    """Follow the job until it ends or is to be stopped; returns why (a sentence).

    Raises:
        HubError: the job ended with an error before its server answered, or the API failed.
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
            url = urls[0].rstrip("/")
            say(register_lines(url, key))
        if idle >= spec.idle:
            return f"Its expert server was idle for {spec.idle / 60:g} minutes."
    return "Stopped on request."


def register_lines(url: str, key: str) -> str:
    """What to tell the bot: the server's URL and key as ``[inference]`` environment variables."""
    return (f"The expert server answers at {url}.\nGive it to the bot (until this command stops it):\n"
            f"  HUGGINGGPT_INFERENCE__EXPERTS_URL={url}\n"
            f"  HUGGINGGPT_INFERENCE__EXPERTS_API_KEYS={json.dumps({url: key})}")


def cost_line(job: Any, hardware: Any) -> str:
    """``Ran N s on FLAVOUR: $X`` from the job's running time and the flavour's unit price."""
    secs = (job.durations.running_secs if job.durations else None) or 0
    per = {"minute": 60, "hour": 3600, "second": 1}.get(str(hardware.unit_label), 60)
    return (f"It ran {secs} seconds on {hardware.name} at ${hardware.unit_cost_usd:g} per {hardware.unit_label}: "
            f"${secs / per * hardware.unit_cost_usd:.4f}.")


def launch(api: Any, spec: LaunchSpec, token: str, stop: threading.Event, say: Callable[[str], None]) -> int:
    """Check the flavour, start the job, watch it, cancel it and say what it cost (see the module
    docstring). Returns the exit status (0).

    Raises:
        ConfigError: no such flavour.
        HubError: the Jobs API failed, or the job ended before its server answered.
    """
    hardware = choose_hardware(api, spec.flavor)
    key = secrets.token_urlsafe(32)
    job = start_job(api, spec, key, token)
    say(f"Started job {job.id} on {hardware.name} (${hardware.unit_cost_usd:g} per {hardware.unit_label}); "
        f"follow it at {job.url}.")
    try:
        why = watch(api, spec, job, key, stop, say)
        say(f"{why} Job {job.id} is cancelled." if _cancel(api, spec, job.id, say) else why)
    except BaseException:
        _cancel(api, spec, job.id, say)
        raise
    finally:  # said even when the job failed: its minutes are billed all the same
        with contextlib.suppress(HubError):
            say(cost_line(_look(api, spec, job.id), hardware))
    return 0


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
    """``experts launch``: :func:`launch` in a thread, Ctrl-C and SIGTERM stopping it.

    Raises:
        ConfigError: no HF token, or no such flavour.
        HubError: the Jobs API failed.
    """
    from huggingface_hub import HfApi

    if settings.inference.token is None:
        raise ConfigError("Launching an expert server on Hugging Face Jobs needs an HF token (HF_TOKEN) with the "
                          "right to run jobs.")
    token = settings.inference.token.get_secret_value()
    spec = LaunchSpec(args.image, args.flavor, args.port, args.idle_minutes * 60, args.max_minutes * 60, args.poll,
                      args.namespace, args.preset)
    stop = threading.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        return await asyncio.to_thread(launch, HfApi(token=token), spec, token, stop, lambda s: print(s, flush=True))
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
