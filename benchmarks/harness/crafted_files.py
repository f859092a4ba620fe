"""Crafted files a hostile (or careless) user sends, built in memory for tests and benchmarks:
small PDFs whose pages cost a reader much (a 200-inch page, millions of text operators) and a
video whose frames all hang on one keyframe. Nothing here is read from disk.

PDF syntax: ISO 32000-1 (objects, cross-reference table, ``FlateDecode`` content streams).
"""

from __future__ import annotations

import io

WORDS = "Quarterly report: revenue grew by 12 percent in Berkeley."


def text_page_pdf(words: str = WORDS) -> bytes:
    """A one-page PDF whose page draws ``words`` in Helvetica (xref offsets computed)."""
    return one_page_pdf(f"BT /F1 14 Tf 50 700 Td ({words}) Tj ET".encode("latin-1"))


def one_page_pdf(content: bytes, box: bytes = b"0 0 612 792") -> bytes:
    """A one-page PDF with a Helvetica font, the page's ``content`` stream (Flate-compressed) and
    its ``box`` in points."""
    import zlib

    stream = zlib.compress(content, 9)
    return build_pdf([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [%s] /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>" % box,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ])


def huge_page_pdf(inches: int = 200) -> bytes:
    """A 600-byte PDF of one square page ``inches`` wide (a line on it, no text)."""
    return one_page_pdf(b"0 0 m 100 100 l S", b"0 0 %d %d" % (inches * 72, inches * 72))


def many_operators_pdf(count: int) -> bytes:
    """A PDF whose one page holds ``count`` text operators (``T*``: 3 bytes each, compressed to
    almost nothing)."""
    return one_page_pdf(b"BT /F1 1 Tf " + b"T* " * count + b"ET")


def build_pdf(objects: list[bytes]) -> bytes:
    """A PDF of ``objects`` (numbered from 1; object 1 is the catalog), xref offsets computed."""
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % n + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out.write(b"".join(b"%010d 00000 n \n" % o for o in offsets))
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def single_keyframe_video(width: int, height: int, frames: int) -> bytes:
    """An H.264 MP4 of black ``width``×``height`` frames with one keyframe (the first)."""
    import av  # imported here: importing the sandbox must not load the codecs

    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.gop_size = frames + 1
        stream.codec_context.options = {"preset": "ultrafast"}
        frame = av.VideoFrame(width, height, "yuv420p")
        for plane in frame.planes:
            plane.update(bytes(plane.buffer_size))
        for i in range(frames):
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return buf.getvalue()
