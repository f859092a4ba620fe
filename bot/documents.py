"""PDF attachments as files the pipeline can read: the text of the pages (``pypdf``) as one text
file, and pages that carry no text (scans, slides saved as pictures) rendered as PNG images
(``pypdfium2``) that a vision task can take. Limits are ``[documents]``
(:class:`bot.settings.DocumentSettings`).

The parsing and rendering run in a worker process of a :class:`pipeline.decoding.Decoder`
(bounded in time and memory, killed when its time is up): a crafted PDF costs its worker, never
the service. A page's size is read from its box before it is rendered, and the page is rendered
at a resolution that keeps it within the decoder's pixel limit; a page whose content stream is
over ``[documents] max_page_content_bytes`` is neither parsed for text nor rendered.
"""

from __future__ import annotations

import io
import logging
import math
from collections.abc import Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, NamedTuple

from pipeline.decoding import Decoder, DecodeError
from pipeline.tasks.drawing import to_png

from .errors import InputError
from .incoming import IncomingFile

if TYPE_CHECKING:  # pypdf and pypdfium2 load in the decoding worker, not with every service start
    import pypdf

log = logging.getLogger(__name__)

MiB = 1024 * 1024


class _Limits(NamedTuple):
    """What one PDF job may read and make (from ``[documents]`` and the decoder's pixel limit)."""

    max_pages: int
    max_page_images: int
    render_dpi: int
    max_text_bytes: int
    max_content_bytes: int
    max_pixels: int


def is_pdf(data: bytes) -> bool:
    """Whether ``data`` starts like a PDF file (``%PDF-``, ISO 32000-1 §7.5.2)."""
    return data[:1024].lstrip()[:5].upper() == b"%PDF-"


async def expand_documents(files: Sequence[IncomingFile], settings: Any, decoder: Decoder) -> list[IncomingFile]:
    """Replace each PDF among ``files`` by its text file and its rendered image-only pages.

    Args:
        files: the user's files (those already checked are kept as they are).
        settings: ``[documents]`` (``pdf``, ``max_pdf_bytes``, ``max_pages``, ``max_page_images``,
            ``render_dpi`` in dots per inch, ``max_text_bytes``, ``max_page_content_bytes``).
        decoder: the worker processes that parse and render (its ``max_pixels`` bounds a
            rendered page, its ``timeout`` and memory ceiling bound one PDF).

    Returns:
        The files, each PDF replaced by ``<name>.txt`` (UTF-8, ``[page N]`` headings; a first line
        says which pages were left out) and ``<name>-page<N>.png`` for image-only pages.

    Raises:
        InputError: PDFs are turned off, a PDF is too large, encrypted, unreadable, has neither
            text nor a page that renders, took longer than the decoder's timeout or more memory
            than its ceiling (one sentence each).
    """
    limits = _Limits(settings.max_pages, settings.max_page_images, settings.render_dpi, settings.max_text_bytes,
                     settings.max_page_content_bytes, decoder.max_pixels)
    out: list[IncomingFile] = []
    for f in files:
        if f.checked is None and is_pdf(f.data):
            label = f.name or "PDF file"
            _check(f, settings, label)
            try:
                parts = await decoder.run(_pdf_parts, f.data, f.name, limits, what=f"the {label}")
            except DecodeError as e:
                raise InputError(e.user_message, str(e)) from None
            out += [IncomingFile(data, name=name, declared_mime=mime) for data, name, mime in parts]
        else:
            out.append(f)
    return out


def _size(n: int) -> str:
    return f"{n / MiB:.1f} MiB" if n >= MiB else f"{n:,} bytes"


def _check(f: IncomingFile, settings: Any, label: str) -> None:
    """The checks made before a worker is started: PDFs accepted at all, and the file's size."""
    if not settings.pdf:
        raise InputError("PDF files are not accepted here.", "[documents] pdf = false")
    if len(f.data) > settings.max_pdf_bytes:
        raise InputError(f"The {label} is {_size(len(f.data))}, more than the limit of "
                         f"{_size(settings.max_pdf_bytes)} for PDF files.")


def _open(data: bytes, label: str) -> pypdf.PdfReader:
    import pypdf

    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        encrypted = reader.is_encrypted
        if not encrypted:
            len(reader.pages)
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - a crafted file raises whatever pypdf's parser meets (a cycle: RecursionError)
        raise DecodeError(f"The {label} could not be read as a PDF.", repr(e)[:500]) from None
    if encrypted:
        raise DecodeError(f"The {label} is encrypted; please send it without a password.")
    return reader


