"""Handlers of the keyword planner (:mod:`sandbox.planning`) for phrasings that need more than one
keyword. Pure functions, no I/O.

Other people's wording: a request about several files gets a task per file, actions in a video go to
video classification, removal and other edits of a picture go to image-to-image, and a request that
names no file and no model task is text for the controller (``text-generation`` or
``conversational``).

:func:`decline` is the stand-in's answer when it finds no task: a sentence saying that it is the
offline stand-in and what a real controller model would do, sent *instead of* a plan, so the product
treats it as any controller that answers with prose instead of a plan (a planning failure, exit
status 5; :func:`pipeline.planning.plan_error`).

TaskBench's plain phrasings: sentence similarity between two quoted sentences, and which intents
wait for the rest of the request (read aloud "a description of the image": the description comes
later in the sentence).

MCP tools: a tool (task ``mcp.<server>.<tool>``) is planned when the request names it ("stamp",
"count words"), with the arguments its line in the planning prompt lists (``- NAME: DESCRIPTION;
args image, text?``).
"""

from __future__ import annotations

import re
from typing import Any

from .planner import KIND_WORDS, Planner
from .wording import SMALL_TALK, clause_end, mask_quotes, quotes

Source = tuple[str, list[int]]


def _plural(kind: str) -> re.Pattern[str]:
    words = KIND_WORDS[kind] + (r"|clip" if kind != "image" else "")
    return re.compile(
        r"\b(?:both|each|every|all\s+(?:the\s+|these\s+|those\s+|of\s+the\s+|my\s+)?|these|those|the\s+two|two|three|"
        r"several)\s*(?:of\s+(?:the|these|them)\s+)?(?:" + words + r")s\b|\b(?:both|each)\s+(?:of\s+them|one)\b"
        r"|\bboth\b|\b(?:in|of|for|on)\s+each\b",
        re.I,
    )


_PLURAL = {kind: _plural(kind) for kind in KIND_WORDS}


def media_sources(p: Planner, clause: str, ctx: str, kind: str) -> list[Source]:
    """The files of ``kind`` (``"image"``, ``"audio"``) a clause is about, one task each: every
    one it names by file name or id (in the order named), all the user's files of that kind for
    "both photos" / "each recording" / "these pictures", else the one :meth:`Planner.source`
    picks. ``[]`` when there is none."""
    named = _named(p, clause, kind)
    if len(named) >= 2:
        return [(r["id"], []) for r in named]
    if _PLURAL[kind].search(clause) or (not named and _PLURAL[kind].search(ctx)):
        user = [r for r in p.of_kind(kind) if r.get("origin", "user") == "user"]
        if len(user) >= 2:
            return [(r["id"], []) for r in user]
    src = p.source(kind, clause) or p.source(kind, ctx)
    return [src] if src else []


def image_sources(p: Planner, clause: str, ctx: str) -> list[Source]:
    """:func:`media_sources` of the images a clause is about."""
    return media_sources(p, clause, ctx, "image")


def _named(p: Planner, span: str, kind: str) -> list[dict[str, Any]]:
    """Resources of ``kind`` named in ``span`` by id or file name, in the order they appear."""
    low = span.lower()
    hits = []
    for r in p.of_kind(kind):
        for token in (r.get("id"), r.get("name")):
            m = re.search(r"(?<![\w.-])" + re.escape(str(token).lower()) + r"(?![\w-])", low) if token else None
            if m:
                hits.append((m.start(), r))
                break
    return [r for _, r in sorted(hits, key=lambda h: h[0])]


def names_what_a_file_shows(p: Planner, text: str) -> bool:
    """Whether ``text`` names what an image of the conversation is named after ("does the
    astronaut hold a flag" with ``astronaut.png``): a word of four letters or more of its file name."""
    for r in p.of_kind("image"):
        words = [w for w in re.split(r"[\W\d_]+", str(r.get("name") or "").rsplit(".", 1)[0]) if len(w) >= 4]
        if any(re.search(r"\b" + re.escape(w) + r"s?\b", text, re.I) for w in words):
            return True
    return False


