"""From OpenAI chat messages to what the service takes: the request text, its files, the chat log.

* The last ``user`` message is the request; its ``text`` parts are joined, its ``image_url`` and
  ``input_audio`` parts become :class:`bot.incoming.IncomingFile` objects (checked afterwards by
  ``Service.check_files``, which sniffs the real type).
* ``image_url``: ``data:<mime>;base64,<data>`` URLs always; http(s) URLs under the rules of
  :mod:`adapters.http.fetch`.
* ``input_audio``: ``{"data": base64, "format": "wav" | "mp3" | "ogg" | "flac" | ...}``.
* Earlier ``user``/``assistant`` pairs become the chat log (:class:`pipeline.types.Turn`, newest
  first, within ``[storage] context_tokens``); ``system``/``developer`` messages are ignored (the
  controller's prompts are this server's own).
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field

from bot.incoming import IncomingFile
from bot.tokens import count_tokens, select_history
from pipeline.types import Turn

from .errors import ApiError
from .fetch import fetch_url
from .models import ContentPart, Message

_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[\w.+-]+=[^;,]*)*)(?P<b64>;base64)?,(?P<data>.*)$",
                       re.DOTALL | re.IGNORECASE)
_AUDIO_MIME = {"wav": "audio/wav", "mp3": "audio/mpeg", "ogg": "audio/ogg", "flac": "audio/flac", "m4a": "audio/mp4",
               "webm": "audio/webm", "opus": "audio/ogg", "aac": "audio/aac", "pcm16": "audio/L16"}


@dataclass
class Turnless:
    """What one chat request asks: ``text``, its ``files`` and the ``chat_log`` before it."""

    text: str
    files: list[IncomingFile] = field(default_factory=list)
    chat_log: list[Turn] = field(default_factory=list)


def text_of(content: str | list[ContentPart] | None) -> str:
    """The text of a message's content (text parts joined by blank lines; other parts ignored)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n\n".join(p.text or "" for p in content if p.type == "text" and p.text)


def decode_data_url(url: str, param: str) -> tuple[bytes, str | None]:
    """``(bytes, declared MIME type)`` of a ``data:`` URL.

    Raises:
        ApiError: 400 when it is not a base64 data URL.
    """
    m = _DATA_URL.match(url.strip())
    if m is None or not m.group("b64"):
        raise ApiError(400, "An image data URL must look like data:image/png;base64,<data>.", "invalid_data_url", param)
    try:
        data = base64.b64decode(m.group("data"), validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, "The data URL's content is not valid base64.", "invalid_data_url", param) from None
    if not data:
        raise ApiError(400, "The data URL is empty.", "invalid_data_url", param)
    return data, m.group("mime")


def chat_log_of(messages: list[Message], budget_tokens: int) -> list[Turn]:
    """Earlier ``user`` → ``assistant`` exchanges as :class:`Turn` objects, newest first, the newest
    that fit ``budget_tokens`` (costed as the stored chat log is, :func:`bot.tokens.select_history`)."""
    pairs: list[tuple[str, str]] = []
    pending: str | None = None
    for m in messages:
        if m.role == "user":
            if pending is not None:
                pairs.append((pending, ""))
            pending = text_of(m.content)
        elif m.role == "assistant" and pending is not None:
            pairs.append((pending, text_of(m.content)))
            pending = None
    if pending is not None:
        pairs.append((pending, ""))
    rows = [(i, q, a, "ok", count_tokens(q) + count_tokens(a)) for i, (q, a) in enumerate(pairs)]
    return select_history(reversed(rows), [], budget_tokens)


async def parse_messages(
    messages: list[Message], *, allowed_hosts: list[str], max_file_bytes: int, url_timeout: float, budget_tokens: int,
) -> Turnless:
    """The request, files and chat log of a chat completion request (see the module docstring).

    Args:
        messages: the request's ``messages``.
        allowed_hosts: ``[server] allowed_url_hosts``.
        max_file_bytes: ``[storage] max_file_bytes`` (bound of a remote download).
        url_timeout: seconds per remote download.
        budget_tokens: ``[storage] context_tokens``.

    Raises:
        ApiError: 400 when there is no user message, a part is malformed, of an unknown type, or
            its URL is refused.
    """
    last = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
    if last is None:
        raise ApiError(400, "The messages contain no user message: the last user message is the request.",
                       "invalid_request", "messages")
    message = messages[last]
    files: list[IncomingFile] = []
    texts: list[str] = []
    parts = [ContentPart(type="text", text=message.content)] if isinstance(message.content, str) else (message.content or [])
    for j, part in enumerate(parts):
        param = f"messages[{last}].content[{j}]"
        if part.type == "text":
            if part.text is None:
                raise ApiError(400, "A text part needs a 'text' field.", "invalid_content_part", param)
            texts.append(part.text)
        elif part.type == "image_url":
            files.append(await _image_part(part, param, allowed_hosts, max_file_bytes, url_timeout))
        elif part.type == "input_audio":
            files.append(_audio_part(part, param))
        else:
            raise ApiError(400, f"The content part type {part.type!r} is not supported; use text, image_url or "
                                "input_audio.", "invalid_content_part", param + ".type")
    return Turnless("\n\n".join(t for t in texts if t.strip()), files, chat_log_of(messages[:last], budget_tokens))


async def _image_part(part: ContentPart, param: str, allowed_hosts: list[str], max_file_bytes: int,
                      url_timeout: float) -> IncomingFile:
    """An ``image_url`` part: a ``data:`` URL, or a download from an allowed host."""
    if part.image_url is None or not part.image_url.url:
        raise ApiError(400, "An image_url part needs {'image_url': {'url': ...}}.", "invalid_content_part", param)
    url = part.image_url.url
    if url.lower().startswith("data:"):
        data, mime = decode_data_url(url, param + ".image_url.url")
    else:
        data, mime = await fetch_url(url, allowed_hosts=allowed_hosts, max_bytes=max_file_bytes,
                                     timeout=url_timeout, param=param + ".image_url.url")
    return IncomingFile(data, declared_mime=_plain(mime))


def _audio_part(part: ContentPart, param: str) -> IncomingFile:
    """An ``input_audio`` part: base64 data in one of the formats of :data:`_AUDIO_MIME`."""
    audio = part.input_audio
    if audio is None:
        raise ApiError(400, "An input_audio part needs {'input_audio': {'data': base64, 'format': ...}}.",
                       "invalid_content_part", param)
    fmt = audio.format.lower().strip()
    if fmt not in _AUDIO_MIME:
        raise ApiError(400, f"The audio format {audio.format!r} is not supported; use one of "
                            f"{', '.join(sorted(_AUDIO_MIME))}.", "invalid_content_part", param + ".input_audio.format")
    try:
        data = base64.b64decode(audio.data, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, "The input_audio data is not valid base64.", "invalid_content_part",
                       param + ".input_audio.data") from None
    if not data:
        raise ApiError(400, "The input_audio data is empty.", "invalid_content_part", param + ".input_audio.data")
    return IncomingFile(data, declared_mime=_AUDIO_MIME[fmt])


def _plain(mime: str | None) -> str | None:
    return mime.split(";", 1)[0].strip().lower() if mime else None

