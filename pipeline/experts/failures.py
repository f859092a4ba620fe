"""Expert call failures as one sentence for the user (and details for the operator's log).

Source of the status meanings: the Hugging Face inference API's documented HTTP errors, and
Inference Providers' billing rules (a call without credits left answers 402).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx2
from huggingface_hub.errors import HfHubHTTPError, InferenceTimeoutError, OfflineModeIsEnabled
from PIL import Image

from ..errors import ExpertError
from ..media import PixelLimitError
from . import http

log = logging.getLogger("pipeline.experts.hub")


def refused_connection(exc: BaseException) -> bool:
    """Whether ``exc`` or one of its causes is a refused or failed TCP connection (nothing listens)."""
    seen: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in seen:
        if isinstance(e, (httpx2.ConnectError, ConnectionRefusedError)):
            return True
        seen.append(e)
        e = e.__cause__ or e.__context__
    return False



def billing_error(settings: Any, http_err: HfHubHTTPError, detail: str) -> ExpertError:
    """The one sentence for an account out of credits (``reason="billing"``): it names the
    account whose credits pay (``bill_to``, else the token's owner) and where to top up."""
    account = (f"the organisation {settings.bill_to}" if settings.bill_to
               else "the account of the configured Hugging Face token")
    return ExpertError(
        f"Inference Providers refused the call because {account} has no credits left (HTTP "
        f"{http_err.response.status_code}); top up {account} at https://huggingface.co/settings/billing "
        "or set [inference] bill_to to an organisation with credits.",
        detail, reason="billing",
    )


def scrub(settings: Any, text: str) -> str:
    token = settings.token
    return text.replace(token, "***") if token else text


def too_large(settings: Any, exc: BaseException, model: str) -> ExpertError | None:
    """``reason="too_large"`` (not retryable) when ``exc`` or its causes is a reply over a size
    limit or an image over the pixel limit; else ``None``. The log line names the setting."""
    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in chain:
        chain.append(e)
        e = e.__cause__ or e.__context__
    detail = scrub(settings, f"{type(exc).__name__}: {exc}")
    for x in chain:
        if isinstance(x, http.ReplyTooLarge):
            return ExpertError(
                f"The model {model}'s reply was larger than the limit of {x.limit / 1e6:,.1f} MB, so it was not read.",
                f"{detail} (setting {x.setting} = {x.limit})", reason="too_large",
            )
        if isinstance(x, (PixelLimitError, Image.DecompressionBombError)):
            return ExpertError(
                f"The model {model} returned an image with too many pixels to decode safely.",
                f"{detail} (setting [inference] max_image_pixels = {settings.max_image_pixels})",
                reason="too_large",
            )
    return None


def map_error(settings: Any, exc: BaseException, task: str, model: str) -> ExpertError:
    """One sentence for the user (never the token), details for the log. Source of the status
    meanings: the Hugging Face inference API's documented HTTP errors."""
    detail = scrub(settings, f"{type(exc).__name__}: {exc}")
    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in chain:
        chain.append(e)
        e = e.__cause__ or e.__context__
    err: ExpertError
    big = too_large(settings, exc, model)
    if big is not None:
        err = big
    elif any(isinstance(x, OfflineModeIsEnabled) for x in chain):
        err = ExpertError(
            f"The model {model} cannot be reached: HF_HUB_OFFLINE is set, which blocks calls to Hugging Face; "
            "unset it or configure [inference] base_url for your own gateway.",
            detail, reason="unavailable",
        )
    elif any(isinstance(x, (InferenceTimeoutError, httpx2.TimeoutException, asyncio.TimeoutError)) for x in chain):
        err = ExpertError(
            f"The model {model} did not answer within {settings.task_timeout:g} seconds.",
            detail, reason="timeout", retryable=True,
        )
    elif http_err := next((x for x in chain if isinstance(x, HfHubHTTPError) and x.response is not None), None):
        err = _http_error(settings, http_err, model, detail)
    elif any(isinstance(x, httpx2.TransportError) for x in chain):
        err = ExpertError(f"The model {model} could not be reached.", detail, reason="server", retryable=True)
    elif redirect := next((x for x in chain if isinstance(x, http.RedirectRefused)), None):
        err = ExpertError(f"The model {model} answered with a redirect to another host ({redirect.location}); the bot "
                          "does not send your input there.", detail, reason="bad_output")
    elif any(isinstance(x, http.ReplyEncodingRefused) for x in chain):
        err = ExpertError(f"The model {model} sent its reply in an encoding the bot does not accept.", detail,
                          reason="bad_output")
    elif isinstance(exc, ValueError) and ("not supported" in str(exc) or "provider" in str(exc).lower()):
        err = ExpertError(f"No configured provider serves {task} with {model}.", detail, reason="unavailable")
    else:
        err = ExpertError(f"The model {model} returned output that could not be read.", detail, reason="bad_output")
    log.warning("expert %s (%s) failed: %s [%s]", model, task, detail[:500], err.reason)
    return err


def _http_error(settings: Any, http_err: HfHubHTTPError, model: str, detail: str) -> ExpertError:
    """The :class:`ExpertError` of an HTTP error answer, by status (402 and out-of-credit answers:
    :func:`billing_error`)."""
    status = http_err.response.status_code
    if status == 402 or (status in (400, 403, 429) and _credits_exhausted(http_err)):
        return billing_error(settings, http_err, detail)
    if status in (404, 410):
        return ExpertError(f"The model {model} is not available (HTTP {status}).", detail, reason="gone")
    if status == 429:
        return ExpertError(
            f"The model {model} is rate-limited right now (HTTP 429).", detail, reason="rate_limited", retryable=True
        )
    if status == 503:
        est = None
        try:
            body = http_err.response.json()
            if isinstance(body, dict) and body.get("estimated_time") is not None:
                est = float(body["estimated_time"])
        except Exception:  # noqa: BLE001 - body is optional
            est = None
        return ExpertError(
            f"The model {model} is still loading (HTTP 503).", detail, reason="loading", retryable=True,
            estimated_time=est,
        )
    if status >= 500:
        return ExpertError(f"The model {model} failed on the server (HTTP {status}).", detail, reason="server",
                           retryable=True)
    return ExpertError(f"The model {model} refused the request (HTTP {status}).", detail, reason="refused")


def _credits_exhausted(http_err: HfHubHTTPError) -> bool:
    """Whether an error reply says the account is out of credits (providers answer 402, some
    403/429 with such a message)."""
    try:
        text = http_err.response.text[:2000].lower()
    except Exception:  # noqa: BLE001 - a body that cannot be read says nothing
        return False
    return "credits" in text and any(w in text for w in ("exceeded", "insufficient", "no more", "out of", "depleted"))
