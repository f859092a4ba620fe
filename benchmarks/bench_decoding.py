"""Media decoding in worker processes (:mod:`pipeline.decoding`): what a job costs to start, and
the time and peak memory of the crafted files of issue 39 (built here), as the service's log
line reports them.

    PYTHONPATH=. python -m benchmarks.bench_decoding
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from pathlib import Path

from bot.settings import Settings
from pipeline.decoding import Decoder
from pipeline.media import stream_info
from pipeline.video_parts import video_parts

MEDIA = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "media"


class _Peaks(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def main() -> None:
    """Print one line per measurement. (Imports here: each job imports the main module again,
    multiprocessing's rule for a main run as ``-m package.module``; keep its top light.)"""
    from bot.documents import expand_documents
    from bot.errors import InputError
    from bot.incoming import IncomingFile
    from bot.settings import load_settings
    from benchmarks.harness.crafted_files import huge_page_pdf, many_operators_pdf, single_keyframe_video

    peaks = _Peaks()
    logging.getLogger("pipeline.decoding").addHandler(peaks)
    logging.getLogger("pipeline.decoding").setLevel(logging.INFO)
    docs = load_settings(env={}, overrides={}).documents
    clip = (MEDIA / "rocket_zoom.mp4").read_bytes()
    async with Decoder(max_pixels=Settings().inference.max_image_pixels) as decoder:
        t = time.monotonic()
        await decoder.run(stream_info, clip, what="the clip")
        print(f"first job (fork server start): {time.monotonic() - t:.3f} s")
        t = time.monotonic()
        for _ in range(20):
            await decoder.run(stream_info, clip, what="the clip")
        print(f"later job (probe of a 2 s clip): {(time.monotonic() - t) / 20 * 1000:.1f} ms each")
        for name, data in (("poster.pdf", huge_page_pdf()), ("ops.pdf", many_operators_pdf(20_000_000))):
            t = time.monotonic()
            try:
                await expand_documents([IncomingFile(data, name=name)], docs, decoder)
                outcome = "read"
            except InputError as e:
                outcome = e.user_message
            peak = re.findall(r"peak memory (\d+) MiB", peaks.lines[-1])
            print(f"{name} ({len(data):,} bytes): {time.monotonic() - t:.2f} s, peak {peak[0]} MiB: {outcome}")
    async with Decoder(max_pixels=Settings().inference.max_image_pixels, timeout=1.0) as decoder:
        video = single_keyframe_video(3840, 2160, 300)
        t = time.monotonic()
        results = await asyncio.gather(*(video_parts(video, decoder=decoder) for _ in range(8)), return_exceptions=True)
        print(f"eight stuck 4K videos ({len(video):,} bytes) at a 1 s timeout: all ended in "
              f"{time.monotonic() - t:.2f} s, {sum(isinstance(r, Exception) for r in results)} sentences")


if __name__ == "__main__":
    asyncio.run(main())