_VIDEO_WORDS = re.compile(r"\b(?:" + KIND_WORDS["video"] + r"|clip|scene)s?\b", re.I)


def video_source(p: Planner, clause: str, ctx: str) -> Source | None:
    """The video a clause is about: one named by file name or id, else the newest video when the
    clause (or the request) speaks of a video, clip or footage; ``None`` when there is no video."""
    if not p.of_kind("video"):
        return None
    named = _named(p, clause, "video") or _named(p, p.text, "video")
    if named:
        return named[0]["id"], []
    if _VIDEO_WORDS.search(ctx) or _VIDEO_WORDS.search(p.text) or not _OTHER_MEDIA.search(p.text):
        return p.source("video", clause)  # "identify the activity shown", with only a video at hand
    return None


_OTHER_MEDIA = re.compile(r"\b(?:" + KIND_WORDS["image"] + "|" + KIND_WORDS["audio"] + r")s?\b", re.I)
_MOTION = re.compile(  # what someone does: an action word a video answers better than one frame
    r"\b(?:doing|happen\w*|(?!(?:some|any|no|every)thing\b|(?:build|morn|even|ceil|cloth|paint|draw|wedd|r|k|str|br|s|th)ing\b)\w{2,}ing)\b",
    re.I,
)


def video_question(p: Planner, question: str) -> bool:
    """``is anyone swimming in this video?``: a question about what is done in a video of the
    conversation (video classification), rather than about what one frame shows."""
    return bool(_MOTION.search(question)) and video_source(p, question, question) is not None \
        and bool(_VIDEO_WORDS.search(question) or _named(p, question, "video"))


def video_action(p: Planner, clause: str, ctx: str, s: int, e: int) -> None:
    """``is the action in this video a high jump?``, ``which sport is played in the clip``: the
    question to a video VLM (``video-text-to-text``) when one is served, else video classification
    (names what happens in a video) of the video the request is about."""
    src = video_source(p, clause, ctx)
    if src and "video-text-to-text" in p.available:  # a video VLM watches the video with the question
        sentence = next((x for x in re.split(r"(?<=[.!?;])\s+", ctx) if clause in x), clause)
        p.add("video-text-to-text", {"video": src[0], "text": " ".join(sentence.split())[:300]}, src[1], "text")
    elif src:
        p.add("video-classification", {"video": src[0]}, src[1], "text")


_AUDIO_WORDS = re.compile(r"\b(?:" + KIND_WORDS["audio"] + r"|noise|\w+\.(?:wav|mp3|ogg|flac|m4a))\b", re.I)


def edit_images(p: Planner, clause: str, ctx: str, s: int, e: int) -> None:
    """``remove the umbrella from the photo``, ``replace the dog with a lion``: image-to-image of
    each image the clause is about, with the clause as the instruction (no inpainting task is
    served; image-to-image edits as a text says). Nothing when the clause is about a sound."""
    if not (p.of_kind("image") or "image" in p.produced) or _AUDIO_WORDS.search(clause):
        return
    instruction = " ".join(clause.split()).strip(" .,")
    for val, deps in image_sources(p, clause, ctx):
        p.add("image-to-image", {"image": val, "text": instruction}, deps, "image")


_MEDIA_WORDS = re.compile(
    r"\b(?:" + "|".join(KIND_WORDS.values()) + r"|clip|footage)s?\b"
    + r"|\b[\w-]+\.(?:png|jpe?g|gif|webp|bmp|wav|mp3|ogg|flac|m4a|mp4|webm|mov|avi|mkv|txt|csv|pdf)\b"
    + r"|\b(?:image|audio|video|text)-\d+\b",
    re.I,
)
_DEICTIC = re.compile(r"\b(?:this|that|these|those|here|it|he|she|they|him|her|them|the\s+speaker)\b", re.I)
_WRITING = re.compile(
    r"\b(?:write|compose|draft|create|generate|make|produce|build|code|come\s+up\s+with|brainstorm|suggest|"
    r"list|outline|give\s+me|tell\s+me\s+(?:a|an|some|\d+)\s)",
    re.I,
)


