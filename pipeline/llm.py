"""The controller LLM: any OpenAI-compatible chat completions server, or a server of the
Responses API (``[llm] api = "responses"``), through the ``openai`` SDK.

The SDK retries 408/409/429/5xx and connection errors itself (``max_retries``, honouring
``Retry-After``), so no retry layer is stacked on top here; the run's deadline (``pipeline.core``)
bounds the SDK's retries and waits from outside. Every HTTP attempt goes through
:class:`BoundedTransport`, which counts it (``Usage.http_attempts``) and stops reading a reply
body once it passes ``max_reply_bytes``. Errors become :class:`~pipeline.errors.ControllerError`
with one sentence for the user; neither the API key nor credentials in ``base_url`` ever appear in
a message or a log line.

Streamed answers are read as text deltas without building a model object per chunk.

The ``openai`` SDK turns every server-sent event of a stream into a ``ChatCompletionChunk``
(about 0.2 ms of CPU each); a plan streams one event per token or two, so that was most of the
orchestration CPU a task cost. Here the SDK still sends the request (base URL, key, retries,
status errors) through ``with_streaming_response``, ``httpx-sse`` (public API, no SDK internals)
splits the body into events, and each event's data is parsed with ``jiter`` for the two fields we
read.

Wire format: OpenAI API reference, "Create chat completion" with ``stream: true``: ``data:``
events holding ``chat.completion.chunk`` objects, then ``data: [DONE]``; an error while streaming
arrives as an event whose data is ``{"error": {...}}``. With ``api = "responses"``: "Create a
model response" (``client.responses.create``, ``input`` the same role/content messages,
``text.format`` for structured output) with ``stream: true``: semantic events whose data has a
``type``; the text is in ``response.output_text.delta`` events, the token counts in
``response.completed``; ``response.failed`` and ``error`` events report an error
(:func:`response_deltas`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import jiter
import openai
from httpx_sse import EventSource
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from . import tracing
from .bounded import bound_body
from .errors import ControllerError
from .redact import host_of, mask_credentials
from .wire import AiohttpTransport

log = logging.getLogger(__name__)


STAGE_HEADER = "X-HuggingGPT-Stage"
"""HTTP header naming the stage of each controller call (docs/how-it-works.md): ``task-planning``,
``task-replanning`` (:mod:`pipeline.replanning`), ``model-selection``, ``controller-task`` or
``response-generation``. Gateways can log it; the
sandbox's stand-in controller routes on it. Prompts carry no such marker."""
TASK_HEADER = "X-HuggingGPT-Task"
"""HTTP header naming the task (pipeline tag) of a ``controller-task`` call."""
STAGES = ("task-planning", "task-replanning", "model-selection", "controller-task", "response-generation")


def stage_headers(stage: str, task: str | None = None) -> dict[str, str]:
    """The headers sent with a controller call of ``stage`` (one of :data:`STAGES`).

    Raises:
        ValueError: ``stage`` is not one of :data:`STAGES` (a programming error).
    """
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}")
    headers = {STAGE_HEADER: stage}
    if task:
        headers[TASK_HEADER] = task
    return headers


@dataclass
class Usage:
    """Controller use during one run.

    Attributes:
        calls: LLM calls the stages made (a structured-output fallback is a call of its own).
        http_attempts: HTTP requests actually sent for them (the SDK's retries included).
        prompt_tokens, completion_tokens: tokens the server reported (the ``usage`` field of a
            completion or of a streamed chunk; servers that report none add nothing).
        plan_repairs: repair rounds task planning needed (0 or 1 per run).
    """

    calls: int = 0
    http_attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    plan_repairs: int = 0

    def count_tokens(self, resp: Any) -> None:
        """Add the ``usage`` of a chat completion (OpenAI API ``CompletionUsage``), if it has one."""
        reported = getattr(resp, "usage", None)
        self.prompt_tokens += int(getattr(reported, "prompt_tokens", 0) or 0)
        self.completion_tokens += int(getattr(reported, "completion_tokens", 0) or 0)

    def add_reported(self, reported: dict[str, Any]) -> None:
        """Add a ``usage`` object as it arrives in a streamed reply (a JSON mapping)."""
        for name in ("prompt_tokens", "completion_tokens"):
            value = reported.get(name)
            if isinstance(value, int) and value > 0:
                setattr(self, name, getattr(self, name) + value)


_CURRENT_USAGE: ContextVar[Usage | None] = ContextVar("hugginggpt_llm_usage", default=None)
"""The :class:`Usage` of the call in progress in this task (read by :class:`BoundedTransport`)."""

