"""Reply bodies bounded while they arrive, for every HTTP client of the pipeline (the controller's
``openai`` client and the experts' ``huggingface_hub`` session, both on ``httpx2``).

:func:`bound_body` is called from a response hook or transport before the body is read: it refuses
a declared ``Content-Length`` over the limit, and replaces the body stream by a
:class:`BoundedStream` that counts bytes as they are decoded (gzip and deflate are decoded here in
pieces of at most :data:`PIECE` bytes, so a small compressed body cannot inflate unseen) and stops
the read past the limit. At most the limit plus one piece is ever held.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Callable, Iterator

import httpx2

PIECE = 64 * 1024
"""Bytes, the largest piece a compressed body is decoded into at once."""

TooLarge = Callable[[int], Exception]
"""Builds the error raised past the limit, given the bytes seen (or the declared length)."""


def decoder_for(encodings: list[str]) -> zlib._Decompress | None | bool:
    """A zlib decompressor for one ``gzip``/``deflate`` encoding, ``None`` for none, ``False`` when
    the encodings cannot be decoded here (another one, or several)."""
    if not encodings:
        return None
    if len(encodings) > 1 or encodings[0] not in ("gzip", "deflate"):
        return False
    return zlib.decompressobj(zlib.MAX_WBITS | 16 if encodings[0] == "gzip" else zlib.MAX_WBITS)


class BoundedStream(httpx2.AsyncByteStream):
    """The body of one reply, decoded and counted; raises ``too_large(seen)`` past ``limit`` bytes."""

    def __init__(self, inner: httpx2.AsyncByteStream, decoder: zlib._Decompress | None, limit: int,
                 too_large: TooLarge) -> None:
        self._inner, self._decoder = inner, decoder
        self._limit, self._too_large = limit, too_large
        self._count = 0
        self._started = False

    def _pieces(self, data: bytes) -> Iterator[bytes]:
        d = self._decoder
        if d is None:
            if data:
                yield data
            return
        while data:
            try:
                out = d.decompress(data, PIECE)
            except zlib.error:
                if self._started:
                    raise
                # "deflate" sent without its zlib header, as some servers do: raw deflate
                d = self._decoder = zlib.decompressobj(-zlib.MAX_WBITS)
                self._started = True
                continue
            self._started = True
            if out:
                yield out
            data = d.unconsumed_tail

    def _counted(self, piece: bytes) -> bytes:
        self._count += len(piece)
        if self._count > self._limit:
            raise self._too_large(self._count)
        return piece

    async def body(self) -> AsyncIterator[bytes]:
        """The decoded body in pieces, counted."""
        async for raw in self._inner:
            for piece in self._pieces(raw):
                yield self._counted(piece)
        if self._decoder is not None:
            rest = self._decoder.flush()
            if rest:
                yield self._counted(rest)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in self.body():
            yield piece

    async def aclose(self) -> None:
        await self._inner.aclose()


def bound_body(
    response: httpx2.Response,
    limit: int,
    too_large: TooLarge,
    refused_encoding: Callable[[list[str]], Exception],
    stream: Callable[..., BoundedStream] = BoundedStream,
) -> None:
    """Bound the body of ``response`` (not read yet) to ``limit`` bytes, decoded.

    Args:
        response: a response whose body has not been read.
        limit: bytes.
        too_large: builds the error for a body over the limit.
        refused_encoding: builds the error for a content encoding other than gzip/deflate/identity
            (its decoded size could not be bounded).
        stream: the :class:`BoundedStream` class to use (a subclass may post-process the body).

    Raises:
        The error of ``too_large`` when the declared ``Content-Length`` is over the limit (nothing
        of the body read), or of ``refused_encoding``.
    """
    values = response.headers.get_list("content-encoding", split_commas=True)
    encodings = [v.strip().lower() for v in values if v.strip().lower() not in ("", "identity")]
    decoder = decoder_for(encodings)
    if decoder is False:
        raise refused_encoding(values)
    declared = response.headers.get("content-length")
    if not encodings and declared and declared.isdigit() and int(declared) > limit:
        raise too_large(int(declared))
    if encodings:
        del response.headers["content-encoding"]  # decoded here, in bounded pieces
        if "content-length" in response.headers:
            del response.headers["content-length"]
    response.stream = stream(response.stream, decoder, limit, too_large)
