"""The HTTP API's models and files endpoints as the real openai SDK sees them (``models.list``,
``models.retrieve``, ``files.list`` with its cursor pagination, ``files.retrieve``,
``files.content``), served by uvicorn on 127.0.0.1 over the sandbox backends."""

from __future__ import annotations

import io
import re
import time

import aiohttp
import openai
import pytest
from openai.types import FileObject, Model
from PIL import Image

from benchmarks.harness.http_server import KEY, MEDIA, OTHER_KEY, Served, image_message

FILE_ID = re.compile(r"/v1/files/(file-[0-9a-f]+-[a-z]+-\d+)")


@pytest.fixture
async def served(sandbox, tmp_path):
    s = await Served(sandbox, tmp_path / "data", {"api_keys": [KEY, OTHER_KEY]}).start()
    yield s
    await s.close()


async def detect(served: Served, photo: str, conversation: str) -> str:
    """Ask for object detection on ``photo``; returns the answer's text (with its file link)."""
    client = served.client(**{"X-HuggingGPT-Conversation": conversation})
    reply = await client.chat.completions.create(
        model="hugginggpt", messages=[image_message("Detect the objects in this photo", photo)])
    return reply.choices[0].message.content


async def test_models_lists_only_what_a_client_can_choose(served):
    client = served.client()
    listed = [m async for m in client.models.list()]
    assert [m.id for m in listed] == ["hugginggpt"]
    assert isinstance(listed[0], Model) and listed[0].object == "model" and listed[0].created > 0
    assert (await client.models.retrieve("hugginggpt")) == listed[0]
    controller = served.settings.llm.model
    for choose in (client.models.retrieve(controller),
                   client.chat.completions.create(model=controller, messages=[{"role": "user", "content": "hi"}])):
        with pytest.raises(openai.NotFoundError) as e:
            await choose
        assert e.value.code == "model_not_found" and e.value.param == "model"
        assert e.value.body["type"] == "invalid_request_error"
        assert controller in e.value.message and "'hugginggpt'" in e.value.message


async def test_files_list_retrieve_and_content(served):
    before = int(time.time())
    first = await detect(served, "chelsea.png", "one")
    second = await detect(served, "rocket.jpg", "two")
    client = served.client()
    files = [f async for f in client.files.list()]
    assert all(isinstance(f, FileObject) for f in files)
    # each answer's generated picture, and the photo each message sent: newest first
    generated = [FILE_ID.search(text)[1] for text in (second, first)]
    assert [f.id for f in files if f.purpose == "assistants_output"] == generated
    assert len([f for f in files if f.purpose == "user_data"]) == 2
    assert [f.created_at for f in files] == sorted((f.created_at for f in files), reverse=True)
    assert all(f.object == "file" and f.status == "processed" and before <= f.created_at <= time.time() for f in files)

    annotated = await client.files.retrieve(generated[1])
    assert annotated == next(f for f in files if f.id == generated[1])
    content = await client.files.content(annotated.id)
    data = content.read()
    assert content.response.headers["content-type"] == "image/png"
    assert annotated.bytes == len(data) and annotated.filename.endswith(".png")
    assert annotated.filename in content.response.headers["content-disposition"]
    assert Image.open(io.BytesIO(data)).size == (451, 300)  # chelsea, with its boxes drawn
    upload = next(f for f in files if f.purpose == "user_data" and f.created_at <= annotated.created_at
                  and f.id.startswith(annotated.id.rsplit("-", 2)[0]))
    assert upload.filename == "image-1.png"  # a data URL has no name: the resource id and its type
    assert (await client.files.content(upload.id)).read() == (MEDIA / "chelsea.png").read_bytes()


async def test_files_list_pages_with_the_sdks_cursor(served):
    for n in range(3):
        await detect(served, "chelsea.png", f"conversation-{n}")
    client = served.client()
    every = [f.id async for f in client.files.list()]
    assert len(every) == 6
    page = await client.files.list(limit=4)
    assert [f.id for f in page.data] == every[:4] and page.has_more
    following = await page.get_next_page()
    assert [f.id for f in following.data] == every[4:] and not following.has_more
    assert [f.id async for f in client.files.list(limit=1)] == every  # the SDK follows `after` to the end
    assert [f.id async for f in client.files.list(limit=2, order="asc")] == every[::-1]
    generated = [f.id async for f in client.files.list(purpose="assistants_output", limit=2)]
    assert generated == [i for i in every if i.endswith("image-2")]


async def test_files_are_per_key_and_errors_are_openai_errors(served):
    text = await detect(served, "chelsea.png", "mine")
    fid = FILE_ID.search(text)[1]
    other = served.client(OTHER_KEY)
    assert [f async for f in other.files.list()] == []
    for call in (other.files.retrieve(fid), other.files.content(fid),
                 served.client().files.retrieve("file-0123456789-image-99"),
                 served.client().files.retrieve("not-a-file-id")):
        with pytest.raises(openai.NotFoundError) as e:
            await call
        assert e.value.code == "file_not_found"
    for bad in ({"limit": 0}, {"purpose": "fine-tune"}, {"after": "nonsense"}):
        with pytest.raises(openai.BadRequestError) as e:
            await served.client().files.list(**bad)
        assert e.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.AuthenticationError):
        await served.client("sk-wrong").files.list()
    # the answer's own link (signed) still answers the bytes, for a browser without the key
    link = re.search(r"\((http://[^)]+[?&]sig=[0-9a-f]+)\)", text)[1]
    async with aiohttp.ClientSession() as http:
        async with http.get(link) as resp:
            assert resp.status == 200 and resp.content_type == "image/png"
            assert await resp.read() == (await served.client().files.content(fid)).read()
