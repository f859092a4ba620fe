"""PDF attachments as files the pipeline can read: the text of the pages (``pypdf``) as one text
file, and pages that carry no text (scans, slides saved as pictures) rendered as PNG images
(``pypdfium2``) that a vision task can take. Limits are ``[documents]``
(:class:`bot.settings_inference.DocumentSettings`).
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from .errors import InputError
from .incoming import IncomingFile

if TYPE_CHECKING:  # pypdf and pypdfium2 load with the first PDF, not with every service start
    import pypdf

log = logging.getLogger(__name__)

MiB = 1024 * 1024


def is_pdf(data: bytes) -> bool:
    """Whether ``data`` starts like a PDF file (``%PDF-``, ISO 32000-1 §7.5.2)."""
    return data[:1024].lstrip()[:5].upper() == b"%PDF-"


async def expand_documents(files: Sequence[IncomingFile], settings: Any) -> list[IncomingFile]:
    """Replace each PDF among ``files`` by its text file and its rendered image-only pages.

    Args:
        files: the user's files (those already checked are kept as they are).
        settings: ``[documents]`` (``pdf``, ``max_pdf_bytes``, ``max_pages``, ``max_page_images``,
            ``render_dpi`` in dots per inch, ``max_text_bytes``).

    Returns:
        The files, each PDF replaced by ``<name>.txt`` (UTF-8, ``[page N]`` headings; a first line
        says which pages were left out) and ``<name>-page<N>.png`` for image-only pages.

    Raises:
        InputError: PDFs are turned off, a PDF is too large, encrypted, unreadable, or has
            neither text nor a page that renders.
    """
    out: list[IncomingFile] = []
    for f in files:
        if f.checked is None and is_pdf(f.data):
            out += await asyncio.to_thread(_pdf_parts, f, settings)
        else:
            out.append(f)
    return out


def _size(n: int) -> str:
    return f"{n / MiB:.1f} MiB" if n >= MiB else f"{n:,} bytes"


def _open(f: IncomingFile, settings: Any, label: str) -> pypdf.PdfReader:
    if not settings.pdf:
        raise InputError("PDF files are not accepted here.", "[documents] pdf = false")
    if len(f.data) > settings.max_pdf_bytes:
        raise InputError(f"The {label} is {_size(len(f.data))}, more than the limit of "
                         f"{_size(settings.max_pdf_bytes)} for PDF files.")
    import pypdf
    from pypdf.errors import PdfReadError

    try:
        reader = pypdf.PdfReader(io.BytesIO(f.data))
        if reader.is_encrypted:
            raise InputError(f"The {label} is encrypted; please send it without a password.")
        len(reader.pages)
    except (PdfReadError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"The {label} could not be read as a PDF.", repr(e)) from None
    return reader


def _pdf_parts(f: IncomingFile, settings: Any) -> list[IncomingFile]:
    label = f.name or "PDF file"
    stem = PurePath(f.name).stem if f.name else "document"
    reader = _open(f, settings, label)
    total = len(reader.pages)
    kept = min(total, settings.max_pages)
    texts: list[str] = []
    bare: list[int] = []
    for n in range(kept):
        try:
            text = (reader.pages[n].extract_text() or "").strip()
        except Exception as e:  # noqa: BLE001 - one bad page does not spoil the others
            log.warning("%s: page %d text not extracted: %r", label, n + 1, e)
            text = ""
        if text:
            texts.append(f"[page {n + 1}]\n{text}")
        else:
            bare.append(n)
    rendered = _render(f.data, bare[: settings.max_page_images], settings.render_dpi, label)
    if not texts and not rendered:
        raise InputError(f"The {label} has no text and none of its pages could be rendered.")
    notes = []
    if kept < total:
        notes.append(f"(pages {kept + 1}-{total} of {total} are left out: at most {kept} pages are read)")
    if len(bare) > len(rendered):
        notes.append(f"({len(bare) - len(rendered)} pages without text are left out)")
    parts: list[IncomingFile] = []
    if texts:
        body = "\n".join(notes + ["\n\n".join(texts)]).encode("utf-8")
        if len(body) > settings.max_text_bytes:
            body = body[: settings.max_text_bytes].decode("utf-8", "ignore").encode("utf-8")
        parts.append(IncomingFile(body, name=f"{stem}.txt", declared_mime="text/plain"))
    parts += [IncomingFile(png, name=f"{stem}-page{n + 1}.png", declared_mime="image/png") for n, png in rendered]
    log.info("%s: %d pages, %d read, %d with text, %d rendered", label, total, kept, len(texts), len(rendered))
    return parts


def _render(data: bytes, pages: list[int], dpi: int, label: str) -> list[tuple[int, bytes]]:
    if not pages:
        return []
    import pypdfium2

    out = []
    pdf = pypdfium2.PdfDocument(data)
    try:
        for n in pages:
            try:
                image = pdf[n].render(scale=dpi / 72).to_pil()
                buf = io.BytesIO()
                image.convert("RGB").save(buf, "PNG")
                out.append((n, buf.getvalue()))
            except Exception as e:  # noqa: BLE001 - the page is left out and logged
                log.warning("%s: page %d not rendered: %r", label, n + 1, e)
    finally:
        pdf.close()
    return out