def _page_text(reader: pypdf.PdfReader, n: int, limits: _Limits, label: str) -> str | None:
    """The text of page ``n`` (``""``: none); ``None`` when its content is over the limit (the
    page is then left out altogether)."""
    try:
        page = reader.pages[n]
        contents = page.get_contents()
        size = len(contents.get_data()) if contents is not None else 0
        if size > limits.max_content_bytes:
            log.warning("%s: page %d has %d bytes of content, over %d: left out", label, n + 1, size, limits.max_content_bytes)
            return None
        return (page.extract_text() or "").strip()
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - one bad page does not spoil the others
        log.warning("%s: page %d text not extracted: %r", label, n + 1, e)
        return ""


def _pdf_parts(data: bytes, name: str | None, limits: _Limits) -> list[tuple[bytes, str, str]]:
    """The worker's job: ``(bytes, file name, MIME type)`` of the text file and rendered pages."""
    label = name or "PDF file"
    stem = PurePath(name).stem if name else "document"
    reader = _open(data, label)
    total = len(reader.pages)
    kept = min(total, limits.max_pages)
    texts: list[str] = []
    bare: list[int] = []
    skipped = 0
    for n in range(kept):
        text = _page_text(reader, n, limits, label)
        if text:
            texts.append(f"[page {n + 1}]\n{text}")
        elif text is None:
            skipped += 1
        else:
            bare.append(n)
    rendered = _render(data, bare[: limits.max_page_images], limits, label)
    if not texts and not rendered and skipped == kept:
        raise DecodeError(f"The {label} has more content on each page than can be read (the limit is "
                          f"{limits.max_content_bytes / MiB:g} MiB per page, [documents] max_page_content_bytes).")
    if not texts and not rendered:
        raise DecodeError(f"The {label} has no text and none of its pages could be rendered.")
    notes = []
    if kept < total:
        notes.append(f"(pages {kept + 1}-{total} of {total} are left out: at most {kept} pages are read)")
    if len(bare) > len(rendered):
        notes.append(f"({len(bare) - len(rendered)} pages without text are left out)")
    if skipped:
        notes.append(f"({skipped} pages with more content than can be read are left out)")
    parts: list[tuple[bytes, str, str]] = []
    if texts:
        body = "\n".join(notes + ["\n\n".join(texts)]).encode("utf-8")
        if len(body) > limits.max_text_bytes:
            body = body[: limits.max_text_bytes].decode("utf-8", "ignore").encode("utf-8")
        parts.append((body, f"{stem}.txt", "text/plain"))
    parts += [(png, f"{stem}-page{n + 1}.png", "image/png") for n, png in rendered]
    log.info("%s: %d pages, %d read, %d with text, %d rendered", label, total, kept, len(texts), len(rendered))
    return parts


def render_scale(width_pt: float, height_pt: float, dpi: int, max_pixels: int) -> float | None:
    """Pixels per PDF point for a page of ``width_pt`` × ``height_pt`` points (1/72 inch) rendered
    at ``dpi``, lowered so the image has at most ``max_pixels`` pixels; ``None`` for a box that is
    not a finite positive size."""
    if not (math.isfinite(width_pt) and math.isfinite(height_pt)) or width_pt <= 0 or height_pt <= 0:
        return None
    scale = dpi / 72
    pixels = math.ceil(width_pt * scale) * math.ceil(height_pt * scale)
    if pixels > max_pixels:
        scale *= math.sqrt(max_pixels / pixels) * 0.999
    return scale


def _render(data: bytes, pages: list[int], limits: _Limits, label: str) -> list[tuple[int, bytes]]:
    if not pages:
        return []
    import pypdfium2

    out = []
    pdf = pypdfium2.PdfDocument(data)
    try:
        for n in pages:
            try:
                page = pdf[n]
                width, height = page.get_size()  # points, from the page's box: nothing drawn yet
                scale = render_scale(width, height, limits.render_dpi, limits.max_pixels)
                if scale is None:
                    log.warning("%s: page %d has a box of %rx%r points: not rendered", label, n + 1, width, height)
                    continue
                out.append((n, to_png(page.render(scale=scale).to_pil().convert("RGB"))))
            except MemoryError:
                raise
            except Exception as e:  # noqa: BLE001 - the page is left out and logged
                log.warning("%s: page %d not rendered: %r", label, n + 1, e)
    finally:
        pdf.close()
    return out
