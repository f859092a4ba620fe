"""PDF attachments through the service: a page with text becomes the text of a text file, a page
that is only a picture becomes a PNG a vision task can take, limits are ``[documents]``. The PDFs
are built here: a text page written by hand in PDF syntax (ISO 32000-1), a scanned page saved by
Pillow's own PDF writer, joined by pypdf."""

from __future__ import annotations

import io
import math
import re
import time

import pytest
from PIL import Image

from bot.documents import expand_documents, is_pdf
from bot.errors import InputError
from bot.incoming import IncomingFile
from bot.settings import Settings, load_settings
from bot.uploads import inspect_upload
from pipeline.decoding import Decoder
from benchmarks.harness.crafted_files import WORDS, build_pdf, huge_page_pdf, many_operators_pdf, text_page_pdf
from tests.conftest import media_file, upload_limits

def scan_pdf() -> bytes:
    """A one-page PDF that is only a picture (the cat photo), as a scanner would write it."""
    buf = io.BytesIO()
    Image.open(io.BytesIO(media_file("chelsea.png").data)).convert("RGB").save(buf, "PDF", resolution=72)
    return buf.getvalue()


def joined(*pdfs: bytes) -> bytes:
    import pypdf

    writer = pypdf.PdfWriter()
    for data in pdfs:
        writer.append(pypdf.PdfReader(io.BytesIO(data)))
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def docs(**kw):
    return load_settings(env={}, overrides={"documents": kw}).documents


async def test_text_and_a_scanned_page_become_a_text_file_and_an_image(decoder):
    pdf = joined(text_page_pdf(), scan_pdf())
    assert is_pdf(pdf)
    photo = media_file("chelsea.png")
    files = await expand_documents([IncomingFile(pdf, name="report.pdf"), photo], docs(), decoder)
    text, page, kept = files
    assert kept is photo
    assert text.name == "report.txt" and text.data.decode() == f"[page 1]\n{WORDS}"
    assert page.name == "report-page2.png"
    info = await inspect_upload(page.data, page.name, page.declared_mime, max_bytes=1 << 25, **upload_limits())
    assert info.kind == "image"
    with Image.open(io.BytesIO(page.data)) as im:  # 451x300 points at 110 dpi, whole pixels rounded up
        assert im.size == (math.ceil(451 * 110 / 72), math.ceil(300 * 110 / 72))
    info = await inspect_upload(text.data, text.name, text.declared_mime, max_bytes=1 << 25, **upload_limits())
    assert info.kind == "text"


async def test_page_limits_say_what_was_left_out(decoder):
    pdf = joined(text_page_pdf("one"), text_page_pdf("two"), scan_pdf(), text_page_pdf("four"))
    [text] = await expand_documents([IncomingFile(pdf, name="long.pdf")], docs(max_pages=2), decoder)
    assert text.data.decode() == "(pages 3-4 of 4 are left out: at most 2 pages are read)\n[page 1]\none\n\n[page 2]\ntwo"
    text, = await expand_documents([IncomingFile(joined(text_page_pdf(), scan_pdf()), name="r.pdf")],
                                   docs(max_page_images=0), decoder)
    assert text.data.decode().startswith("(1 pages without text are left out)\n[page 1]")


@pytest.mark.parametrize("data,kw,message", [
    (b"%PDF-1.4\nthis is not a PDF at all", {}, "The bad.pdf could not be read as a PDF."),
    (text_page_pdf(), {"pdf": False}, "PDF files are not accepted here."),
    (text_page_pdf() + b" " * 2048, {"max_pdf_bytes": 1024},
     f"The bad.pdf is {len(text_page_pdf()) + 2048:,} bytes, more than the limit of 1,024 bytes for PDF files."),
])
async def test_bad_pdfs_get_one_sentence(data, kw, message, decoder):
    with pytest.raises(InputError) as info:
        await expand_documents([IncomingFile(data, name="bad.pdf")], docs(**kw), decoder)
    assert info.value.user_message == message


CYCLIC = build_pdf([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
                    b"<< /Type /Pages /Parent 2 0 R /Kids [2 0 R] /Count 1 >>"])
