"""File links of the HTTP API: they expire (410), a wrong signature is the same 404 whether the
conversation exists or not, and they point at ``public_url`` or the bound address, never at the
``Host`` header a client sent."""

from __future__ import annotations

import re
import time

import aiohttp
import pytest

from adapters.http.auth import Keys, key_id
from benchmarks.harness.http_server import KEY, Served, image_message

LINK = re.compile(r"\]\((?P<url>(?P<base>https?://[^/]+)/v1/files/(?P<id>file-(?P<conv>[0-9a-f]+)-[a-z]+-\d+)"
                  r"\?exp=(?P<exp>\d+)&sig=(?P<sig>[0-9a-f]{32}))\)")


async def answer_link(served: Served, **headers: str) -> re.Match:
    completion = await served.client(**headers).chat.completions.create(
        model="hugginggpt", messages=[image_message("Detect the objects in this photo", "coffee.png")])
    [link] = LINK.finditer(completion.choices[0].message.content)
    return link


@pytest.fixture
async def served(sandbox, tmp_path):
    s = await Served(sandbox, tmp_path / "data", {"api_keys": [KEY], "link_ttl": 3600}).start()
    yield s
    await s.close()


async def test_link_expires_inside_its_signature(served):
    link = await answer_link(served)
    assert abs(int(link["exp"]) - (time.time() + 3600)) < 60  # [server] link_ttl
    keys = Keys(served.settings.server)
    past = int(time.time()) - 10
    expired = f"{link['base']}/v1/files/{link['id']}?exp={past}&sig={keys.sign(key_id(KEY), link['id'], past)}"
    extended = f"{link['base']}/v1/files/{link['id']}?exp={int(link['exp']) + 86400}&sig={link['sig']}"
    async with aiohttp.ClientSession() as http:
        async with http.get(link["url"]) as r:
            assert r.status == 200 and r.content_type == "image/png"
        async with http.get(expired) as r:
            body = await r.json()
            assert r.status == 410 and body["error"]["code"] == "link_expired"
            assert "expired on" in body["error"]["message"]
        async with http.get(extended) as r:  # a later expiry with the old signature: not ours
            assert r.status == 404
        async with http.get(expired, headers={"Authorization": f"Bearer {KEY}"}) as r:
            assert r.status == 410  # the link says what it is; the key's own path is without a link
        async with http.get(f"{link['base']}/v1/files/{link['id']}", headers={"Authorization": f"Bearer {KEY}"}) as r:
            assert r.status == 200


async def test_wrong_signature_is_the_same_404_whether_the_conversation_exists(served):
    link = await answer_link(served)
    stranger = link["id"].replace(link["conv"], "0" * len(link["conv"]))
    forged = "0" * 32
    async with aiohttp.ClientSession() as http:
        answers = []
        for fid in (link["id"], stranger):
            async with http.get(f"{link['base']}/v1/files/{fid}?exp={link['exp']}&sig={forged}") as r:
                body = await r.json()
                answers.append((r.status, body["error"]["code"], body["error"]["message"].replace(fid, "ID")))
            async with http.get(f"{link['base']}/v1/files/{fid}?exp=abc&sig={link['sig']}") as r:
                assert r.status == 404
        assert answers[0] == answers[1] == (404, "file_not_found", "No such file: ID.")


async def test_links_use_the_bound_address_never_the_host_header(served):
    port = served.url.rsplit(":", 1)[1]
    link = await answer_link(served)  # the SDK sends Host: 127.0.0.1:PORT
    assert link["base"] == served.url
    via_name = await answer_link(served, Host=f"localhost:{port}")  # an allowed name, still not echoed
    assert via_name["base"] == served.url


async def test_links_use_public_url_when_set(sandbox, tmp_path):
    s = await Served(sandbox, tmp_path / "data", {"api_keys": [KEY], "public_url": "https://gpt.example.org/"}).start()
    try:
        link = await answer_link(s)
        assert link["base"] == "https://gpt.example.org"
    finally:
        await s.close()