MiB = 1024 * 1024


class ReplyTooLarge(openai.OpenAIError):
    """A controller reply body passed the byte limit (an ``OpenAIError`` so the SDK does not retry it)."""

    def __init__(self, limit: int, why: str | None = None) -> None:
        super().__init__(why or f"reply body larger than {limit} bytes")
        self.limit = limit


class BoundedTransport(httpx2.AsyncBaseTransport):
    """An HTTP transport that counts attempts, bounds reply bodies while they arrive and sends the
    run's W3C ``traceparent`` (:func:`pipeline.tracing.inject`).

    Args:
        limit: bytes; a reply whose ``Content-Length`` or decoded body passes it raises
            :class:`ReplyTooLarge` (:func:`pipeline.bounded.bound_body`).
        inner: the transport that does the I/O (default :class:`pipeline.wire.AiohttpTransport`).
    """

    def __init__(self, limit: int, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self.limit = limit
        self._inner = inner or AiohttpTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        usage = _CURRENT_USAGE.get()
        if usage is not None:
            usage.http_attempts += 1
        tracing.inject(request.headers)  # the run's W3C traceparent, when tracing is on
        response = await self._inner.handle_async_request(request)
        try:
            bound_body(response, self.limit, lambda _seen: ReplyTooLarge(self.limit),
                       lambda values: ReplyTooLarge(self.limit, f"content encoding {values} cannot be bounded"))
        except ReplyTooLarge:
            await response.aclose()
            raise
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def _response_format(mode: str, schema_name: str, schema: dict[str, Any], api: str = "chat") -> dict[str, Any]:
    """The ``response_format`` argument of a structured-output ``mode`` (OpenAI chat completions
    API: ``json_schema``, ``json_object``; ``off``: none); for ``api="responses"`` the same as the
    Responses API's ``text.format``."""
    if api == "responses":
        if mode == "json_schema":
            return {"text": {"format": {"type": "json_schema", "name": schema_name, "schema": schema, "strict": False}}}
        return {"text": {"format": {"type": "json_object"}}} if mode == "json_object" else {}
    if mode == "json_schema":
        return {"response_format": {"type": "json_schema", "json_schema": {"name": schema_name, "schema": schema, "strict": False}}}
    if mode == "json_object":
        return {"response_format": {"type": "json_object"}}
    return {}


class Controller:
    """Chat completions client for the four stages.

    Args:
        model: model name sent to the server.
        base_url: server base URL (e.g. ``http://127.0.0.1:8000/v1``); ``None`` for the SDK default.
        api_key: the key; any non-empty string for local servers.
        timeout: seconds per request (``[llm] timeout``).
        max_retries: SDK retries on 408/409/429/5xx/connection errors (``[llm] max_retries``).
        structured_output: ``"auto"`` (JSON schema, falling back to JSON mode then plain text when
            the server rejects it with 400), ``"json_schema"``, ``"json_object"`` or ``"off"``
            (``[llm] structured_output``).
        temperature: sampling temperature (``[llm] temperature``).
        max_reply_bytes: bytes, largest reply body read (``[llm] max_reply_bytes``).
        client: an ``AsyncOpenAI`` to use instead of building one.
        api: ``"chat"`` (Chat Completions) or ``"responses"`` (the Responses API) (``[llm] api``).
    """

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None,
        api_key: str,
        timeout: float,
        max_retries: int,
        structured_output: str,
        temperature: float,
        max_reply_bytes: int,
        client: AsyncOpenAI | None = None,
        api: str = "chat",
    ) -> None:
        self.model = model
        self.api = api
        self.timeout = timeout
        self.temperature = temperature
        self.structured_output = structured_output
        self.max_reply_bytes = max_reply_bytes
        self._host = host_of(base_url)
        self._client = client or AsyncOpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries,
            http_client=openai.DefaultAsyncHttpxClient(
                transport=BoundedTransport(max_reply_bytes), headers={"Accept-Encoding": "gzip, deflate"}
            ),
        )
        # The SDK imports its chat resources on first use (about 0.1 s of CPU): do it now, at
        # start-up, not inside the first run.
        _ = self._client.responses if api == "responses" else self._client.chat.completions
        # "auto" learns once per process what the server accepts.
        self._modes = {
            "auto": ["json_schema", "json_object", "off"],
            "json_schema": ["json_schema"],
            "json_object": ["json_object"],
            "off": ["off"],
        }[structured_output]

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.close()

    def _error(self, e: Exception) -> ControllerError:
        detail = mask_credentials(f"{e.__class__.__name__}: {e}")
        too_large = e if isinstance(e, ReplyTooLarge) else e.__cause__ if isinstance(e.__cause__, ReplyTooLarge) else None
        if too_large is not None:
            msg = (f"The controller LLM at {self._host} sent a reply larger than "
                   f"{too_large.limit / MiB:g} MB; it was not read.")
        elif isinstance(e, (openai.APITimeoutError, httpx2.TimeoutException)):
            msg = f"The controller LLM at {self._host} did not answer within {self.timeout:g} seconds."
        elif isinstance(e, (openai.APIConnectionError, httpx2.HTTPError, anyio.EndOfStream, OSError)):
            msg = f"The controller LLM at {self._host} cannot be reached."
        elif isinstance(e, openai.AuthenticationError):
            msg = f"The controller LLM at {self._host} refused the API key (HTTP 401): check [llm] api_key or OPENAI_API_KEY."
        elif isinstance(e, openai.PermissionDeniedError):
            msg = f"The controller LLM at {self._host} denied access to model {self.model} (HTTP 403)."
        elif isinstance(e, openai.RateLimitError):
            msg = f"The controller LLM at {self._host} is rate-limiting requests (HTTP 429); please try again in a minute."
        elif isinstance(e, openai.NotFoundError):
            msg = f"The controller LLM at {self._host} has no model named {self.model} (HTTP 404): check [llm] model."
        elif isinstance(e, openai.APIStatusError):
            msg = f"The controller LLM at {self._host} failed with HTTP {e.status_code}."
        else:
            msg = f"The controller LLM at {self._host} gave an unusable answer."
        log.warning("controller call failed: %s", detail)
        return ControllerError(msg, detail)

    async def complete_json(
        self, messages: list[dict[str, Any]], *, stage: str, schema_name: str, schema: dict[str, Any], usage: Usage
    ) -> str:
        """Ask for a JSON answer; returns the raw content (still to be repaired and validated).

        Structured output per the OpenAI API (``response_format`` ``json_schema`` / ``json_object``);
        a server that rejects a mode with 400 is asked again in the next mode, and "auto" remembers
        what worked.

        Raises:
            ControllerError: unreachable, 401/403/404/429/5xx, timeout, or 400 in every mode.
        """
        last: Exception | None = None
        for mode in list(self._modes):
            kwargs = _response_format(mode, schema_name, schema, self.api)
            usage.calls += 1
            _CURRENT_USAGE.set(usage)
            try:
                return await self._create(messages, stage_headers(stage), usage, **kwargs)
            except openai.BadRequestError as e:
                last = e
                if len(self._modes) > 1 and mode != "off":
                    log.info("controller rejected response_format=%s (%s); falling back", mode, e.status_code)
                    self._modes.remove(mode)
                    continue
                raise self._error(e) from None
            except openai.OpenAIError as e:
                raise self._error(e) from None
        raise self._error(last or RuntimeError("no mode left"))

    async def stream_json(
        self, messages: list[dict[str, Any]], *, stage: str, schema_name: str, schema: dict[str, Any], usage: Usage
    ) -> AsyncIterator[str]:
        """Ask for a JSON answer as a stream of text deltas (``str`` pieces, in order).

        Structured output modes as :meth:`complete_json` (a mode the server rejects with 400 is
        dropped, and "auto" remembers it). A server that rejects streaming in every mode is asked
        once without streaming, and its whole answer is one delta.

        Raises:
            ControllerError: as :meth:`complete_json`, also mid-stream.
        """
        for mode in list(self._modes):
            kwargs = _response_format(mode, schema_name, schema, self.api)
            usage.calls += 1
            _CURRENT_USAGE.set(usage)
            try:
                response = await self._open_stream(messages, stage, **kwargs)
            except openai.BadRequestError as e:
                if len(self._modes) > 1 and mode != "off":
                    log.info("controller rejected streamed response_format=%s (%s); falling back", mode, e.status_code)
                    self._modes.remove(mode)
                    continue
                log.info("controller rejected a streamed answer (%s); asking without streaming", e.status_code)
                break
            except openai.OpenAIError as e:
                raise self._error(e) from None
            async for delta in self._deltas(response, usage):
                yield delta
            return
        yield await self.complete_json(messages, stage=stage, schema_name=schema_name, schema=schema, usage=usage)

    async def complete_text(
        self, messages: list[dict[str, Any]], *, stage: str, usage: Usage, task: str | None = None
    ) -> str:
        """Plain text completion for ``stage`` (and ``task`` for a controller-served task).

        Raises:
            ControllerError: as :meth:`complete_json`.
        """
        usage.calls += 1
        _CURRENT_USAGE.set(usage)
        try:
            return await self._create(messages, stage_headers(stage, task), usage)
        except openai.OpenAIError as e:
            raise self._error(e) from None

    async def _create(self, messages: list[dict[str, Any]], headers: dict[str, str], usage: Usage,
                      **kwargs: Any) -> str:
        """One whole answer of ``[llm] api`` (its tokens added to ``usage``); returns its text.

        Raises:
            openai.OpenAIError: as the SDK's ``create``, unchanged.
            ControllerError: the reply is not an answer of that API, or a Responses API answer
                says it failed.
        """
        if self.api == "responses":
            resp = await self._client.responses.create(**self._request(messages), extra_headers=headers, **kwargs)
            return self._output_text(resp, usage)
        resp = await self._client.chat.completions.create(**self._request(messages), extra_headers=headers, **kwargs)
        usage.count_tokens(resp)
        return self._content(resp)

    async def stream_text(self, messages: list[dict[str, Any]], *, stage: str, usage: Usage) -> AsyncIterator[str]:
        """Stream a text completion as deltas (``str`` pieces, in order). A server that rejects
        streaming (HTTP 400) is asked once without it, and its whole answer is one delta.

        Raises:
            ControllerError: as :meth:`complete_json`, also mid-stream.
        """
        usage.calls += 1
        _CURRENT_USAGE.set(usage)
        try:
            try:
                response = await self._open_stream(messages, stage)
            except openai.BadRequestError as e:  # a server without streaming: one whole answer
                log.info("controller rejected a streamed answer (%s); asking without streaming", e.status_code)
                yield await self.complete_text(messages, stage=stage, usage=usage)
                return
        except openai.OpenAIError as e:
            raise self._error(e) from None
        async for delta in self._deltas(response, usage):
            yield delta

    async def _open_stream(self, messages: list[dict[str, Any]], stage: str, **kwargs: Any) -> Any:
        """Send a streamed chat completion request; returns the SDK's ``AsyncAPIResponse`` with the
        body not read yet (status errors and retries are the SDK's, as for any call). It asks for
        the tokens used (``stream_options.include_usage``: a last chunk with ``usage``, which
        OpenAI-compatible servers send), so a streamed answer is charged as a whole one.

        Raises:
            openai.OpenAIError: as ``chat.completions.create``.
        """
        chat = self.api != "responses"
        api = self._client.chat.completions if chat else self._client.responses
        usage = {"stream_options": {"include_usage": True}} if chat else {}  # the Responses API always reports it
        return await api.with_streaming_response.create(
            **self._request(messages), stream=True, extra_headers=stage_headers(stage), **usage, **kwargs
        ).__aenter__()

    def _request(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """The arguments of a chat completion call for ``messages`` (plain ``role``/``content``
        text dicts, as every stage writes them), the messages handed over as ``extra_body``.

        The SDK's typed transform of ``messages`` walks every field of every message against the
        ``TypedDict`` of each message kind, about 3 ms of event-loop CPU for a planning prompt
        (16 messages, 17 kB), and changes nothing in plain text messages. ``extra_body`` is the
        SDK's documented way to send JSON fields as they are; the body on the wire is the same.
        The Responses API takes the same messages as ``input`` (its "easy input messages").
        """
        if self.api == "responses":
            return {"model": self.model, "temperature": self.temperature, "extra_body": {"input": messages}}
        return {"model": self.model, "messages": [], "temperature": self.temperature,
                "extra_body": {"messages": messages}}

    async def _deltas(self, response: Any, usage: Usage) -> AsyncIterator[str]:
        """The content deltas of a streamed chat completion (:func:`content_deltas`),
        the response closed at the end.

        Raises:
            ControllerError: the reply is too large, not a chat completion, reports an error, or
                breaks off.
        """
        deltas = response_deltas if self.api == "responses" else content_deltas
        try:
            async for delta in deltas(response, on_usage=usage.add_reported):
                yield delta
        except NotChatStream as e:
            raise self._not_chat(str(e)) from None
        except UnicodeDecodeError:
            raise self._not_chat("bytes that are not text") from None
        except StreamError as e:
            log.warning("controller reported an error while streaming: %s", mask_credentials(str(e)))
            raise ControllerError(f"The controller LLM at {self._host} reported an error while answering.",
                                  mask_credentials(str(e))) from None
        except (openai.OpenAIError, httpx2.HTTPError, anyio.EndOfStream, OSError) as e:
            raise self._error(e) from None
        finally:
            await response.close()

    def _not_chat(self, what: str) -> ControllerError:
        kind = "a Responses API response" if self.api == "responses" else "a chat completion"
        log.warning("controller answered with %s, not %s", what, kind)
        return ControllerError(
            f"The controller LLM at {self._host} answered with something that is not {kind} "
            "(is [llm] base_url the server's /v1 address?).",
            f"reply was {what}",
        )

    def _output_text(self, resp: Any, usage: Usage) -> str:
        """The text of a Responses API ``response`` object (its tokens added to ``usage``).

        Raises:
            ControllerError: not a response object, or one whose ``status`` is ``failed``.
        """
        if not isinstance(resp, Response) or not isinstance(getattr(resp, "output", None), list):
            raise self._not_chat(type(resp).__name__)
        if resp.usage is not None:
            usage.add_reported(chat_usage(resp.usage.model_dump()))
        if resp.status == "failed" or resp.error is not None:
            message = resp.error.message if resp.error is not None else "failed"
            log.warning("controller reported an error: %s", mask_credentials(message))
            raise ControllerError(f"The controller LLM at {self._host} reported an error while answering.",
                                  mask_credentials(message))
        return resp.output_text or ""

    def _content(self, resp: Any) -> str:
        """The message text of a chat completion.

        Raises:
            ControllerError: the reply is not a chat completion (an HTML page, plain text, another
                JSON document): the server at ``base_url`` is not speaking the chat completions API.
        """
        if not isinstance(resp, ChatCompletion) or not isinstance(getattr(resp, "choices", None), list):
            raise self._not_chat(type(resp).__name__)
        try:
            content = resp.choices[0].message.content
        except (AttributeError, IndexError, TypeError):
            content = None
        return content or ""


DRAIN_SECONDS = 0.5
"""Seconds a finished stream's remaining bytes (after ``data: [DONE]``) are read for, so that its
connection goes back to the pool instead of being closed unread (a new TCP connection per call
otherwise); a server still sending after that loses the connection as before."""


async def _drain(events: AsyncIterator[Any]) -> None:
    """Read what is left of a finished event stream (within :data:`DRAIN_SECONDS`; the transport's
    byte limit still applies), ignoring it. The answer is already whole, so a failure here only
    costs the connection (closed with the response), and is logged at debug level."""
    try:
        with anyio.move_on_after(DRAIN_SECONDS):
            async for _ in events:
                pass
    except (openai.OpenAIError, httpx2.HTTPError, anyio.EndOfStream, OSError, UnicodeDecodeError) as e:
        log.debug("the rest of a finished stream was not read (%s); its connection is closed", type(e).__name__)


class NotChatStream(Exception):
    """The body is not a chat completion stream; ``args[0]`` says what it was (for the log)."""


class StreamError(Exception):
    """The server reported an error inside the stream; ``args[0]`` is its message."""


async def _whole_content(response: Any, ctype: str, on_usage: Callable[[dict[str, Any]], None] | None) -> str | None:
    """The message of a whole ``chat.completion`` body sent instead of a stream (its usage
    reported to ``on_usage``).

    Raises:
        NotChatStream: the body is not a chat completion.
    """
    body = await response.read()
    try:
        whole = ChatCompletion.model_validate_json(body)
    except ValueError:
        raise NotChatStream(ctype.split(";")[0] or "an empty body") from None
    if on_usage is not None and whole.usage is not None:
        on_usage(whole.usage.model_dump())
    return whole.choices[0].message.content if whole.choices else None


async def content_deltas(
    response: Any, *, on_usage: Callable[[dict[str, Any]], None] | None = None
) -> AsyncIterator[str]:
    """Yield the ``choices[0].delta.content`` pieces (non-empty ``str``, in order) of a streamed reply.

    Args:
        response: the SDK's ``AsyncAPIResponse`` from ``with_streaming_response`` (its
            ``headers``, ``read()`` and ``http_response`` are used).
        on_usage: called with the ``usage`` object (``prompt_tokens``, ``completion_tokens``) of a
            chunk that carries one (``stream_options.include_usage``).

    A server that ignored ``stream`` and sent a whole ``chat.completion`` gives its message as one
    delta.

    Raises:
        NotChatStream: the body is neither server-sent chat chunks nor a chat completion (an HTML
            page, another JSON document, bytes that are not UTF-8).
        StreamError: an ``{"error": ...}`` event.
        Exception: whatever reading the body raises (the transport's byte limit, a broken
            connection, a timeout), unchanged.
    """
    ctype = response.headers.get("content-type", "")
    if "text/event-stream" not in ctype.lower():
        content = await _whole_content(response, ctype, on_usage)
        if content:
            yield content
        return
    events = EventSource(response.http_response).aiter_sse()
    async for event in events:
        if event.data.startswith("[DONE]"):
            await _drain(events)
            return
        if not event.data:
            continue
        try:
            chunk = jiter.from_json(event.data.encode())
        except ValueError:
            raise NotChatStream("an event that is not JSON") from None
        if not isinstance(chunk, dict):
            raise NotChatStream(f"an event holding {type(chunk).__name__}")
        if chunk.get("error"):
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else None
            raise StreamError(message if isinstance(message, str) and message else "an error while streaming")
        if on_usage is not None and isinstance(chunk.get("usage"), dict):
            on_usage(chunk["usage"])
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise NotChatStream("an event that is not a chat.completion.chunk")
        if choices and isinstance(choices[0], dict):
            delta = choices[0].get("delta")
            content = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(content, str) and content:
                yield content


def chat_usage(reported: Any) -> dict[str, Any]:
    """A Responses API ``usage`` (``input_tokens``, ``output_tokens``) in the chat completions'
    names (``prompt_tokens``, ``completion_tokens``); ``{}`` when it is not a mapping."""
    if not isinstance(reported, dict):
        return {}
    return {"prompt_tokens": reported.get("input_tokens"), "completion_tokens": reported.get("output_tokens")}


def _whole_response_text(body: bytes, ctype: str, on_usage: Callable[[dict[str, Any]], None] | None) -> str:
    """The text of a whole Responses API ``response`` body sent instead of a stream.

    Raises:
        NotChatStream: the body is not a response object.
    """
    try:
        whole = Response.model_validate_json(body)
    except ValueError:
        raise NotChatStream(ctype.split(";")[0] or "an empty body") from None
    if on_usage is not None and whole.usage is not None:
        on_usage(chat_usage(whole.usage.model_dump()))
    return whole.output_text


async def response_deltas(
    response: Any, *, on_usage: Callable[[dict[str, Any]], None] | None = None
) -> AsyncIterator[str]:
    """Yield the ``delta`` of each ``response.output_text.delta`` event (non-empty ``str``, in
    order) of a streamed Responses API reply, until ``response.completed`` (or ``incomplete``).

    Args:
        response: the SDK's ``AsyncAPIResponse`` from ``responses.with_streaming_response``.
        on_usage: called with the final ``usage`` in the chat names (:func:`chat_usage`).

    Other events (``response.created``, ``response.output_item.added``, the ``.done`` events …)
    carry nothing more for a text answer and are passed over. A server that ignored ``stream``
    and sent a whole ``response`` gives its text as one delta.

    Raises:
        NotChatStream: the body is neither Responses API events nor a response object.
        StreamError: a ``response.failed`` or ``error`` event.
        Exception: whatever reading the body raises, unchanged (as :func:`content_deltas`).
    """
    ctype = response.headers.get("content-type", "")
    if "text/event-stream" not in ctype.lower():
        if text := _whole_response_text(await response.read(), ctype, on_usage):
            yield text
        return
    events = EventSource(response.http_response).aiter_sse()
    async for event in events:
        if not event.data or event.data.startswith("[DONE]"):
            continue
        try:
            data = jiter.from_json(event.data.encode())
        except ValueError:
            raise NotChatStream("an event that is not JSON") from None
        kind = data.get("type") if isinstance(data, dict) else None
        if not isinstance(kind, str):
            raise NotChatStream("an event that is not a Responses API event")
        if kind == "response.output_text.delta" and isinstance(data.get("delta"), str) and data["delta"]:
            yield data["delta"]
            continue
        whole = data.get("response") if isinstance(data.get("response"), dict) else {}
        if kind in ("response.completed", "response.incomplete"):
            if on_usage is not None:
                on_usage(chat_usage(whole.get("usage")))
            await _drain(events)
            return
        if kind in ("response.failed", "error"):
            error = whole.get("error") if kind == "response.failed" else data
            message = error.get("message") if isinstance(error, dict) else None
            raise StreamError(message if isinstance(message, str) and message else "an error while streaming")