BROKEN = build_pdf([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids 3 0 R /Count 1 >>", b"5"])
NO_ROOT = build_pdf([b"<< /Type /Catalog /Pages 7 0 R >>"])


@pytest.mark.parametrize("data", [CYCLIC, BROKEN, NO_ROOT], ids=["cyclic", "broken", "no-pages"])
async def test_a_crafted_page_tree_is_one_sentence(data, decoder):
    with pytest.raises(InputError) as info:
        await expand_documents([IncomingFile(data, name="crafted.pdf")], docs(), decoder)
    assert info.value.user_message == "The crafted.pdf could not be read as a PDF."


async def test_a_200_inch_page_is_rendered_within_the_pixel_limit(decoder, caplog):
    """600 bytes asking for 22000x22000 pixels at 110 dpi (1.9 GB, over the worker's ceiling):
    rendered at the resolution that fits the decoder's pixel limit instead."""
    caplog.set_level("INFO", "pipeline.decoding")
    [page] = await expand_documents([IncomingFile(huge_page_pdf(), name="poster.pdf")], docs(), decoder)
    with Image.open(io.BytesIO(page.data)) as im:
        assert im.width == im.height and decoder.max_pixels * 0.99 < im.width * im.height <= decoder.max_pixels
    [peak] = [int(m) for m in re.findall(r"decoded the poster.pdf in .* peak memory (\d+) MiB", caplog.text)]
    assert peak < decoder.memory_bytes / 2**20


async def test_millions_of_text_operators_are_left_out_by_their_size(decoder):
    """20 million operators in 60 KB (60 MB once inflated): the page is left out from its
    content's size, before pypdf parses it or pdfium draws it."""
    crafted = many_operators_pdf(20_000_000)
    assert len(crafted) < 100_000
    started = time.monotonic()
    with pytest.raises(InputError) as info:
        await expand_documents([IncomingFile(crafted, name="ops.pdf")], docs(), decoder)
    assert info.value.user_message == ("The ops.pdf has more content on each page than can be read (the limit is 4 MiB "
                                       "per page, [documents] max_page_content_bytes).")
    assert time.monotonic() - started < 5
    [text] = await expand_documents([IncomingFile(joined(text_page_pdf(), crafted), name="mixed.pdf")], docs(), decoder)
    assert text.data.decode() == f"(1 pages with more content than can be read are left out)\n[page 1]\n{WORDS}"


async def test_a_pdf_that_takes_too_long_is_stopped():
    """With the content limit raised, the same page takes seconds: the job is killed at its timeout."""
    crafted = many_operators_pdf(20_000_000)
    async with Decoder(max_pixels=Settings().inference.max_image_pixels, timeout=1.0) as decoder:
        started = time.monotonic()
        with pytest.raises(InputError) as info:
            await expand_documents([IncomingFile(crafted, name="ops.pdf")], docs(max_page_content_bytes=256 * 2**20),
                                   decoder)
    assert info.value.user_message == "Decoding the ops.pdf took too long (more than 1 s)."
    assert time.monotonic() - started < 3


def test_run_json_prints_its_document_for_a_crafted_pdf(tmp_path):
    """``hugginggpt run --json`` with a PDF whose page tree loops: a JSON document with the
    sentence, and a non-zero exit status."""
    import json

    from tests.test_cli import hugginggpt, no_traceback

    pdf = tmp_path / "crafted.pdf"
    pdf.write_bytes(CYCLIC)
    p = hugginggpt(["run", "--sandbox", "--json", "Summarise this", "--file", str(pdf)], tmp_path)
    no_traceback(p)
    assert p.returncode != 0
    document = json.loads(p.stdout)
    assert "The crafted.pdf could not be read as a PDF." in json.dumps(document), document


def test_a_pdf_is_summarised_by_a_sandbox_run(tmp_path):
    """``hugginggpt run --sandbox`` with a PDF: the plan summarises the text of its pages."""
    from tests.test_cli import hugginggpt, no_traceback

    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(joined(text_page_pdf(), scan_pdf()))
    p = hugginggpt(["run", "--sandbox", "Summarise this report", "--file", str(pdf)], tmp_path)
    no_traceback(p)
    assert f"**summarization**: “[sandbox] [page 1] {WORDS}”" in p.stdout
    # the scanned page is an image no task read: said (pipeline.coverage); the plan chose so, the run is ok
    assert p.returncode == 0, p.stderr
    assert "- image-1 (report-page2.png) was not used: the plan had no task for it" in p.stdout