def text_for_the_controller(p: Planner) -> None:
    """A request that names no file and found no model task is text the controller answers
    itself: ``text-generation`` when it asks for something written ("write an email", "create an
    HTML page"), else ``conversational`` (a question, a remark). Nothing when it speaks of a
    file, a picture, a recording or a video: a real controller would have used one."""
    if p.tasks or SMALL_TALK.search(p.text) or _MEDIA_WORDS.search(p.text):
        return
    if p.document(p.text) or (p.user_files() and (p.first_turn or _DEICTIC.search(p.text))):
        return  # "summarize this document", "what's he saying?", a file sent with it: about a file
    task = "text-generation" if _WRITING.search(p.text) else "conversational"
    p.add(task, {"text": p.text.strip()}, [], "text")


def _clip(s: str, n: int) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 1] + "…"


def decline(request: str, resources: list[dict[str, Any]]) -> str:
    """The stand-in's answer when its keywords find no task for ``request``: one sentence that it
    is the offline stand-in and what a real controller model would do (sent instead of a plan).

    Args:
        request: the user's text.
        resources: the conversation's files ``{"id", "kind", "name"?, ...}``.

    Returns:
        Prose with no JSON in it (no braces or brackets), at most about 450 characters (the
        product quotes up to :data:`pipeline.planning.MAX_SAID`), so the product reads it as a
        controller that declined to plan.
    """
    files = [str(r.get("name") or r.get("id")) for r in resources if r.get("origin", "user") == "user"][-3:]
    with_files = f" with {_clip(', '.join(files), 60)}" if files else ""
    sentence = (
        f"The offline stand-in controller (--sandbox) plans with keywords, not a language model, and found no "
        f"task for “{_clip(request, 80)}”{with_files}, so nothing was run; a real controller model would plan it "
        "as tasks on the files it names. Plainer words work here, e.g. “how many cats are in photo.png”, "
        "“remove the umbrella from the photo”."
    )
    return sentence.replace("{", "(").replace("}", ")").replace("[", "(").replace("]", ")")


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


_TOOL_LINE = re.compile(r"^- (mcp\.[a-z0-9][a-z0-9.-]*): .*; args (.*)$", re.M)
_MEDIA = ("image", "audio", "video")


def tool_args(messages: list[Any]) -> dict[str, list[str]]:
    """MCP task name → its argument keys (``"text?"`` when optional), read from the planning
    prompt's task list (the system message)."""
    system = next((m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "system"), "")
    text = system if isinstance(system, str) else ""
    return {m.group(1): [a.strip() for a in m.group(2).split(",") if a.strip()] for m in _TOOL_LINE.finditer(text)}


def plan_tools(p: Planner, tools: dict[str, list[str]]) -> None:
    """Add the tools the request names, in the order it names them, each taking its files from
    what the clause refers to and its text from a quoted passage (else the request)."""
    masked = mask_quotes(p.text)
    found = []
    for task, keys in tools.items():
        words = task.rsplit(".", 1)[-1].split("-")
        m = re.search(r"\b" + r"[-_ ]".join(re.escape(w) for w in words) + r"(?:s|ed|ing)?\b", masked, re.I)
        if m and task in p.available:
            found.append((m.start(), m.end(), task, keys))
    for start, end, task, keys in sorted(found):
        clause = p.text[start:clause_end(p.text, end)]
        args: dict[str, str] = {}
        deps: list[int] = []
        usable = True
        for key in keys:
            name, optional = key.rstrip("?"), key.endswith("?")
            if name in _MEDIA:
                src = p.source(name, clause) or p.source(name, p.text)
                if src is None:
                    usable = usable and optional
                    continue
                args[name], deps = src[0], deps + src[1]
            elif not optional:
                q = quotes(clause) or quotes(p.text)
                args[name] = q[0][2] if q else p.text.strip()
        if usable:
            p.add(task, args, deps, next((k for k in _MEDIA if k in args), "text"))
