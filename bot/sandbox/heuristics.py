"""Deterministic stand-ins for the controller LLM's four jobs (pure functions, no I/O).

The sandbox controller (:mod:`bot.sandbox.controller`) answers every controller call with these
functions so that ``hugginggpt run --sandbox`` and the tests work without credentials. They are a
*labelled* stand-in: a keyword planner, a word-overlap model picker and a template writer, not a
language model. Stage names follow HuggingGPT (Shen et al., NeurIPS 2023, §3): task planning,
model selection, response generation; plus ``controller-task`` for the text tasks the controller
serves itself.

Plans use the paper's record shape (§3.1): ``{"task", "id", "dep", "args"}`` with ``dep == [-1]``
when a task needs nothing and ``"<resource>-N"`` standing for the output of task ``N``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

LABEL = "*(Sandbox stand-in controller: answers are assembled from stand-in model outputs.)*"
"""First line of every response-generation answer, so nobody mistakes it for a real LLM."""

# ----------------------------------------------------------------------------------------------
# Text helpers

_QUOTE_RE = re.compile(r'"([^"\n]+)"|“([^”]+)”|‘([^’]+)’|(?<![A-Za-z0-9])\'((?:[^\'\n]|(?<=[A-Za-z])\'(?=[A-Za-z]))+?)\'(?![A-Za-z0-9])')

_BOUNDARY_RE = re.compile(
    r"[.;!?](?=\s|$)"
    r"|,\s*(?:and\s+)?(?:then|after\s+that|afterwards|finally|next|but|and)\b"
    r"|\s(?:and\s+)?then\b"
    r"|\s(?:after\s+that|afterwards|finally|also|additionally|lastly)\b"
    r"|\sand\s+(?=(?:also\s+)?(?:tell|describe|classify|detect|read|say|speak|make|turn|translate|summari[sz]e"
    r"|transcribe|answer|segment|estimate|find|count|identify|what|which|how|give|show|generate|create"
    r"|draw|convert|caption|edit|change|label|extract|compare|analy[sz]e)\b)",
    re.IGNORECASE,
)


_FILE_NAME_RE = re.compile(r"^[\w.-]+\.(?:png|jpe?g|gif|webp|bmp|wav|mp3|ogg|flac|m4a|opus|mp4|webm|mov|avi|mkv|txt)$", re.I)


def quotes(text: str) -> list[tuple[int, int, str]]:
    """Quoted passages of ``text`` as ``(start, end, inner text)``, in order.

    Double quotes, curly quotes and single quotes that are not apostrophes (``I'd`` is not a quote).
    A quoted file name (``'example.jpg'``) is a reference, not content, and is left out.
    """
    out = []
    for m in _QUOTE_RE.finditer(text):
        inner = next(g for g in m.groups() if g is not None)
        if inner.strip() and not _FILE_NAME_RE.match(inner.strip()):
            out.append((m.start(), m.end(), inner.strip()))
    return out


def _masked(text: str) -> str:
    """``text`` with every quoted passage blanked out (same length), so boundaries ignore quotes."""
    chars = list(text)
    for s, e, _ in quotes(text):
        for i in range(s + 1, e - 1):
            chars[i] = "_"
    return "".join(chars)


def clause_end(text: str, start: int) -> int:
    """Index where the clause that contains ``start`` ends (next sentence or ``then`` boundary)."""
    m = _BOUNDARY_RE.search(_masked(text), start)
    return m.start() if m else len(text)


def first_sentence(text: str, limit: int = 200) -> str:
    """The first sentence of ``text`` (at most ``limit`` characters, cut at a word)."""
    text = " ".join(text.split())
    m = re.search(r"(?<=[.!?])\s", text)
    s = text[: m.start()] if m else text
    if len(s) > limit:
        s = s[:limit].rsplit(" ", 1)[0] + "…"
    return s


# ----------------------------------------------------------------------------------------------
# Task planning (paper §3.1)

KIND_WORDS: dict[str, str] = {
    "image": r"image|picture|photo|photograph|pic|drawing|painting|illustration|screenshot|img",
    "audio": r"audio|recording|voice\s*(?:message|note|memo)?|sound|clip|speech|song|track",
    "video": r"video|movie|film|footage",
}


_ORDINALS = {"first": 0, "1st": 0, "second": 1, "2nd": 1, "third": 2, "3rd": 2, "fourth": 3, "4th": 3}

LANGUAGES = (
    "english", "french", "german", "spanish", "italian", "portuguese", "dutch", "russian", "chinese",
    "japanese", "korean", "arabic", "hindi", "turkish", "polish", "swedish", "greek",
)

_SMALL_TALK = re.compile(
    r"^\s*(hi|hello|hey|yo|good (morning|afternoon|evening)|thanks?|thank you|how are you|who are you"
    r"|what can you do|what('?s| is) your name|help)\b",
    re.IGNORECASE,
)


@dataclass
class _Planner:
    """State of one planning run: the request, its resources and the tasks built so far."""

    text: str
    resources: list[dict[str, Any]]
    available: set[str]
    tasks: list[dict[str, Any]] = field(default_factory=list)
    produced: dict[str, int] = field(default_factory=dict)  # kind -> id of the newest producer
    claimed: list[tuple[int, int]] = field(default_factory=list)

    # -- resources -------------------------------------------------------------------------
    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.resources if r.get("kind") == kind]

    def explicit(self, span: str, kind: str) -> dict[str, Any] | None:
        """A resource of ``kind`` named in ``span`` by id (``image-2``) or file name (``chelsea.png``)."""
        low = span.lower()
        best: tuple[int, dict[str, Any]] | None = None
        for r in self.of_kind(kind):
            for token in (r.get("id"), r.get("name")):
                if not token:
                    continue
                m = re.search(r"(?<![\w.-])" + re.escape(str(token).lower()) + r"(?![\w-])", low)
                if m and (best is None or m.start() < best[0]):
                    best = (m.start(), r)
        return best[1] if best else None

    def ordinal(self, span: str, kind: str) -> dict[str, Any] | None:
        """``the first/second photo`` (oldest first), ``the previous/earlier/other photo``."""
        items = self.of_kind(kind)
        if not items:
            return None
        words = KIND_WORDS[kind]
        m = re.search(r"\b(first|1st|second|2nd|third|3rd|fourth|4th)\s+(?:one|" + words + r")s?\b", span, re.I)
        if m:
            i = _ORDINALS[m.group(1).lower()]
            return items[i] if i < len(items) else None
        m = re.search(r"\b(previous|earlier|other|older|original|before)\s+(?:one|" + words + r")s?\b", span, re.I)
        if m or re.search(r"\b(?:" + words + r")s?\s+(?:from\s+)?before\b", span, re.I):
            user = [r for r in items if not str(r.get("origin", "user")).startswith("task:")]
            if m and m.group(1).lower() == "original" and user:
                return user[-1]
            return items[-2] if len(items) >= 2 else items[-1]
        return None

    def source(self, kind: str, clause: str) -> tuple[str, list[int]] | None:
        """Where a task of this clause takes its ``kind`` input from: ``(arg value, deps)``.

        Order: a resource named in the clause; ``generated``/``that`` → the plan's own output or
        the newest generated resource; an earlier task of this plan producing ``kind``; an
        ordinal (``the second photo``); a resource named elsewhere in the request; the newest
        resource of that kind. ``None`` when nothing fits.
        """
        r = self.explicit(clause, kind)
        if r:
            return r["id"], []
        words = KIND_WORDS[kind]
        generated = re.search(r"\b(generated|new|resulting|result|created|edited|output)\b", clause, re.I) or re.search(
            r"\bth(?:at|ose)\s+(?:" + words + r")", clause, re.I
        )
        if kind in self.produced:
            r = self.ordinal(clause, kind)
            if r:
                return r["id"], []
            pid = self.produced[kind]
            return f"<resource>-{pid}", [pid]
        if generated:
            gen = [r for r in self.of_kind(kind) if str(r.get("origin", "")).startswith("task:")]
            if gen:
                return gen[-1]["id"], []
        r = self.ordinal(clause, kind) or self.explicit(self.text, kind)
        if r:
            return r["id"], []
        items = self.of_kind(kind)
        return (items[-1]["id"], []) if items else None

    # -- tasks -----------------------------------------------------------------------------
    def add(self, task: str, args: dict[str, str], deps: list[int], produces: str | None) -> int | None:
        if task not in self.available:
            return None
        for t in self.tasks:
            if t["task"] == task and t["args"] == args:
                return t["id"]  # the same task asked twice: one node serves both
        tid = len(self.tasks)
        self.tasks.append({"task": task, "id": tid, "dep": sorted(set(deps)) or [-1], "args": args})
        if produces:
            self.produced[produces] = tid
        return tid

    def transcribe_first(self, clause: str) -> int | None:
        """``summarize this recording``: add speech recognition for the audio the clause names."""
        if not re.search(r"\b(?:" + KIND_WORDS["audio"] + r")\b", clause, re.I) or not self.of_kind("audio"):
            return None
        src = self.source("audio", clause)
        if src is None:
            return None
        return self.add("automatic-speech-recognition", {"audio": src[0]}, src[1], "text")

    def text_source(self, clause: str, after: str | None = None) -> tuple[str, list[int]]:
        """Text input of a clause: a quoted passage, else an earlier text output, else words."""
        q = quotes(clause)
        if q:
            return max(q, key=lambda t: len(t[2]))[2], []
        if "text" in self.produced:
            pid = self.produced["text"]
            return f"<resource>-{pid}", [pid]
        spoken = self.transcribe_first(clause)
        if spoken is not None:
            return f"<resource>-{spoken}", [spoken]
        q = quotes(self.text)
        if q:
            return max(q, key=lambda t: len(t[2]))[2], []
        if after:
            m = re.search(after, self.text, re.I)
            if m:
                rest = self.text[m.end() :].strip(" :,-\n")
                if rest:
                    return rest, []
        return self.text.strip(), []


def _strip_lead(s: str) -> str:
    s = s.strip(" \t\n:,-")
    s = re.sub(r"^(?:me|us)\s+", "", s, flags=re.I)
    s = re.sub(r"^(?:of|showing|depicting|that shows|which shows|with|representing|about|featuring|for)\s+", "", s, flags=re.I)
    return s.strip(" \t\n:,-\"'")


def _description(p: _Planner, start: int, end: int) -> str:
    """The thing to draw: a quote in the clause, else the clause words after the trigger."""
    clause = p.text[start:clause_end(p.text, end)]
    q = quotes(clause)
    if q:
        return q[0][2]
    return _strip_lead(p.text[end:clause_end(p.text, end)])


# Intent table: (name, pattern). Earlier entries win when matches overlap.
_INTENTS: list[tuple[str, str]] = [
    ("canny_draw", r"\b(?:draw|generate|create|make|paint|render|produce)\b[^.?!;]{0,80}?\b(?:from|using|based on|following|with)\s+(?:the\s+|its\s+|their\s+|these\s+)?(?:edges?|outlines?|contours?|canny|edge\s+map)\b"),
    ("detail", r"\b(?:describe|tell me about|caption|analy[sz]e)\b[^.?!;]{0,60}?\b(?:as much detail|in (?:great |full |more |as much )?detail|everything|all you can|thorough\w*|exhaustive\w*)"),
    ("detail", r"\b(?:tell me )?everything (?:about|in) (?:this|the|that|it)\b"),
    ("asr", r"\b(?:transcri\w+|what (?:does|did) (?:it|this|that|the \w+|s?he|they) say|what (?:is|was) (?:being )?said|speech[- ]to[- ]text|(?:convert|turn)\s+(?:the\s+|this\s+|my\s+)?(?:audio|voice|speech|recording)[\w\s]{0,20}?\s+(?:in)?to\s+text|recogni[sz]e (?:the )?speech)"),
    ("tts", r"\b(?:read\s+(?:it|this|that|them|the\s+\w+|\S+)?\s*(?:back\s+)?(?:aloud|out\s+loud|out|back)|(?:in|with)\s+a\s+(?:different|another|new|female|male|nice)\s+voice|text[- ]to[- ]speech|speak\s+(?:it|this|that)|say\s+(?=[\"'“])|(?:turn|convert|make)\b[^.?!;]{0,40}?\b(?:into|to)\s+(?:an?\s+)?(?:speech|audio|voice)|audio\s+(?:response|version)|voice-?over|pronounce)"),
    ("edit", r"\b(?:make|turn)\s+(?:it|this|that|them|the\s+(?:" + KIND_WORDS["image"] + r")|this\s+(?:" + KIND_WORDS["image"] + r")|[\w.-]+\.(?:png|jpe?g|webp))\s+(?!into an? (?:speech|audio))"),
    ("edit", r"\b(?:edit|modify|transform|colou?ri[sz]e|recolou?r|black and white|grayscale|greyscale|sepia|stylize|cartoonify)\w*\b"),
    ("edit", r"\b(?:change|replace|remove|add)\s+(?:the\s+|a\s+|an\s+)?(?:\w+\s+){0,2}(?:background|sky|colou?rs?|hair|style|weather|season|lighting)\b"),
    ("video", r"\b(?:generate|create|make|produce|render|animate)\b[^.?!;]{0,30}?\b(?:video|clip|animation|movie)s?\b"),
    ("generate", r"\b(?:generate|create|make|produce|render|design|give me|show me)\b\s+(?:me\s+)?(?:an?\s+|some\s+|the\s+|one\s+|two\s+|\d+\s+)?(?:new\s+|\w+\s+){0,2}?(?:image|picture|photo|photograph|drawing|painting|illustration|artwork|portrait|poster|logo|wallpaper|sketch)s?\b"),
    ("generate", r"\b(?:draw|paint|sketch|illustrate)\b(?!\s+(?:a\s+)?(?:conclusion|attention|bounding))"),
    ("canny", r"\b(?:edges?|edge\s+map|canny|outlines?|contours?)\b"),
    ("pose", r"\b(?:pose|poses|skeleton|keypoints?)\b"),
    ("depth", r"\bdepth\b"),
    ("segment", r"\b(?:segment\w*|masks?|panoptic)\b"),
    ("detect", r"\b(?:detect\w*|locate|count|bounding\s+box(?:es)?|object\s+detection|how\s+many|what\s+objects|which\s+objects|(?:find|identify|label|list)\s+(?:all\s+)?(?:the\s+)?(?:objects|things|items|people|persons))\b"),
    ("classify", r"\b(?:what|which)\s+(?:breed|kind|type|species|sort|category|class|model|make)\b|\bbreed\b|\bclassif\w+(?!\s+(?:the\s+)?(?:tokens|entities|words))|\bcategori[sz]\w*|\bsentiment|\bemotions?\b"),
    ("caption", r"\b(?:describe|caption\w*|what(?:'s| is)\s+(?:in|on|shown\s+in)\b|what\s+do\s+you\s+see|what\s+does\s+(?:this|the|that|it)\s+(?:\w+\s+)?(?:show|depict)|tell\s+me\s+about\s+(?:this|the|that)\s+(?:" + KIND_WORDS["image"] + r")|extract\s+(?:the\s+)?text|read\s+the\s+text|ocr)\b"),
    ("summarize", r"\b(?:summari[sz]\w*|summary|tl;?dr|shorten)\b"),
    ("translate", r"\btranslat\w+\b"),
    ("tokens", r"\b(?:named\s+entit\w+|entities|tokens?|parts?\s+of\s+speech|ner)\b"),
    ("rewrite", r"\b(?:paraphrase|rewrite|rephrase|grammar|proofread|correct)\w*\b"),
    ("write", r"\b(?:write|compose|continue)\b\s+(?:me\s+)?(?:an?\s+|the\s+|some\s+)?(?:\w+\s+)?(?:story|poem|text|paragraph|essay|letter|haiku|article|song|continuation|it)\b"),
    ("enhance", r"\b(?:denois\w*|noise|enhance\s+(?:the\s+)?(?:audio|speech|sound|voice|recording)|separate)\b"),
    ("qa", r"\banswer\b|\?"),
]
_COMPILED = [(name, re.compile(p, re.I)) for name, p in _INTENTS]

_VISUAL_WORDS = re.compile(
    r"\b(?:doing|wearing|holding|colou?r|see|seen|shown|visible|look|looks|background|foreground|left|right|"
    r"there|sitting|standing|picture|photo|image|pic|this|it|he|she|they|in it)\b",
    re.I,
)


def _intent_matches(text: str) -> list[tuple[str, int, int]]:
    """Non-overlapping intent matches ``(name, start, end)`` in text order (quotes excluded)."""
    masked = _masked(text)
    taken: list[tuple[int, int]] = []
    found: list[tuple[str, int, int]] = []
    for name, rx in _COMPILED:
        for m in rx.finditer(masked):
            s, e = m.start(), m.end()
            if e <= s:
                continue
            if any(s < te and ts < e for ts, te in taken):
                continue
            if name in ("generate", "video"):
                # the description belongs to the generator: keywords inside it are not intents
                e2 = clause_end(text, e)
                if any(s < te and ts < e2 for ts, te in taken):
                    e2 = e
                taken.append((s, e2))
            else:
                taken.append((s, e))
            found.append((name, s, e))
    found.sort(key=lambda t: t[1])
    return found


def plan_tasks(text: str, resources: list[dict[str, Any]], available_tasks: list[str]) -> list[dict[str, Any]]:
    """Plan ``text`` as a task graph with keywords (the sandbox's stand-in for §3.1 task planning).

    Args:
        text: the user's request.
        resources: files of the conversation, ``{"id", "kind", "name"?, "origin", ...}``, newest last.
        available_tasks: task names that may appear in the plan; other tasks are left out.

    Returns:
        Tasks ``[{"task", "id", "dep", "args"}]`` with ids ``0..n-1`` in order, ``dep`` ``[-1]``
        when none and every dependency earlier than the task; ``[]`` for chit-chat and plain
        questions. Deterministic: the same input always gives the same plan.
    """
    text = str(text or "")
    res = [r for r in resources if isinstance(r, dict) and r.get("id") and r.get("kind")]
    p = _Planner(text=text, resources=res, available=set(available_tasks))
    if not text.strip():
        return []
    matches = _intent_matches(text)
    others = [m for m in matches if m[0] != "qa"]
    if _SMALL_TALK.search(text) and not others:
        return []
    explicit_question = any(q[2].rstrip().endswith("?") for q in quotes(text))
    handled_qa = bool(others) and not explicit_question
    last_clause_end: dict[str, int] = {}
    for name, s, e in matches:
        if s < last_clause_end.get(name, -1):
            continue  # the same intent said twice in one clause ("read it back in a new voice")
        last_clause_end[name] = clause_end(text, e)
        clause = text[s:clause_end(text, e)]
        # Include the words before the trigger up to the previous boundary ("this picture: describe it").
        head = text[max(0, s - 60) : s]
        ctx = head + clause
        handler = _HANDLERS.get(name)
        if name == "qa":
            if handled_qa:
                continue
            handled_qa = True
        if handler:
            handler(p, clause, ctx, s, e)
    return p.tasks


def _image(p: _Planner, clause: str, ctx: str) -> tuple[str, list[int]] | None:
    return p.source("image", clause) or p.source("image", ctx)


def _h_detail(p, clause, ctx, s, e):
    src = _image(p, clause, ctx)
    if not src:
        return
    (val, deps) = src
    before = p.produced.copy()
    first = None
    for task in ("image-to-text", "object-detection", "image-classification"):
        tid = p.add(task, {"image": val}, deps, None)
        if first is None and tid is not None:
            first = tid
    p.produced = before
    if first is not None:
        p.produced["text"] = first


def _single_image(task: str, produces: str | None):
    def h(p, clause, ctx, s, e):
        src = _image(p, clause, ctx)
        if src:
            p.add(task, {"image": src[0]}, src[1], produces)

    return h


def _h_caption(p, clause, ctx, s, e):
    if not (p.of_kind("image") or "image" in p.produced):
        return
    _single_image("image-to-text", "text")(p, clause, ctx, s, e)


def _h_classify(p, clause, ctx, s, e):
    word = p.text[s:e].lower()
    if ("sentiment" in word or "emotion" in word) and p.of_kind("audio") and re.search(r"audio|speech|voice|recording", ctx, re.I):
        src = p.source("audio", clause) or p.source("audio", ctx)
        if src:
            p.add("audio-classification", {"audio": src[0]}, src[1], "text")
        return
    text_words = re.search(r"\b(?:text|sentence|review|sentiment|tweet|comment|message|paragraph)\b", ctx, re.I)
    if (p.of_kind("image") or "image" in p.produced) and not (text_words and quotes(ctx)):
        _single_image("image-classification", "text")(p, clause, ctx, s, e)
    elif p.of_kind("audio") and re.search(r"audio|sound|recording|speech", ctx, re.I):
        src = p.source("audio", clause) or p.source("audio", ctx)
        if src:
            p.add("audio-classification", {"audio": src[0]}, src[1], "text")
    elif quotes(ctx) or "text" in p.produced or text_words:
        val, deps = p.text_source(clause)
        p.add("text-classification", {"text": val}, deps, "text")


def _h_generate(p, clause, ctx, s, e):
    desc = _description(p, s, e) or _strip_lead(clause[e - s :]) or "a picture"
    if desc.lower() in ("it", "this", "that") and "text" in p.produced:
        desc, deps = f"<resource>-{p.produced['text']}", [p.produced["text"]]
    else:
        deps = []
    p.add("text-to-image", {"text": desc}, deps, "image")


def _h_video(p, clause, ctx, s, e):
    desc = _description(p, s, e)
    deps: list[int] = []
    if not desc or desc.lower() in ("it", "this", "that"):
        desc, deps = p.text_source(clause)
    p.add("text-to-video", {"text": desc}, deps, "video")


def _h_edit(p, clause, ctx, s, e):
    if not (p.of_kind("image") or "image" in p.produced):
        return
    src = _image(p, clause, ctx)
    if not src:
        return
    q = quotes(clause)
    instruction = q[0][2] if q else " ".join(clause.split()).strip(" .,")
    p.add("image-to-image", {"image": src[0], "text": instruction}, src[1], "image")


def _h_canny_draw(p, clause, ctx, s, e):
    src = _image(p, clause, ctx)
    if not src:
        return
    m = re.search(
        r"\b(?:draw|generate|create|make|paint|render|produce)\s+(?:me\s+)?(.*?)\s+(?:from|using|based on|following|with)\s",
        clause,
        re.I,
    )
    desc = _strip_lead(m.group(1)) if m else ""
    desc = re.sub(r"^(?:an?\s+)?(?:new\s+)?(?:image|picture|drawing|painting)\s*(?:of\s+)?", "", desc, flags=re.I) or "a new picture"
    q = quotes(clause)
    if q:
        desc = q[0][2]
    ctl = p.add("canny-control", {"image": src[0]}, src[1], "image")
    if ctl is not None:
        p.add("canny-text-to-image", {"image": f"<resource>-{ctl}", "text": desc}, [ctl], "image")


def _h_asr(p, clause, ctx, s, e):
    src = p.source("audio", clause) or p.source("audio", ctx)
    if src:
        p.add("automatic-speech-recognition", {"audio": src[0]}, src[1], "text")


def _h_tts(p, clause, ctx, s, e):
    q = quotes(clause)
    if q:
        val, deps = q[0][2], []
    elif "text" in p.produced:
        val, deps = f"<resource>-{p.produced['text']}", [p.produced["text"]]
    else:
        m = re.search(r"\b(?:say|aloud|out loud|voice)\s*:\s*(.+)|\bsay\s+(.+)", clause, re.I)
        if not m and quotes(p.text):
            val, deps = max(quotes(p.text), key=lambda t: len(t[2]))[2], []
            p.add("text-to-speech", {"text": val}, deps, "audio")
            return
        if not m:
            return  # nothing to read: a text-to-speech task with made-up text would mislead
        val, deps = (m.group(1) or m.group(2)).strip(" ."), []
        if not val:
            return
    p.add("text-to-speech", {"text": val}, deps, "audio")


def _h_enhance(p, clause, ctx, s, e):
    src = p.source("audio", clause) or p.source("audio", ctx)
    if src:
        p.add("audio-to-audio", {"audio": src[0]}, src[1], "audio")


def _text_task(task: str, after: str | None = None, wrap: Callable[[str, str], str] | None = None):
    def h(p, clause, ctx, s, e):
        val, deps = p.text_source(clause, after)
        if wrap:
            val = wrap(val, clause)
        p.add(task, {"text": val}, deps, "text")

    return h


def _target_language(val: str, clause: str) -> str:
    m = re.search(r"\b(?:in|into|to)\s+(" + "|".join(LANGUAGES) + r")\b", _masked(clause), re.I)
    return f"{val} (to {m.group(1).capitalize()})" if m else val


def _h_qa(p, clause, ctx, s, e):
    """A question: about an image (VQA) or about a quoted passage (question answering)."""
    text = p.text
    qs = quotes(text)
    question_quotes = [q for q in qs if q[2].rstrip().endswith("?")]
    if _SMALL_TALK.search(text) and not question_quotes:
        return
    if question_quotes:
        question = question_quotes[0][2]
    else:
        sentences = re.findall(r"[^.!?]*\?", _masked(text))
        if not sentences:
            return
        m = re.search(re.escape(sentences[0].strip()), _masked(text))
        question = text[m.start() : m.end()].strip() if m else sentences[0].strip()
        wh = re.search(r"\b(?:what|who|whom|whose|when|where|why|how|which)\b[^?]*\?", _masked(question), re.I)
        if wh:
            question = question[wh.start() : wh.end()]
    passages = [q for q in qs if not q[2].rstrip().endswith("?") and len(q[2]) > 15]
    has_image = bool(p.of_kind("image")) or "image" in p.produced
    if has_image and (_VISUAL_WORDS.search(question) or question_quotes) and not passages:
        src = p.source("image", question) or p.source("image", text)
        if src:
            p.add("visual-question-answering", {"image": src[0], "text": question}, src[1], "text")
        return
    if passages:
        p.add("question-answering", {"text": question, "context": passages[0][2]}, [], "text")
    elif "text" in p.produced and question_quotes:
        pid = p.produced["text"]
        p.add("question-answering", {"text": question, "context": f"<resource>-{pid}"}, [pid], "text")


_HANDLERS: dict[str, Callable[..., None]] = {
    "detail": _h_detail,
    "caption": _h_caption,
    "detect": _single_image("object-detection", None),
    "classify": _h_classify,
    "segment": _single_image("image-segmentation", None),
    "depth": _single_image("depth-estimation", "image"),
    "canny": _single_image("canny-control", "image"),
    "pose": _single_image("openpose-control", "image"),
    "canny_draw": _h_canny_draw,
    "generate": _h_generate,
    "video": _h_video,
    "edit": _h_edit,
    "asr": _h_asr,
    "tts": _h_tts,
    "enhance": _h_enhance,
    "summarize": _text_task("summarization", r"\b(?:summari[sz]\w*|summary of|tl;?dr)\b"),
    "translate": _text_task("translation", r"\btranslat\w+\b", _target_language),
    "tokens": _text_task("token-classification"),
    "rewrite": _text_task("text2text-generation", r"\b(?:paraphrase|rewrite|rephrase)\w*\b"),
    "write": _text_task("text-generation", r"\b(?:write|compose|continue)\b"),
    "qa": _h_qa,
}


# ----------------------------------------------------------------------------------------------
# Model selection (paper §3.2)

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an the of to in on and or for with is are be this that it by from as at".split())


def _words(s: str) -> set[str]:
    return {w for w in _WORD.findall(s.lower()) if w not in _STOP and len(w) > 1}


def select_model(task: dict[str, Any], candidates: list[dict[str, Any]]) -> dict[str, str]:
    """Pick one candidate for ``task`` by word overlap with its description (stand-in for §3.2).

    Args:
        task: ``{"id", "task", "args"}``.
        candidates: ``[{"id", "description"?, "downloads"?, "likes"?, ...}]``, best-ranked first.

    Returns:
        ``{"id": <a candidate id>, "reason": "[sandbox] ..."}``; the first candidate when no
        description shares a word with the task (ties also go to the earlier candidate).

    Raises:
        ValueError: ``candidates`` is empty or has no ids.
    """
    ids = [c for c in candidates if isinstance(c, dict) and c.get("id")]
    if not ids:
        raise ValueError("model-selection needs at least one candidate with an id")
    want = _words(str(task.get("task", "")).replace("-", " "))
    for v in (task.get("args") or {}).values():
        if isinstance(v, str) and not v.startswith("<resource>") and not re.fullmatch(r"[a-z]+-\d+", v):
            want |= _words(v)
    best, best_score, best_common = ids[0], -1, set()
    for c in ids:
        have = _words(f"{c.get('id', '')} {c.get('description', '')} {c.get('task', '')} {c.get('pipeline_tag', '')}")
        common = want & have
        if len(common) > best_score:
            best, best_score, best_common = c, len(common), common
    if best_common:
        reason = f"[sandbox] its description shares the most words with the task ({', '.join(sorted(best_common)[:5])})."
    else:
        reason = "[sandbox] no description matched the task words better, so the top-ranked candidate was kept."
    return {"id": str(best["id"]), "reason": reason}


# ----------------------------------------------------------------------------------------------
# Response generation (paper §3.4)


def _clip(s: str, n: int = 300) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 1] + "…"


def compose_response(
    request: str, plan: list[dict[str, Any]], selections: dict[str, Any], results: dict[str, Any]
) -> str:
    """Write the answer from the results (stand-in for §3.4 response generation).

    Args:
        request: the user's text.
        plan: tasks ``[{"task", "id", "dep", "args"}]``.
        selections: task id (str or int) to ``{"model", "reason"}``.
        results: task id to ``{"task", "status", "text"?, "files": [{"id","kind","description"}],
            "data"?, "error"?}``.

    Returns:
        Markdown: :data:`LABEL`, a direct answer quoting text outputs, naming generated files and
        failures, then a "How I did it" section (one line per task: task, model, outcome).
    """
    sel = {str(k): v for k, v in (selections or {}).items()}
    res = {str(k): v for k, v in (results or {}).items()}
    lines = [LABEL, ""]
    if not plan:
        lines.append(_direct_answer(request))
        return "\n".join(lines)
    answer: list[str] = []
    failed: list[str] = []
    for t in plan:
        tid = str(t.get("id"))
        r = res.get(tid) or {}
        name = t.get("task", "task")
        status = r.get("status", "missing")
        if status == "ok":
            if r.get("text"):
                answer.append(f"- **{name}**: “{_clip(r['text'])}”")
            files = r.get("files") or []
            if files:
                named = ", ".join(f"`{f.get('id')}` ({f.get('kind', 'file')})" for f in files)
                answer.append(f"- **{name}** produced {named}, attached below.")
            if not r.get("text") and not files:
                data = r.get("data")
                answer.append(f"- **{name}**: {_clip(json.dumps(data)) if data else 'finished with no output.'}")
        elif status == "skipped":
            failed.append(f"- **{name}** was skipped: {r.get('error') or 'a task it needed did not finish.'}")
        else:
            failed.append(f"- **{name}** failed: {r.get('error') or 'no result came back.'}")
    lines.append(f"Here is what I found for “{_clip(request, 120)}”:")
    lines.extend(answer or ["- No task produced an output."])
    if failed:
        lines.append("")
        lines.append("What did not work:")
        lines.extend(failed)
    lines += ["", "**How I did it**"]
    for t in plan:
        tid = str(t.get("id"))
        s = sel.get(tid) or {}
        r = res.get(tid) or {}
        deps = [d for d in t.get("dep", []) if d != -1]
        after = f" after task {', '.join(map(str, deps))}" if deps else ""
        lines.append(
            f"{tid}. `{t.get('task')}` with `{s.get('model', 'no model')}`{after}: {r.get('status', 'no result')}."
        )
    return "\n".join(lines)


def _direct_answer(request: str) -> str:
    req = request.strip()
    if _SMALL_TALK.search(req):
        if re.search(r"\bthank", req, re.I):
            return "You're welcome!"
        if re.search(r"what can you do|help|who are you", req, re.I):
            return (
                "Hello! I plan your request as AI tasks (captioning, object detection, image generation, "
                "speech recognition, text to speech and more), run Hugging Face models for them and "
                "summarise the results. Send a request, with a picture or a recording if you like."
            )
        return "Hello! How can I help you today? You can send a picture, a recording or a request."
    return (
        f"You asked: “{_clip(req, 200)}”. No model task was needed for this, and the sandbox stand-in "
        "cannot answer general questions itself; a real controller model would answer here."
    )


# ----------------------------------------------------------------------------------------------
# Text tasks the controller serves itself


def controller_task(task: str, text: str, context: str | None = None) -> str:
    """Do a controller-served text task with simple rules; the result is labelled ``[sandbox]``.

    Args:
        task: ``summarization | translation | conversational | text-generation |
            text2text-generation``.
        text: the input text.
        context: optional extra text (ignored by most tasks).

    Returns:
        Summary: the first sentence, shortened; translation: ``"[sandbox translation] " + text``;
        generation: the text and a short continuation; conversational: an acknowledgement.

    Raises:
        ValueError: unknown ``task``.
    """
    text = str(text or "").strip()
    if task == "summarization":
        return f"[sandbox] {first_sentence(text, 160)}"
    if task == "translation":
        return f"[sandbox translation] {text}"
    if task == "text-generation":
        return f"[sandbox] {text} … and the story went on from there."
    if task == "text2text-generation":
        return f"[sandbox] {first_sentence(text, 300)}"
    if task == "conversational":
        return f"[sandbox] You said: “{_clip(text, 200)}”. Thanks for the message!"
    raise ValueError(f"unknown controller task {task!r}")
