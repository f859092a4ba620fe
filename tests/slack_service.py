"""The service the Slack tests run against.

TEST-ONLY SERVICE DOUBLE (temporary): the real ``bot.service.Service`` with conversations and the
``bot.sandbox`` stand-ins were not on main yet when these tests were written. ``make_service``
yields an object with the Service contract (``check_files``, ``handle`` yielding real
``pipeline.types`` events ending with ``Done``) whose media work is real (Pillow).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
from pathlib import Path
from typing import AsyncIterator, Sequence

from PIL import Image, ImageDraw

from bot.service import ConversationKey, IncomingFile
from pipeline.errors import InputError
from pipeline.types import (
    Done, ModelSelected, Output, PlanReady, Resource, ResponseDelta, RunRecord, Selection, Task, TaskFinished,
    TaskResult, TaskStarted,
)


SERVICE_KIND = "test-only service double (bot.service.Service not on main yet)"


class ServiceDouble:
    def __init__(self, data_dir: Path, *, controller_down: bool = False, slow: float = 0.0) -> None:
        self.data_dir = data_dir
        self.controller_down = controller_down
        self.slow = slow
        self.conversations: dict[str, list[Resource]] = {}
        self.locks: dict[str, asyncio.Lock] = {}

    async def close(self) -> None:
        pass

    async def check_files(self, files: Sequence[IncomingFile]) -> None:
        for f in files:
            try:
                Image.open(io.BytesIO(f.data)).verify()
            except Exception:
                raise InputError(f"The file {f.name} is not an image, audio or video file I can use.") from None

    def _store(self, data: bytes, kind: str, mime: str, rid: str, origin: str) -> Resource:
        path = self.data_dir / (hashlib.sha256(data).hexdigest()[:16] + ".png")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return Resource(rid, kind, path, mime, len(data), origin=origin)

    def _make_image(self, src: Path | None, text: str, rid: str) -> Resource:
        if src is not None:
            img = Image.open(src).convert("L")
        else:
            img = Image.new("RGB", (256, 256), "white")
            ImageDraw.Draw(img).text((10, 10), text[:30], fill="black")
        buf = io.BytesIO()
        img.save(buf, "PNG")
        return self._store(buf.getvalue(), "image", "image/png", rid, "task:1")

    async def handle(self, text: str, files: Sequence[IncomingFile] = (), *, key: ConversationKey | None = None,
                     user: str | None = None) -> AsyncIterator:
        k = key.as_string() if key else "oneoff"
        lock = self.locks.setdefault(k, asyncio.Lock())
        async with lock:
            res = self.conversations.setdefault(k, [])
            for f in files:
                res.append(await asyncio.to_thread(self._store, f.data, "image", "image/png", f"image-{len(res) + 1}", "user"))
            rec = RunRecord(request=text)
            if self.slow:
                await asyncio.sleep(self.slow)
            if self.controller_down:
                rec.status, rec.error = "error", "The controller LLM is unreachable; please try again later."
                yield Done(rec)
                return
            low = text.lower()
            if "black and white" in low and res:
                task = Task(1, "image-to-image", (), {"image": res[-1].id, "text": "black and white"})
                model = "timbrooks/instruct-pix2pix"
            elif "describe" in low and res:
                task = Task(1, "image-to-text", (), {"image": res[-1].id})
                model = "nlpconnect/vit-gpt2-image-captioning"
            else:
                task = Task(1, "text-to-image", (), {"text": text})
                model = "stabilityai/stable-diffusion-2-1"
            rec.tasks = [task]
            yield PlanReady((task,))
            sel = Selection(1, model, "most downloads")
            rec.selections[1] = sel
            yield ModelSelected(sel)
            yield TaskStarted(1, model)
            await asyncio.sleep(0.1)
            out = Output()
            if task.task in ("image-to-image", "text-to-image"):
                src = res[-1].path if task.task == "image-to-image" else None
                # Pillow work is CPU-bound: off the event loop, as the real experts do it
                r = await asyncio.to_thread(self._make_image, src, text, f"image-{len(res) + 1}")
                res.append(r)
                out.files.append(r)
            else:
                out.text = "a cat lying on a couch"
            result = TaskResult(1, "ok", out, model=model)
            rec.results[1] = result
            yield TaskFinished(result)
            answer = "Here is the result.\n\n" + ("**Fox** facts: " + "foxes are clever animals. " * 300 if "essay" in low else "")
            for i in range(0, len(answer), 200):
                yield ResponseDelta(answer[i:i + 200])
            rec.response = answer
            rec.files = list(out.files)
            rec.timings_ms = {"total": 120.0}
            yield Done(rec)


@contextlib.asynccontextmanager
async def make_service(tmp_path: Path, **kw) -> AsyncIterator[ServiceDouble]:
    svc = ServiceDouble(tmp_path / "media", **kw)
    try:
        yield svc
    finally:
        await svc.close()
