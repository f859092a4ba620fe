"""The text deltas of a streamed chat completion, read without building a model object per chunk.

The ``openai`` SDK turns every server-sent event of a stream into a ``ChatCompletionChunk``
(about 0.2 ms of CPU each); a plan streams one event per token or two, so that was most of the
orchestration CPU a task cost. Here the SDK still sends the request (base URL, key, retries,
status errors) through ``with_streaming_response``, ``httpx-sse`` (public API, no SDK internals)
splits the body into events, and each event's data is parsed with ``jiter`` for the two fields we
read.

Wire format: OpenAI API reference, "Create chat completion" with ``stream: true``: ``data:``
events holding ``chat.completion.chunk`` objects, then ``data: [DONE]``; an error while streaming
arrives as an event whose data is ``{"error": {...}}``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import jiter
from httpx_sse import EventSource
from openai.types.chat import ChatCompletion


class NotChatStream(Exception):
    """The body is not a chat completion stream; ``args[0]`` says what it was (for the log)."""


class StreamError(Exception):
    """The server reported an error inside the stream; ``args[0]`` is its message."""


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
        body = await response.read()
        try:
            whole = ChatCompletion.model_validate_json(body)
        except ValueError:
            raise NotChatStream(ctype.split(";")[0] or "an empty body") from None
        if on_usage is not None and whole.usage is not None:
            on_usage(whole.usage.model_dump())
        content = whole.choices[0].message.content if whole.choices else None
        if content:
            yield content
        return
    async for event in EventSource(response.http_response).aiter_sse():
        if event.data.startswith("[DONE]"):
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
