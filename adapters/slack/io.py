"""Slack I/O of the front end: posting and throttled updating, file downloads, uploads.

Slack's rules applied here (PLATFORMS.md, docs.slack.dev):

* ``chat.update`` is a Tier 3 method (about 50 calls per minute); a status message is updated at
  most once per ``interval`` seconds and every update in the process passes one shared
  ``aiolimiter.AsyncLimiter``; intermediate texts are coalesced, the latest wins.
* ``chat.postMessage`` allows about one message per second per channel (short bursts are fine).
* ``url_private(_download)`` needs ``Authorization: Bearer xoxb-...`` and the ``files:read``
  scope; without them Slack answers 200 with an HTML sign-in page, which we refuse.
* Files go out with ``files_upload_v2`` (``files.getUploadURLExternal``, upload, then
  ``files.completeUploadExternal``), which needs ``files:write``.
* ``{"ok": false, "error": "missing_scope", "needed": "files:write"}`` becomes a
  :class:`SlackScopeError` whose sentence names the scope.
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
from typing import Any, Iterable
from urllib.parse import urlsplit

import aiohttp
from aiolimiter import AsyncLimiter
from cachetools import TTLCache
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.incoming import IncomingFile
from bot.errors import InputError
from pipeline.errors import HuggingGPTError
from pipeline.types import Resource

from .logic import NO_PREVIEWS, missing_scope_sentence

log = logging.getLogger(__name__)

MiB = 1024 * 1024

Origin = tuple[str, str, int]
"""``(scheme, host, port)`` of a URL, the unit the bot token is scoped to (RFC 6454)."""

#: Origins that may receive the bot token when downloading a user's file (``url_private`` is served
#: by https://files.slack.com, https://files.slack-gov.com for GovSlack); the origin of a non-Slack
#: API base URL (``--api-url``, tests) is added by the caller. Scheme, host and port must all match.
DEFAULT_FILE_ORIGINS: frozenset[Origin] = frozenset({("https", "files.slack.com", 443), ("https", "files.slack-gov.com", 443)})


def origin_of(url: str) -> Origin | None:
    """``(scheme, host, port)`` of ``url`` with the scheme's default port filled in; ``None`` when
    it has no host, or a scheme other than http/https, or carries credentials."""
    parts = urlsplit(url)
    scheme = (parts.scheme or "").lower()
    if scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        return None
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        return None
    return scheme, parts.hostname.lower(), port


class SlackScopeError(HuggingGPTError):
    """The Slack app lacks an OAuth scope. ``needed`` is the scope Slack named (``files:write``)."""

    def __init__(self, needed: str | None, action: str, detail: str | None = None) -> None:
        super().__init__(missing_scope_sentence(needed, action), detail)
        self.needed = needed


class SlackCallError(HuggingGPTError):
    """A Web API call failed for another reason (``error`` holds Slack's code)."""

    def __init__(self, error: str, action: str) -> None:
        super().__init__(f"Slack refused to {action} ({error}); please try again later.", f"Slack error {error} while trying to {action}")
        self.error = error


def map_slack_error(exc: SlackApiError, action: str) -> HuggingGPTError:
    """Turn a ``SlackApiError`` into a :class:`HuggingGPTError` with the user's sentence.

    Args:
        exc: the error slack_sdk raised (``exc.response`` holds Slack's JSON).
        action: what we tried, as a verb phrase ("upload the generated files").
    """
    data = exc.response.data if isinstance(exc.response.data, dict) else {}
    code = str(data.get("error") or "unknown_error")
    if code == "missing_scope":
        needed = data.get("needed")
        return SlackScopeError(needed, action, f"missing_scope needed={needed} provided={data.get('provided')} while trying to {action}")
    return SlackCallError(code, action)


class Poster:
    """Posts thread messages within Slack's per-channel pace (about one per second, bursts of 5).

    Args:
        client: the bot's ``AsyncWebClient``.
        per_channel_rate: messages per second per channel on average.
    """

    def __init__(self, client: AsyncWebClient, per_channel_rate: float = 1.0) -> None:
        self.client = client
        self._rate = per_channel_rate
        self._limiters: TTLCache[str, AsyncLimiter] = TTLCache(maxsize=5000, ttl=120)

    def _limiter(self, channel: str) -> AsyncLimiter:
        lim = self._limiters.get(channel)
        if lim is None:
            lim = AsyncLimiter(5, 5 / self._rate)
        self._limiters[channel] = lim  # (re)set: an active channel keeps its bucket
        return lim

    async def post(self, channel: str, thread_ts: str | None, text: str) -> str:
        """Post ``text`` (mrkdwn, < 4000 characters) in the thread; return the new message's ``ts``.

        Raises:
            SlackScopeError: ``chat:write`` is missing. SlackCallError: another refusal.
        """
        async with self._limiter(channel):
            try:
                resp = await self.client.chat_postMessage(channel=channel, thread_ts=thread_ts, text=text, **NO_PREVIEWS)
            except SlackApiError as e:
                raise map_slack_error(e, "post a message") from None
        return str(resp["ts"])

    async def update(self, channel: str, ts: str, text: str) -> None:
        """Replace the text of message ``ts`` (``chat.update``). Raises like :meth:`post`."""
        try:
            await self.client.chat_update(channel=channel, ts=ts, text=text, **NO_PREVIEWS)
        except SlackApiError as e:
            raise map_slack_error(e, "update my status message") from None


def _file_label(f: dict[str, Any]) -> str:
    return str(f.get("name") or f.get("title") or f.get("id") or "the file")


async def download_file(
    session: aiohttp.ClientSession,
    file: dict[str, Any],
    *,
    token: str,
    max_bytes: int,
    allowed_origins: Iterable[Origin] = DEFAULT_FILE_ORIGINS,
    timeout: float = 60.0,
) -> IncomingFile:
    """Download a file a user attached to a message, with the bot token.

    Args:
        session: an aiohttp session (no default auth headers).
        file: the file object of the message event (``url_private_download``, ``name``,
            ``mimetype``, ``size``).
        token: the bot token (``xoxb-...``); sent only to ``allowed_origins``.
        max_bytes: largest accepted file in bytes (``[storage] max_file_bytes``).
        allowed_origins: ``(scheme, host, port)`` the token may be sent to (:func:`origin_of`);
            redirects are not followed.
        timeout: seconds for the whole download.

    Returns:
        The bytes with the user's file name and Slack's declared MIME type.

    Raises:
        InputError: the file is too large, not hosted by Slack, unreachable, or Slack answered with
            its HTML sign-in page (missing token or ``files:read`` scope).
    """
    name = _file_label(file)
    size = file.get("size")
    if isinstance(size, int) and size > max_bytes:
        raise InputError(
            f"The file {name} is too large ({size / MiB:.1f} MB); the limit is {max_bytes / MiB:.0f} MB.",
            f"file {file.get('id')} size {size} > {max_bytes}",
        )
    url = file.get("url_private_download") or file.get("url_private")
    if not url or file.get("mode") in ("external", "email") or file.get("is_external"):
        raise InputError(f"The file {name} is not stored in Slack, so I cannot use it; please upload the file itself.",
                         f"file {file.get('id')} mode={file.get('mode')} has no url_private")
    origin = origin_of(url)
    if origin is None or origin not in set(allowed_origins):
        raise InputError(f"The file {name} is not hosted by Slack, so I did not download it.",
                         f"refusing to send the bot token to {origin or 'an unusable URL'}")
    try:
        async with session.get(url, headers={"Authorization": f"Bearer {token}"}, allow_redirects=False,
                               timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            _check_response(resp, file, name)
            data = await _read_bounded(resp, file, name, max_bytes)
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        raise InputError(f"I could not download {name} from Slack; please try again.", f"download {file.get('id')}: {e!r}") from None
    if not data:
        raise InputError(f"The file {name} is empty.", f"file {file.get('id')} has 0 bytes")
    return IncomingFile(bytes(data), name=file.get("name"), declared_mime=file.get("mimetype"))


def _check_response(resp: aiohttp.ClientResponse, file: dict[str, Any], name: str) -> None:
    """Refuse an answer that is not the file: another status, or Slack's HTML sign-in page."""
    ctype = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if resp.status != 200:
        raise InputError(f"I could not download {name} from Slack (HTTP {resp.status}); please attach it again.",
                         f"download {file.get('id')} status {resp.status}")
    if ctype == "text/html" and not str(file.get("mimetype", "")).startswith("text/html"):
        raise InputError(
            f"I could not download {name}: Slack sent its sign-in page instead of the file, "
            "so this app probably lacks the `files:read` scope; ask a workspace admin to add it and reinstall the app.",
            f"download {file.get('id')} returned text/html (login page): missing token or files:read scope",
        )


async def _read_bounded(resp: aiohttp.ClientResponse, file: dict[str, Any], name: str, max_bytes: int) -> bytearray:
    """The body, refused as soon as it grows past ``max_bytes``."""
    data = bytearray()
    async for chunk in resp.content.iter_chunked(256 * 1024):
        data += chunk
        if len(data) > max_bytes:
            raise InputError(
                f"The file {name} is too large; the limit is {max_bytes / MiB:.0f} MB.",
                f"file {file.get('id')} exceeded {max_bytes} bytes while downloading",
            )
    return data


def upload_name(resource: Resource) -> str:
    """File name for a generated resource: the stored name, or ``<id><ext>`` from its MIME type."""
    if resource.name:
        return resource.name
    ext = mimetypes.guess_extension(resource.mime) or resource.path.suffix or ""
    return f"{resource.id}{ext}"


async def upload_files(client: AsyncWebClient, channel: str, thread_ts: str, resources: list[Resource]) -> list[str]:
    """Upload generated media into the thread with ``files_upload_v2``.

    Args:
        client: the bot's ``AsyncWebClient``.
        channel: channel id; thread_ts: the thread's parent ``ts``.
        resources: files from ``RunRecord.files`` (read from ``Resource.path``).

    Returns:
        Slack file ids, in order.

    Raises:
        SlackScopeError: ``files:write`` is missing. SlackCallError / InputError: other failures.
    """
    if not resources:
        return []
    uploads = []
    for r in resources:
        data = await asyncio.to_thread(r.path.read_bytes)
        title = r.description or upload_name(r)
        if len(title) > 250:  # keep file titles short in the thread
            title = title[:249] + "…"
        uploads.append({"content": data, "filename": upload_name(r), "title": title})
    try:
        resp = await client.files_upload_v2(channel=channel, thread_ts=thread_ts, file_uploads=uploads)
    except SlackApiError as e:
        raise map_slack_error(e, "upload the generated files") from None
    except Exception as e:  # slack_sdk raises SlackRequestError when the upload URL refuses the bytes
        raise SlackCallError(type(e).__name__, "upload the generated files") from e
    return [f["id"] for f in resp.get("files") or []]
