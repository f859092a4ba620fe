"""What a request says about files, checked before any LLM call.

A request is refused only when it clearly asks to use a file the user has not given:

* an id the conversation lacks (``image-9``);
* a file named as an *input* but not attached (``identify the objects in example.jpg``); a name
  the request asks to produce (``save the audio as example.wav``) is not an input;
* a pointing reference to a kind of file the conversation does not have (``this photo``, ``the
  first video``, ``my recording``) when nothing in the request produces one; ``this document``
  is satisfied by an attached image too (a scanned or photographed page).

Everything else goes to task planning, and the answer says what was missing. In particular these
never refuse: words inside quotes (``'The movie was great'`` is text, not a video), a request
that gives a link, a kind the request itself produces (``get an image of a sunset, then the
colours in the image``), and everyday words such as film, movie, footage or clip.

:func:`missing_file` is the pure decision (tested on real TaskBench requests,
``benchmarks/bench_refusals.py`` measures it); :func:`check_mentions` raises it for the service.
The hint says how to attach a file on the front end the request came from.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pipeline.media import NAME_KINDS
from pipeline.types import Modality, Resource

from .errors import InputError

_ID = re.compile(r"\b(image|audio|video|text)-(\d+)\b", re.IGNORECASE)

_EXTENSIONS = NAME_KINDS
_FILE_NAME = re.compile(r"(?<![\w/.:@-])([\w-]{1,80}\.(" + "|".join(_EXTENSIONS) + r"))\b(?![/.]\w)", re.IGNORECASE)

# The words that point at a file of a kind. Film, movie, footage, clip, voice, sound and speech are
# left out on purpose: people use them about content ("the movie was great", "in my voice").
_KIND_WORDS: dict[str, Modality] = {
    **dict.fromkeys(("photo", "photos", "picture", "pictures", "image", "images", "pic", "pics",
                     "screenshot", "screenshots"), "image"),
    **dict.fromkeys(("recording", "recordings", "audio", "song"), "audio"),
    **dict.fromkeys(("video", "videos"), "video"),
    **dict.fromkeys(("document", "documents", "spreadsheet", "pdf"), "text"),
}
_KINDS = "|".join(sorted(_KIND_WORDS, key=len, reverse=True))
# "this photo", "my recording", "the first video", "the attached image"; a bare "the image" is not
# enough ("generate a visual of the scene, then segment the image" names an image still to come).
_REFERENCE = re.compile(
    r"\b(?:(?:this|these|my|our)\s+(?:(?:first|second|third|last|previous|earlier|above|same|attached|uploaded|"
    r"original|provided|given|enclosed)\s+)?"
    r"|(?:the|that|those)\s+(?:first|second|third|last|previous|earlier|above|same|attached|uploaded|original|"
    r"provided|given|enclosed)\s+)(" + _KINDS + r")\b(?!-)",
    re.IGNORECASE,
)
# A kind the request brings about itself: "an image of", "generate ... picture", "to speech".
_PRODUCES = {
    "image": r"image|images|photo|photos|picture|pictures|pic|drawing|illustration|painting|render|artwork",
    "audio": r"audio|recording|speech|song|voice|voiceover|sound|podcast|narration",
    "video": r"video|videos|clip|animation|movie|film",
    "text": r"document|documents|text|summary|transcript|pdf|spreadsheet",
}
_MAKE_VERBS = (r"generate|generated|create|created|draw|paint|render|produce|make|synthesi[sz]e|compose|imagine|"
               r"convert|converted|turn|turned|transform|get|find|search|download|fetch|extract|obtain|design|"
               r"illustrate|visuali[sz]e|narrate|read|speak|say")
_POSSESSES = re.compile(r"\b(?:i|we)\s+(?:have|had|took|own|recorded|made|got)\b|\b(?:i've|we've)\s+got\b"
                        r"|\bhere(?:'s| is)\b|\battached\b|\buploaded\b", re.IGNORECASE)
_ASKS = re.compile(r"\b(?:want|wants|like|please|need|needs|can you|could you|then|and have|help)\b", re.IGNORECASE)
_QUOTED = re.compile(r"(?<!\w)'(?:[^'\n]|'(?=\w))+?'(?!\w)|\"[^\"\n]{2,}?\"|“[^”\n]{2,}?”|‘[^’\n]{2,}?’")
_URL = re.compile(r"\b(?:https?://|www\.)\S+|\b[\w-]+\.(?:com|org|net|io|ly)(?:/\S*)?\b", re.IGNORECASE)
# A file name the request asks to produce: "save ... as X", "into a text file called X".
_OUTPUT_NAME_BEFORE = re.compile(
    r"(?:\b(?:save|saves|saved|saving|store|stored|storing|export|exported|exporting|write|writes|writing|"
    r"written|output|outputs|outputting|rename|renamed|name it|call it)\b[^.!?;\n]{0,80}?"
    r"\b(?:as|to|into|in|named|called|titled)"
    r"|\b(?:into|as)\s+(?:an?|the|new|another)\s+(?:[\w-]+\s+){0,2}?(?:file|image|audio|video|recording|"
    r"document|track)\s+(?:named|called|titled)"
    r"|\b(?:output|result|resulting|new)\s+(?:file|image|audio|video)?\s*(?:named|called|titled)?)"
    r"\s*['\"“‘(]?\s*$",
    re.IGNORECASE,
)
_NOUNS = {"image": "photo or image", "audio": "recording", "video": "video", "text": "document or text file"}

ATTACH_HINTS = {
    "run": "attach it with --file PATH",
    "terminal": "attach it with /file PATH, then send your request",
    "discord": "attach it to your message (or to /ask's file option)",
    "slack": "upload it with your message in this thread",
}


def attach_hint(platform: str | None) -> str:
    """How to attach a file on ``platform`` (``None``: ``hugginggpt run``)."""
    return ATTACH_HINTS.get(platform or "run", ATTACH_HINTS["run"])


def _blank_quotes(text: str) -> str:
    """``text`` with quoted passages replaced by spaces of the same length (positions kept)."""
    return _QUOTED.sub(lambda m: " " * len(m.group(0)), text)


def _missing_id(text: str, resources: Sequence[Resource], attached: Sequence[Modality]) -> str | None:
    ids = {r.id.lower() for r in resources}
    for m in _ID.finditer(text):
        rid = m.group(0).lower()
        if rid in ids or attached:
            continue
        same = sorted((r.id for r in resources if r.kind == m.group(1).lower()), key=lambda s: int(s.split("-")[1]))
        known = ", ".join(same) if same else f"no {m.group(1).lower()} yet"
        return f"There is no {rid} in this conversation (it has {known})."
    return None


def is_output_name(text: str, start: int) -> bool:
    """Whether the file name starting at character ``start`` of ``text`` is one the request asks to
    produce ("save the generated audio as 'example.wav'", "into a text file called notes.txt"), not
    one the user describes having ("I have a recording saved as example.wav")."""
    sentence = re.split(r"[.!?;](?:\s|$)", text[:start])[-1]
    cue = _OUTPUT_NAME_BEFORE.search(sentence)
    if cue is None or re.search(r"\b(?:is|are|was|were|been)\s*$", sentence[:cue.start()], re.IGNORECASE):
        return False  # none, or a state the user describes: "the document's image is saved as example.jpg"
    owned = list(_POSSESSES.finditer(sentence[:cue.start()]))
    return not owned or bool(_ASKS.search(sentence[owned[-1].end():cue.start()]))


def _missing_name(text: str, resources: Sequence[Resource], have: set[Modality]) -> str | None:
    names = {(r.name or "").lower() for r in resources}
    for m in _FILE_NAME.finditer(text):
        name, kind = m.group(1), _EXTENSIONS[m.group(2).lower()]
        if name.lower() in names or kind in have or is_output_name(text, m.start()):
            continue
        return name
    return None


def _produced_before(text: str, kind: Modality, end: int) -> bool:
    """Whether ``text[:end]`` brings a file of ``kind`` about: an indefinite mention not owned by
    the user ("an image of a sunset", but not "I have an image"), or a making verb ("convert it to
    speech", "generate ... picture")."""
    before = text[:end]
    words = _PRODUCES[kind]
    made = re.search(rf"\b(?:{_MAKE_VERBS})\b(?:\W+\w+){{0,6}}?\W+(?:{words})\b|\b(?:to|into)\s+(?:{words})\b"
                     rf"|\b(?:text-to-speech|tts|spoken)\b", before, re.IGNORECASE)
    if made and (kind == "audio" or not re.search(r"\b(?:text-to-speech|tts|spoken)\b", made.group(0), re.I)):
        return True
    for m in re.finditer(rf"\b(?:an?|some|one|two|three|new|another|\d+)\s+(?:[\w-]+\s+){{0,3}}?(?:{words})\b",
                         before, re.IGNORECASE):
        clause = re.split(r"[.!?;]", before[:m.start()])[-1]
        if not _POSSESSES.search(clause[-40:]):
            return True
    return False


def _missing_kind(text: str, have: set[Modality]) -> Modality | None:
    if _URL.search(text):
        return None  # the user gave a link: the planner and the answer deal with it
    plain = _blank_quotes(text)
    inline_text = any(len(q.group(0)) >= 20 for q in _QUOTED.finditer(text)) or re.search(
        r"\b(?:text|reads|following|document|content)\s*(?:is)?\s*:", text, re.IGNORECASE)
    for m in _REFERENCE.finditer(plain):
        kind = _KIND_WORDS[m.group(1).lower()]
        if kind in have or (kind == "text" and (inline_text or "image" in have)):
            continue  # "this document" may be a scanned page: an attached image stands for it
        if _produced_before(plain, kind, m.start()):
            continue
        return kind
    return None


def missing_file(
    text: str, resources: Sequence[Resource], attached: Sequence[Modality], platform: str | None
) -> str | None:
    """The sentence refusing ``text`` because it relies on a file that is not there, or ``None``.

    Args:
        text: the user's request.
        resources: the files the conversation already has (earlier turns).
        attached: kinds of the files attached to this very message (their ids are not known yet).
        platform: ``ConversationKey.platform`` (``"terminal"``, ``"discord"``, ``"slack"``) or
            ``None`` for ``hugginggpt run``; picks the attach hint.

    Returns:
        One sentence naming the missing id, file name or kind and how to attach a file, or ``None``
        when the request may go to task planning.
    """
    have = {r.kind for r in resources} | set(attached)
    if "video" in have:  # a video's sound and frames are resources of their own (pipeline.video_parts)
        have |= {"audio", "image"}
    if sentence := _missing_id(text, resources, attached):
        return sentence
    if name := _missing_name(text, resources, have):
        return f"You mention {name}, but no such file is attached: {attach_hint(platform)}."
    kind = _missing_kind(text, have)
    if kind is None:
        return None
    return f"There is no {_NOUNS[kind]} in this conversation yet: {attach_hint(platform)}."


def check_mentions(
    text: str, resources: Sequence[Resource], attached: Sequence[Modality], platform: str | None
) -> None:
    """Refuse a request that clearly relies on a file that is not there (see :func:`missing_file`).

    Raises:
        InputError: with :func:`missing_file`'s sentence.
    """
    if sentence := missing_file(text, resources, attached, platform):
        raise InputError(sentence)
