"""Who may follow a file link of the HTTP API (the links are made by
:func:`adapters.http.common.file_url`).

A link is ``<base>/v1/files/<file id>?exp=<Unix seconds>&sig=<32 hex>`` (with API keys; see
:meth:`adapters.http.auth.Keys.sign`): it lasts ``[server] link_ttl`` seconds (default 7 days),
its expiry is inside the signature, and after it the answer is 410. ``<base>`` is ``[server]
public_url``, else the address the server is bound to (the connection's local socket address),
never the request's ``Host`` header (which a client chooses). Without keys, links carry no
signature: the file goes to loopback callers, like every other route.

Following a link, every wrong signature, every unknown file and every file of another key is the
same 404 (the answer does not tell whether a conversation exists); a right signature whose time
has passed is 410; a request without ``sig`` needs the owning key (401 without a key).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

from fastapi import Request

from .common import PLATFORM, caller_of, parse_file_id, state_of
from .errors import ApiError


async def authorize_file(request: Request, fid: str, sig: str | None, exp: str | None) -> tuple[str, str]:
    """Check that ``request`` may read the file ``fid`` (see the module docstring).

    Args:
        request: the request (its ``Authorization`` header when there is no ``sig``).
        fid: the API file id (``file-<conversation>-<resource>``).
        sig: the link's signature query parameter, or ``None``.
        exp: the link's expiry query parameter (Unix seconds, as text), or ``None``.

    Returns:
        ``(conversation id, resource id)``.

    Raises:
        ApiError: 404 ``file_not_found`` (unknown, another key's, or a wrong signature, alike),
            410 ``link_expired``, 401 without a key and without a link signature.
        StorageError: the conversation store fails.
    """
    st = state_of(request)
    missing = ApiError(404, f"No such file: {fid}.", "file_not_found", "file_id")
    ids = parse_file_id(fid)
    if ids is None:
        raise missing
    if sig is None and exp is None:
        caller = await caller_of(request)  # unauthenticated callers learn nothing, not even that it is missing
        key = await st.service.find_conversation(ids[0])
        if key is None or key.platform != PLATFORM or caller.key_id != key.workspace:
            raise missing
        return ids
    expires = int(exp) if exp and exp.isdigit() and len(exp) <= 12 else None
    key = await st.service.find_conversation(ids[0])
    if key is None or key.platform != PLATFORM or expires is None or not st.keys.signature_ok(key.workspace, fid, expires, sig):
        raise missing
    if expires < time.time():
        when = datetime.fromtimestamp(expires, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        raise ApiError(410, f"This file link expired on {when}; the API key that owns the file can still download it "
                            "with its Authorization header.", "link_expired", "exp")
    return ids
