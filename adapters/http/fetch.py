"""Remote image/audio URLs of a request: fetched only from hosts the operator allows, never from a
private address, and never more bytes than a file may have.

Rules, checked in order (each refusal is a 400 naming the rule, and nothing is fetched):

1. the scheme is ``http`` or ``https``;
2. the host is in ``[server] allowed_url_hosts`` (``*.example.org`` allows its subdomains; empty
   list: no remote URL at all);
3. every address the host resolves to is a public one (not private, loopback, link-local,
   multicast, reserved or unspecified: ``ipaddress``' ``is_global``); the connection then goes to
   those checked addresses (a resolver that re-checks, so a second DNS answer cannot swap in a
   private one);
4. redirects are not followed (a redirect could lead anywhere);
5. the body is read up to ``[storage] max_file_bytes`` and the download stops there.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from .errors import ApiError


def host_allowed(host: str, allowed: list[str]) -> bool:
    """Whether ``host`` matches an entry of ``allowed`` (exact, or ``*.domain`` for subdomains)."""
    host = host.lower().rstrip(".")
    for entry in allowed:
        if entry.startswith("*.") and (host.endswith(entry[1:]) or host == entry[2:]):
            return True
        if host == entry:
            return True
    return False


def _public(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


class PublicOnlyResolver(AbstractResolver):
    """aiohttp resolver that refuses a host with any non-public address (rule 3)."""

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM, family=family)
        out: list[ResolveResult] = []
        for fam, _, proto, _, sockaddr in infos:
            address = str(sockaddr[0])
            if not _public(address):
                raise ApiError(400, f"The URL's host {host} resolves to a private or local address ({address}); "
                                    "only public addresses may be fetched.", "url_not_allowed")
            out.append({"hostname": host, "host": address, "port": int(sockaddr[1]), "family": fam,
                        "proto": proto, "flags": socket.AI_NUMERICHOST})
        if not out:
            raise ApiError(400, f"The URL's host {host} does not resolve.", "url_not_allowed")
        return out

    async def close(self) -> None:
        return None


async def fetch_url(url: str, *, allowed_hosts: list[str], max_bytes: int, timeout: float, param: str) -> tuple[bytes, str | None]:
    """Download a user's image/audio URL under the rules of the module docstring.

    Args:
        url: the ``image_url.url`` of the request.
        allowed_hosts: ``[server] allowed_url_hosts``.
        max_bytes: largest body read, bytes.
        timeout: seconds for the whole download.
        param: the request field, for the error (``messages[2].content[1].image_url.url``).

    Returns:
        ``(body, Content-Type or None)``.

    Raises:
        ApiError: 400 naming the rule that refused the URL, or why the download failed.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ApiError(400, "Only data: URLs and http(s) URLs are accepted for files.", "invalid_url", param)
    host = parts.hostname
    if not allowed_hosts:
        raise ApiError(400, "This server accepts files only as data: URLs or input_audio (no remote URL is allowed: "
                            "[server] allowed_url_hosts is empty).", "url_not_allowed", param)
    if not host_allowed(host, allowed_hosts):
        raise ApiError(400, f"The host {host} is not on this server's list of hosts files may be fetched from "
                            "([server] allowed_url_hosts).", "url_not_allowed", param)
    literal = _literal_address(host)
    if literal is not None and not _public(literal):
        raise ApiError(400, f"The URL points at a private or local address ({host}); only public addresses may be "
                            "fetched.", "url_not_allowed", param)
    connector = aiohttp.TCPConnector(resolver=PublicOnlyResolver(), use_dns_cache=False)
    try:
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.get(url, allow_redirects=False) as resp:
                if 300 <= resp.status < 400:
                    raise ApiError(400, f"The URL redirects elsewhere (HTTP {resp.status}); redirects are not followed.",
                                   "url_not_allowed", param)
                if resp.status != 200:
                    raise ApiError(400, f"The URL answered HTTP {resp.status}.", "url_fetch_failed", param)
                if resp.content_length is not None and resp.content_length > max_bytes:
                    raise ApiError(400, f"The file at the URL is larger than {max_bytes} bytes.", "file_too_large", param)
                data = bytearray()
                async for chunk in resp.content.iter_chunked(64 * 1024):
                    data += chunk
                    if len(data) > max_bytes:
                        raise ApiError(400, f"The file at the URL is larger than {max_bytes} bytes.", "file_too_large",
                                       param)
                return bytes(data), resp.headers.get("Content-Type")
    except ApiError as e:
        e.param = e.param or param
        raise
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
        cause = e.__cause__ if isinstance(e.__cause__, ApiError) else None
        if cause is not None:
            cause.param = cause.param or param
            raise cause from None
        raise ApiError(400, f"The URL could not be downloaded ({e.__class__.__name__}).", "url_fetch_failed",
                       param) from None


def _literal_address(host: str) -> str | None:
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


__all__: list[Any] = ["fetch_url", "host_allowed", "PublicOnlyResolver"]
