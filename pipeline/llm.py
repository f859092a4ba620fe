"""The controller LLM: any OpenAI-compatible chat completions server, through the ``openai`` SDK.

The SDK retries 408/409/429/5xx and connection errors itself (``max_retries``), so no retry layer
is stacked on top here. Errors become :class:`~pipeline.errors.ControllerError` with one sentence
for the user; the API key never appears in a message or a log line.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import openai
from openai import AsyncOpenAI

from .errors import ControllerError

log = logging.getLogger(__name__)


STAGE_HEADER = "X-HuggingGPT-Stage"
"""HTTP header naming the stage of each controller call (ARCHITECTURE.md): ``task-planning``,
``model-selection``, ``controller-task`` or ``response-generation``. Gateways can log it; the
sandbox's stand-in controller routes on it. Prompts carry no such marker."""
TASK_HEADER = "X-HuggingGPT-Task"
"""HTTP header naming the task (pipeline tag) of a ``controller-task`` call."""
STAGES = ("task-planning", "model-selection", "controller-task", "response-generation")


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
    """LLM calls made during one run (every HTTP request counted, fallbacks included)."""

    calls: int = 0


class Controller:
    """Chat completions client for the four stages.

    Args:
        model: model name sent to the server.
        base_url: server base URL (e.g. ``http://127.0.0.1:8000/v1``); ``None`` for the SDK default.
        api_key: the key; any non-empty string for local servers.
        timeout: seconds per request.
        max_retries: SDK retries on 408/409/429/5xx/connection errors.
        structured_output: ``"auto"`` (JSON schema, falling back to JSON mode then plain text when
            the server rejects it with 400), ``"json_schema"``, ``"json_object"`` or ``"off"``.
        temperature: sampling temperature.
        client: an ``AsyncOpenAI`` to use instead of building one.
    """

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None,
        api_key: str,
        timeout: float = 60.0,
        max_retries: int = 2,
        structured_output: str = "auto",
        temperature: float = 0.0,
        client: AsyncOpenAI | None = None,
    ) -> None:
        self.model = model
        self.timeout = timeout
        self.temperature = temperature
        self.structured_output = structured_output
        self._host = urlsplit(base_url).netloc if base_url else "api.openai.com"
        self._client = client or AsyncOpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
        )
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
        detail = f"{e.__class__.__name__}: {e}"
        if isinstance(e, openai.APITimeoutError):
            msg = f"The controller LLM at {self._host} did not answer within {self.timeout:g} seconds."
        elif isinstance(e, openai.APIConnectionError):
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
            kwargs: dict[str, Any] = {}
            if mode == "json_schema":
                kwargs["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": schema_name, "schema": schema, "strict": False},
                }
            elif mode == "json_object":
                kwargs["response_format"] = {"type": "json_object"}
            usage.calls += 1
            try:
                resp = await self._client.chat.completions.create(
                    model=self.model, messages=messages, temperature=self.temperature,
                    extra_headers=stage_headers(stage), **kwargs
                )
            except openai.BadRequestError as e:
                last = e
                if len(self._modes) > 1 and mode != "off":
                    log.info("controller rejected response_format=%s (%s); falling back", mode, e.status_code)
                    self._modes.remove(mode)
                    continue
                raise self._error(e) from None
            except openai.OpenAIError as e:
                raise self._error(e) from None
            return _content(resp)
        raise self._error(last or RuntimeError("no mode left"))

    async def complete_text(
        self, messages: list[dict[str, Any]], *, stage: str, usage: Usage, task: str | None = None
    ) -> str:
        """Plain text completion for ``stage`` (and ``task`` for a controller-served task).

        Raises:
            ControllerError: as :meth:`complete_json`.
        """
        usage.calls += 1
        try:
            resp = await self._client.chat.completions.create(
                model=self.model, messages=messages, temperature=self.temperature,
                extra_headers=stage_headers(stage, task),
            )
        except openai.OpenAIError as e:
            raise self._error(e) from None
        return _content(resp)

    async def stream_text(self, messages: list[dict[str, Any]], *, stage: str, usage: Usage) -> AsyncIterator[str]:
        """Stream a text completion as deltas (``str`` pieces, in order).

        Raises:
            ControllerError: as :meth:`complete_json`, also mid-stream.
        """
        usage.calls += 1
        try:
            stream = await self._client.chat.completions.create(
                model=self.model, messages=messages, temperature=self.temperature, stream=True,
                extra_headers=stage_headers(stage),
            )
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta and chunk.choices[0].delta.content:
                    yield chunk.choices[0].delta.content
        except openai.OpenAIError as e:
            raise self._error(e) from None


def _content(resp: Any) -> str:
    try:
        content = resp.choices[0].message.content
    except (AttributeError, IndexError, TypeError):
        content = None
    return content or ""
