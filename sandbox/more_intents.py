"""Handlers of the keyword planner for TaskBench's plain phrasings that need more than one keyword:
sentence similarity between two quoted sentences, and which intents wait for the rest of the
request (read aloud "a description of the image": the description comes later in the sentence)."""

from __future__ import annotations

import re

from .planner import Planner
from .wording import quotes


def similar_sentences(p: Planner, clause: str, ctx: str, s: int, e: int) -> None:
    """``how similar are 'A' and 'B'``: sentence similarity of the first quoted sentence (text)
    against the others (context, one per line)."""
    q = [t[2] for t in quotes(p.text) if t[2].strip()]
    if len(q) >= 2:
        p.add("sentence-similarity", {"text": q[0], "context": "\n".join(q[1:])}, [], "text")


def deferred(name: str, p: Planner, clause: str) -> bool:
    """Whether intent ``name`` should run after the others: text-to-speech with nothing to read
    yet ("an audio file describing what is in the image": the description is planned later)."""
    return name == "tts" and not quotes(clause) and "text" not in p.produced


_ABOUT_IMAGE = re.compile(
    r"\b(?:describ\w*|about|showing|of)\b[^.?!;]{0,40}?\b(?:(?:the|this|that|my|an?)\s+(?:\w+\s+)?"
    r"(?:image|photo|picture|pic)|[\w-]+\.(?:jpe?g|png|webp|gif))\b",
    re.I,
)


def about_an_image(p: Planner, clause: str) -> tuple[str, list[int]] | None:
    """``a video that describes the content of the image``: what the image shows, as the
    text of a generated video or speech (image classification of that image, then
    ``<resource>-N``); ``None`` when the clause is not about an image of the conversation."""
    if quotes(clause) or not _ABOUT_IMAGE.search(clause):
        return None
    src = p.source("image", clause) or p.source("image", p.text)
    if src is None:
        return None
    tid = p.add("image-classification", {"image": src[0]}, src[1], "text")
    return (f"<resource>-{tid}", [tid]) if tid is not None else None
