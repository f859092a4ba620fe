"""Request bodies of the HTTP API as typed models (what ``/openapi.json`` describes).

The chat request follows the OpenAI Chat Completions reference (``POST /v1/chat/completions``),
the responses request the Responses API reference (``POST /v1/responses``):
fields this server does not use (``temperature``, ``max_tokens``, ``tools`` ...) are accepted and
ignored, as OpenAI-compatible servers do, so any client's defaults pass.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ImageURL(BaseModel):
    """``{"url": "data:image/png;base64,..." | "https://...", "detail": ...}``."""

    url: str
    detail: str | None = None


class InputAudio(BaseModel):
    """``{"data": base64, "format": "wav" | "mp3" | ...}``."""

    data: str
    format: str


class ContentPart(BaseModel):
    """One part of a message's content: ``text``, ``image_url`` or ``input_audio``."""

    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None
    image_url: ImageURL | None = None
    input_audio: InputAudio | None = None


class Message(BaseModel):
    """One chat message (``system`` / ``developer`` / ``user`` / ``assistant`` / ``tool``)."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None


class StreamOptions(BaseModel):
    """``{"include_usage": bool}``: a last chunk with ``usage`` and no choices."""

    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions``: the last ``user`` message is the request, the earlier
    messages the chat log."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[Message] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None


class InputPart(BaseModel):
    """One part of a Responses API message's content: ``input_text`` / ``output_text`` (``text``)
    or ``input_image`` (``image_url``: a ``data:`` URL or an https URL; ``file_id`` is refused)."""

    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None
    image_url: str | None = None
    file_id: str | None = None
    detail: str | None = None


class InputItem(BaseModel):
    """One item of a Responses API ``input`` list: a message (``type`` ``"message"`` or absent)."""

    model_config = ConfigDict(extra="allow")

    type: str = "message"
    role: Literal["system", "developer", "user", "assistant"] | None = None
    content: str | list[InputPart] | None = None


class ResponsesRequest(BaseModel):
    """``POST /v1/responses`` (OpenAI Responses API): ``input`` is the request (a string) or the
    conversation (message items, the last ``user`` one the request); ``instructions`` is ignored
    like a system message; tools, reasoning and sampling fields are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str
    input: str | list[InputItem]
    instructions: str | None = None
    stream: bool = False
    user: str | None = None


class ReferenceMessage(BaseModel):
    """A message of the reference implementation's requests (``content`` text or OpenAI parts)."""

    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[ContentPart] | None = None


class ReferenceRequest(BaseModel):
    """``POST /hugginggpt`` | ``/tasks`` | ``/results`` (microsoft/JARVIS ``awesome_chat.py``):
    ``{"messages": [...]}``; its ``api_key``/``openaikey`` fields are ignored (this server uses its
    own controller settings)."""

    model_config = ConfigDict(extra="allow")

    messages: list[ReferenceMessage] = Field(min_length=1)


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` describing ``model`` as the JSON request body (bodies are read by hand,
    within the size limit, so FastAPI does not see them as parameters)."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}}
