"""Expert models on Hugging Face through ``huggingface_hub``'s ``AsyncInferenceClient``.

Routing of model ``M`` (docs/configuration.md, ``[inference]``):

0. a URL given by the caller (a team's expert server, chosen by :mod:`.routing`);
1. ``endpoints[M]`` (a dedicated Inference Endpoint URL): the client POSTs straight to it;
2. ``base_url``: ``{base_url}/models/{M}`` in the Hugging Face inference wire format;
3. otherwise the model id on the Inference Provider the caller names (:mod:`.providers` orders
   them by the provider policy); chat tasks go through the router's auto route with a
   ``model:policy`` or ``model:provider`` suffix, which the router resolves and fails over itself.

Every call names ``[inference] bill_to`` (the client's ``bill_to``, the ``X-HF-Bill-To`` header)
when it is set; a 402 (out of credits) is one sentence naming the account to top up
(``reason="billing"``), never retried nor handed to another provider or model.

How each task is called and how its answer is normalised comes from its registry entry
(:mod:`pipeline.tasks`); this module adds routing, retries (tenacity, honouring a 503's
``estimated_time``) and the mapping of failures to one sentence for the user.

A call that fails becomes one sentence for the user and the details for the operator's log
(:func:`map_error`; the status meanings are the Hugging Face inference API's documented HTTP
errors, and Inference Providers' billing rules: a call without credits left answers 402).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Any

import httpx2
from huggingface_hub import AsyncInferenceClient
from huggingface_hub.errors import HfHubHTTPError, InferenceTimeoutError, OfflineModeIsEnabled
from huggingface_hub.utils import build_hf_headers, get_async_session, hf_raise_for_status
from PIL import Image
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_random_exponential

from ..config import ExpertAccess, PipelineConfig
from ..errors import ExpertError, HuggingGPTError
from ..llm import Usage
from ..media import PixelLimitError
from ..tasks import TASKS
from ..tasks.base import Call, Inputs, Normalise
from ..types import Output, Resource, ResourceSink
from ..wire import tls_context
from . import http
from .base import TaskSaver, condense, read_inputs
from .providers import CHAT_TASKS, client_knows, warm_mapping

__all__ = ["ClientCalls", "HubRunner", "refused_connection"]

log = logging.getLogger(__name__)


class ClientCalls:
    """What a registry entry's ``call`` gets: the ``AsyncInferenceClient``'s task methods, plus
    :meth:`post_raw` for tasks the client has no method or provider for.

    Args:
        client: the shared inference client.
        runner: the :class:`HubRunner` whose HTTP session and configuration raw posts use.
    """

    def __init__(self, client: AsyncInferenceClient, runner: "HubRunner") -> None:
        self._client = client
        self._runner = runner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def post_raw(self, task: str, target: str, *, json: Any = None, data: bytes | None = None) -> tuple[bytes, str]:
        """POST to a URL in the inference wire format; returns ``(body, content type)``.

        Raises:
            ExpertError: ``target`` is a model id, not a URL (no provider serves ``task``).
            HfHubHTTPError, InferenceTimeoutError: as the client would.
        """
        return await self._runner.post_raw(task, target, json_body=json, data=data)


class HubRunner:
    """Runs one task on one Hugging Face model and normalises its output.

    Args:
        config: the pipeline's configuration: where experts are called (``config.experts``),
            what is kept of an answer (``config.output``) and the seconds per call
            (``config.execution.task_timeout``).

    One ``AsyncInferenceClient`` (token, ``timeout=task_timeout``) is shared by all calls; close it
    with :meth:`aclose`. Its HTTP session is :func:`pipeline.experts.http.bounded_async_client`
    (installed process-wide through ``huggingface_hub``'s ``set_async_client_factory``): replies
    are bounded while they arrive and a configured gateway is reachable under ``HF_HUB_OFFLINE``.

    Example::

        hub = HubRunner(pipeline_config(settings))  # bot.backends.pipeline_config
        out = await hub.run("image-to-text", "Salesforce/blip-image-captioning-large",
                            {"image": photo_resource}, sink, task_id=1)
        print(out.text)          # the caption
        await hub.aclose()
    """

    def __init__(self, config: PipelineConfig, *, transport: httpx2.AsyncBaseTransport | None = None) -> None:
        self.config = config
        self.access = config.experts
        http.install(router_url=self.access.router_url, transport=transport)
        tls_context()  # at start-up, not in the first task
        self._clients: dict[str, AsyncInferenceClient] = {}
        self._client = self._client_for(None)
        self._http: httpx2.AsyncClient | None = None

    def _client_for(self, provider: str | None) -> AsyncInferenceClient:
        """The client calling ``provider`` (``"auto"`` for the router's choice; ``None``: a URL
        target, routed by the client to that URL), made once per provider."""
        key = provider or ""
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = AsyncInferenceClient(
                provider=provider or "hf-inference", token=self.access.token or None,
                timeout=self.config.execution.task_timeout, bill_to=self.access.bill_to or None,
            )
        return client

    def endpoint_for(self, model: str) -> str | None:
        """URL that serves ``model``, or ``None`` when the provider path is used.

        ``endpoints[model]`` first, then ``{base_url}/models/{model}``.
        """
        if model in self.access.endpoints:
            return self.access.endpoints[model]
        if self.access.base_url:
            return f"{self.access.base_url.rstrip('/')}/models/{model}"
        return None

    async def aclose(self) -> None:
        """Close the HTTP clients."""
        for client in self._clients.values():
            await client.close()
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def run(
        self, task: str, model: str, args: dict[str, str | Resource], sink: ResourceSink, *, task_id: int,
        usage: Usage | None = None, url: str | None = None, expert_server: bool = False, provider: str | None = None,
    ) -> Output:
        """Run ``task`` on ``model`` and return its normalised :class:`Output`.

        Args:
            task: registry name (``pipeline.tasks.TASKS``).
            model: Hugging Face model id.
            args: argument key -> text (``str``) or a :class:`Resource` for media arguments; media
                are read from ``resource.path`` only.
            sink: where generated files are saved (origin ``"task:<task_id>"``).
            task_id: the task's id in the plan.
            usage: the run's controller-call counter (unused here: no controller call is made).
            url: call ``model`` at this URL instead of its configured route (a team's expert
                server: ``{experts_url}/models/{model}``, :mod:`pipeline.experts.routing`).
            expert_server: ``url`` is an expert server: the Hugging Face token is not sent to it
                (only its own API key, ``expert_keys``), and a server that refuses the
                connection is not retried (the caller moves on to the next route at once).
            provider: the Inference Provider to call when no URL routes ``model`` (``"auto"`` or
                ``"auto:<policy or provider>"`` for a chat task: the router decides), from
                :meth:`pipeline.experts.providers.ProviderPolicy.order`; ``None``: the settings'
                provider.

        Returns:
            :class:`Output` with ``text``, typed ``data`` and ``files``.

        Raises:
            ExpertError: ``reason`` one of gone, refused, rate_limited, loading, server, timeout,
                bad_output, too_large, unavailable. Retryable failures are retried here first, up
                to ``max_attempts`` tries with exponential backoff and jitter capped by
                ``backoff_max`` (a 503 waits ``min(estimated_time, backoff_max)``); a reply over
                ``max_media_bytes``/``max_json_bytes`` or an image over ``max_image_pixels`` is
                ``too_large`` and not retried.
            HuggingGPTError: any other error of this project raised while the output is saved
                (a :class:`bot.errors.StorageError` of the sink), unchanged: it is not the model's
                fault and another model would not fix it.

        Text results longer than ``max_text_chars`` are cut (:func:`pipeline.experts.base.condense`);
        JSON list replies longer than ``max_items`` are cut to the best-scored items before they
        are parsed, and the text says how many were dropped.
        """
        spec = TASKS.get(task)
        if spec is None or spec.call is None or spec.normalise is None:
            raise ExpertError(f"No Hugging Face model serves the task {task}.", reason="unavailable")
        inputs = await read_inputs(spec, args)
        target, calls = await self._route(task, model, url, provider)
        gateway = http.origin_of(target) if target.startswith(("http://", "https://")) else None
        limits = self.config.output
        scope = http.CallScope(spec.reply, limits.max_json_bytes, limits.max_media_bytes, gateway, max_items=limits.max_items,
                               send_token=not expert_server, bearer=self.access.key_for(target) if expert_server else None)
        began = time.monotonic()
        retrying = self._retrying(task, task_id, model, expert_server)
        raw = await self._call(task, model, spec.call, calls, target, inputs, scope, retrying)
        log.info("task %s (%s) on %s answered in %.2f s", task_id, task, model, time.monotonic() - began)
        saver = TaskSaver(sink, task, task_id, limits)
        what = f"task {task_id} ({task}) on {model}"
        out = await self._normalise(spec.normalise, raw, inputs, saver, what, model)
        out = await condense(self._note_dropped(out, scope, what), saver)
        return replace(out, billed_seconds=sum(scope.billed) if scope.billed else None)

    async def _route(self, task: str, model: str, url: str | None, provider: str | None) -> tuple[str, ClientCalls]:
        """``(target, calls)``: the URL or model id to call and the client calling it (``url``,
        then the configured endpoint, else the provider route with its mapping warmed)."""
        target = url or self.endpoint_for(model)
        if target is not None:
            return target, ClientCalls(self._client, self)
        target, client = self._provider_target(task, model, provider or self.access.provider)
        await warm_mapping(client.provider, task, target)
        return target, ClientCalls(client, self)

    def _retrying(self, task: str, task_id: int, model: str, expert_server: bool) -> AsyncRetrying:
        """Retries of retryable :class:`ExpertError`: up to ``max_attempts`` tries, exponential
        backoff with jitter capped by ``backoff_max``, a 503 waiting ``min(estimated_time,
        backoff_max)``; an expert server refusing the connection is not retried."""
        access = self.access
        expo = wait_random_exponential(multiplier=0.5, max=access.backoff_max)

        def wait(rs: RetryCallState) -> float:
            exc = rs.outcome.exception() if rs.outcome else None
            if isinstance(exc, ExpertError) and exc.estimated_time is not None:
                return max(0.0, min(exc.estimated_time, access.backoff_max))
            return expo(rs)

        def before_sleep(rs: RetryCallState) -> None:
            exc = rs.outcome.exception() if rs.outcome else None
            log.warning(
                "task %s (%s) on %s: attempt %d failed (%s), retrying in %.2f s",
                task_id, task, model, rs.attempt_number, getattr(exc, "reason", exc),
                rs.next_action.sleep if rs.next_action else 0.0,
            )

        return AsyncRetrying(
            retry=retry_if_exception(lambda e: isinstance(e, ExpertError) and e.retryable
                                     and not (expert_server and refused_connection(e))),
            stop=stop_after_attempt(max(1, access.max_attempts)),
            wait=wait,
            before_sleep=before_sleep,
            reraise=True,
        )

    async def _call(self, task: str, model: str, call: Call, calls: ClientCalls, target: str, inputs: Inputs,
                    scope: http.CallScope, retrying: AsyncRetrying) -> Any:
        """The raw answer of ``model`` to ``task``: ``call(calls, target, inputs)`` under ``scope``,
        retried by ``retrying``; a failure that is not ours becomes one :class:`ExpertError`."""
        raw: Any = None
        async for attempt in retrying:
            with attempt:
                scope.dropped.clear()
                scope.billed.clear()
                try:
                    with http.call_scope(scope):
                        raw = await call(calls, target, inputs)
                except HuggingGPTError:
                    raise
                except Exception as exc:  # noqa: BLE001 - mapped to one sentence below
                    raise map_error(self.config, exc, task, model) from exc
        return raw

    async def _normalise(self, normalise: Normalise, raw: Any, inputs: Inputs, saver: TaskSaver, what: str,
                         model: str) -> Output:
        """``normalise(raw, inputs, saver)``; output it cannot read is ``bad_output`` (or
        ``too_large``), errors of this project pass unchanged."""
        try:
            return await normalise(raw, inputs, saver)
        except HuggingGPTError:
            raise  # ExpertError from a normaliser, or the sink's StorageError: not bad output
        except Exception as exc:  # noqa: BLE001
            err = too_large(self.config, exc, model)
            if err is not None:
                log.warning("%s: %s", what, err)
                raise err from exc
            log.error("%s: unusable output: %r", what, exc)
            raise ExpertError(
                f"The model {model} returned output that could not be read.", repr(exc), reason="bad_output"
            ) from exc

    def _note_dropped(self, out: Output, scope: http.CallScope, what: str) -> Output:
        """``out`` with a note of how many list items were cut to ``max_items``, if any were."""
        if not scope.dropped:
            return out
        dropped = sum(scope.dropped)
        kept = self.config.output.max_items
        log.warning("%s: %d items dropped ([inference] max_items = %d)", what, dropped, kept)
        note = f"(only the {kept:,} best-scored of {kept + dropped:,} results are kept)"
        return Output(text=f"{out.text} {note}" if out.text else note, files=out.files, data=out.data)

    def _provider_target(self, task: str, model: str, provider: str | None) -> tuple[str, AsyncInferenceClient]:
        """``(model as the client is given it, client)`` for a provider route: ``auto:fastest``
        becomes the router's ``model:fastest`` on the ``auto`` client; a provider name its own
        client; a model already pinned (``model:provider``) is left as it is for the router. A
        chat task on a provider the installed client has no helper for goes to the router's auto
        route as ``model:provider`` (the router knows more providers than the client)."""
        if provider is None:
            return model, self._client_for("auto")
        if task in CHAT_TASKS and not provider.startswith("auto") and not client_knows(provider):
            provider = f"auto:{provider}"
        if provider == "auto" or provider.startswith("auto:"):
            suffix = provider.partition(":")[2]
            pinned = ":" in model
            return (f"{model}:{suffix}" if suffix and not pinned else model), self._client_for("auto")
        return model, self._client_for(provider)

    async def post_raw(self, task: str, target: str, *, json_body: Any = None, data: bytes | None = None) -> tuple[bytes, str]:
        """POST to ``target`` in the inference wire format (see :meth:`ClientCalls.post_raw`)."""
        if not target.startswith(("http://", "https://")):
            raise ExpertError(
                f"No Inference Provider serves {task}; configure an endpoint for it.", reason="unavailable"
            )
        if self._http is None:
            self._http = get_async_session()
        headers = build_hf_headers(token=self.access.token or None)
        if http.BILL_TO.get() or self.access.bill_to:
            headers[http.BILL_TO_HEADER] = http.BILL_TO.get() or self.access.bill_to or ""
        if data is not None:
            headers["content-type"] = "application/octet-stream"
        try:
            response = await self._http.post(
                target, json=json_body, content=data, headers=headers, timeout=self.config.execution.task_timeout
            )
        except httpx2.TimeoutException as exc:
            raise InferenceTimeoutError(f"Inference call timed out: {target}") from exc
        hf_raise_for_status(response)
        return response.content, response.headers.get("content-type", "")


# -- a failed call as one sentence ------------------------------------------------------------------

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


def billing_error(access: ExpertAccess, http_err: HfHubHTTPError, detail: str) -> ExpertError:
    """The one sentence for an account out of credits (``reason="billing"``): it names the
    account whose credits pay (the run's team's ``bill_to_teams`` entry, ``bill_to``, else the
    token's owner) and where to top up."""
    payer = http.BILL_TO.get() or access.bill_to  # the team's own organisation, else [inference] bill_to
    account = f"the organisation {payer}" if payer else "the account of the configured Hugging Face token"
    return ExpertError(
        f"Inference Providers refused the call because {account} has no credits left (HTTP "
        f"{http_err.response.status_code}); top up {account} at https://huggingface.co/settings/billing "
        "or set [inference] bill_to to an organisation with credits.",
        detail, reason="billing",
    )


def scrub(access: ExpertAccess, text: str) -> str:
    token = access.token
    return text.replace(token, "***") if token else text


def too_large(config: PipelineConfig, exc: BaseException, model: str) -> ExpertError | None:
    """``reason="too_large"`` (not retryable) when ``exc`` or its causes is a reply over a size
    limit or an image over the pixel limit; else ``None``. The log line names the setting."""
    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in chain:
        chain.append(e)
        e = e.__cause__ or e.__context__
    detail = scrub(config.experts, f"{type(exc).__name__}: {exc}")
    for x in chain:
        if isinstance(x, http.ReplyTooLarge):
            return ExpertError(
                f"The model {model}'s reply was larger than the limit of {x.limit / 1e6:,.1f} MB, so it was not read.",
                f"{detail} (setting {x.setting} = {x.limit})", reason="too_large",
            )
        if isinstance(x, (PixelLimitError, Image.DecompressionBombError)):
            return ExpertError(
                f"The model {model} returned an image with too many pixels to decode safely.",
                f"{detail} (setting [inference] max_image_pixels = {config.output.max_image_pixels})",
                reason="too_large",
            )
    return None


def map_error(config: PipelineConfig, exc: BaseException, task: str, model: str) -> ExpertError:
    """One sentence for the user (never the token), details for the log. Source of the status
    meanings: the Hugging Face inference API's documented HTTP errors."""
    detail = scrub(config.experts, f"{type(exc).__name__}: {exc}")
    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in chain:
        chain.append(e)
        e = e.__cause__ or e.__context__
    err: ExpertError
    big = too_large(config, exc, model)
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
            f"The model {model} did not answer within {config.execution.task_timeout:g} seconds.",
            detail, reason="timeout", retryable=True,
        )
    elif http_err := next((x for x in chain if isinstance(x, HfHubHTTPError) and x.response is not None), None):
        err = _http_error(config.experts, http_err, model, detail)
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


def _http_error(access: ExpertAccess, http_err: HfHubHTTPError, model: str, detail: str) -> ExpertError:
    """The :class:`ExpertError` of an HTTP error answer, by status (402 and out-of-credit answers:
    :func:`billing_error`)."""
    status = http_err.response.status_code
    if status == 402 or (status in (400, 403, 429) and _credits_exhausted(http_err)):
        return billing_error(access, http_err, detail)
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
