"""State of one keyword-planning run: the request, its resources and the tasks built so far.

Used by :mod:`sandbox.planning` (the sandbox's stand-in for HuggingGPT §3.1 task planning).
Tasks use the paper's record shape ``{"task", "id", "dep", "args"}``; ``"<resource>-N"`` stands
for the output of task ``N``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .wording import quotes

KIND_WORDS: dict[str, str] = {  # regex alternatives naming a file of each kind
    "image": r"image|picture|photo|photograph|pic|drawing|painting|illustration|screenshot|img",
    "audio": r"audio|recording|voice\s*(?:message|note|memo)?|sound|clip|speech|song|track",
    "video": r"video|movie|film|footage",
}


DOCUMENT_WORDS = (
    r"\b(?:document|doc|file|text\s+file|article|essay|report|notes|paper|letter|csv|table|spreadsheet|"
    r"attach(?:ed|ment)|(?:this|the|that|my)\s+text)\b"
)
"""Words that refer to an attached text file."""

_ORDINALS = {"first": 0, "1st": 0, "second": 1, "2nd": 1, "third": 2, "3rd": 2, "fourth": 3, "4th": 3}

LANGUAGES = (  # target languages a translation request may name
    "english", "french", "german", "spanish", "italian", "portuguese", "dutch", "russian", "chinese",
    "japanese", "korean", "arabic", "hindi", "turkish", "polish", "swedish", "greek",
)


@dataclass
class Planner:
    """State of one planning run: the request, its resources and the tasks built so far.

    Attributes:
        text: the user's request.
        resources: the conversation's files ``{"id", "kind", "name"?, "origin", ...}``, newest last.
        available: task names (pipeline tags) that may be planned; :meth:`add` drops others.
        tasks: the plan so far, ``[{"task", "id", "dep", "args"}]`` with ids ``0..n-1``.
        produced: kind (``"image"``, ``"audio"``, ``"video"``, ``"text"``) to the id of the newest
            task of this plan that outputs it.
        first_turn: the request opens the conversation (no chat log), so every user file came
            with it: a question is about them.
    """

    text: str
    resources: list[dict[str, Any]]
    available: set[str]
    tasks: list[dict[str, Any]] = field(default_factory=list)
    produced: dict[str, int] = field(default_factory=dict)
    first_turn: bool = False

    # -- resources -------------------------------------------------------------------------
    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        """The resources of ``kind`` (``"image"``, ``"audio"``, ``"video"``), oldest first."""
        return [r for r in self.resources if r.get("kind") == kind]

    def user_files(self) -> list[dict[str, Any]]:
        """The files the user sent (not made by a task), of any kind."""
        return [r for r in self.resources if not str(r.get("origin", "user")).startswith("task:")]

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
        """Append a task (or reuse an identical one) and return its id; ``None`` if ``task`` is not
        available. ``deps`` are ids of earlier tasks; ``produces`` is the output kind, if any."""
        if task not in self.available:
            return None
        for t in self.tasks:
            if t["task"] == task and t["args"] == args:
                return t["id"]  # the same task asked twice: one node serves both
            if t["task"] == task and list(args.values()) == [f"<resource>-{t['id']}"]:
                return t["id"]  # the same task on its own output: said twice, meant once
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

    def document(self, clause: str) -> dict[str, Any] | None:
        """A text file of the conversation the clause (or the request) names by id or file name,
        or refers to as "the document", "this file", "the csv"… (the newest user text file)."""
        named = self.explicit(clause, "text") or self.explicit(self.text, "text")
        if named:
            return named
        files = [r for r in self.of_kind("text") if not str(r.get("origin", "user")).startswith("task:")]
        if files and (re.search(DOCUMENT_WORDS, clause + " " + self.text, re.I)
                      or re.search(r"\b(?:this|it)\s*[.?!]*\s*$", self.text, re.I)):  # "summarize this"
            return files[-1]
        return None

    def text_source(self, clause: str, after: str | None = None) -> tuple[str, list[int]]:
        """Text input of a clause: a quoted passage, a text file named in it, an earlier text
        output, a text file referred to, else the request's words."""
        q = quotes(clause)
        if q:
            return max(q, key=lambda t: len(t[2]))[2], []
        named = self.explicit(clause, "text")
        if named:
            return named["id"], []
        if "text" in self.produced:
            pid = self.produced["text"]
            return f"<resource>-{pid}", [pid]
        spoken = self.transcribe_first(clause)
        if spoken is not None:
            return f"<resource>-{spoken}", [spoken]
        doc = self.document(clause)
        if doc:
            return doc["id"], []
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
