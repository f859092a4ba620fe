"""Masking credentials in text shown to users or written to logs.

A URL may carry a user name and password (``https://user:secret@host/v1``, RFC 3986 §3.2.1
"userinfo"); :func:`mask_credentials` replaces that part wherever a URL appears in a text, so an
error sentence or log line that names an endpoint never shows it.
"""

from __future__ import annotations

import re

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@'\"<>]+@")


def mask_credentials(text: str) -> str:
    """``text`` with the userinfo of every URL in it replaced by ``***``.

    Example: ``"https://user:pw@host/v1 failed"`` → ``"https://***@host/v1 failed"``.
    """
    return _USERINFO.sub(r"\1***@", text)


def host_of(url: str | None, default: str = "api.openai.com") -> str:
    """The ``host[:port]`` of ``url`` for messages, never its userinfo (``default`` when unset)."""
    if not url:
        return default
    m = re.match(r"(?i)^[a-z][a-z0-9+.-]*://(?:[^/@]*@)?([^/?#]*)", url)
    return m.group(1) if m and m.group(1) else mask_credentials(url)
