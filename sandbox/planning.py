"""Keyword task planning: the sandbox's stand-in for HuggingGPT's task planning (Shen et al.,
NeurIPS 2023, §3.1). Pure functions, no I/O.

An intent table maps trigger words to handlers; each handler adds tasks to a :class:`Planner`.
Plans use the paper's record shape ``{"task", "id", "dep", "args"}`` with ``dep == [-1]`` when a
task needs nothing and ``"<resource>-N"`` standing for the output of task ``N``.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from .phrasings import (
    about_an_image, deferred, edit_images, image_sources, media_sources, names_what_a_file_shows, plan_tools,
    similar_sentences, text_for_the_controller, video_action, video_question, video_source,
)
from .planner import KIND_WORDS, LANGUAGES, Planner
from .wording import SMALL_TALK, clause_end, mask_quotes, quotes


def _strip_lead(s: str) -> str:
    s = s.strip(" \t\n:,-")
    s = re.sub(r"^(?:me|us)\s+", "", s, flags=re.I)
    s = re.sub(r"^(?:of|showing|depicting|that shows|which shows|with|representing|about|featuring|for)\s+", "", s, flags=re.I)
    return s.strip(" \t\n:,-\"'")


def _description(p: Planner, start: int, end: int) -> str:
    """The thing to draw: a quote in the clause, else the clause words after the trigger."""
    clause = p.text[start:clause_end(p.text, end)]
    q = quotes(clause)
    if q:
        return q[0][2]
    return _strip_lead(p.text[end:clause_end(p.text, end)])


# Intent table: (name, pattern). Earlier entries win when matches overlap.
_INTENTS: list[tuple[str, str]] = [
    ("fill_mask", r"\[MASK\]|<mask>|\bfill(?:ing)?[- ]?(?:in\s+)?(?:the\s+|a\s+|this\s+)?(?:blanks?|gaps?|masks?|holes?)\b"
                  r"|\bmissing\s+word\b|\bwhat\s+word\s+(?:fits|goes)\b"),
    ("video_action", r"\b(?:doing|actions?|activit(?:y|ies)|sports?|happening|happens|going\s+on|taking\s+place|movements?|gestures?|dancing|exercis\w+)\b"),
    ("remove", r"\b(?:remove|erase|delete|get\s+rid\s+of|inpaint\w*|retouch\w*|blur\s+out|cut\s+out|take\s+(?:\w+\s+){1,3}?out\s+of|replace\s+(?:\w+\s+){1,3}?with|swap\s+(?:\w+\s+){1,3}?(?:for|with)|(?:add|put|place|insert)\s+(?:\w+\s+){1,3}?(?:on|onto|to|into|in)\s+(?:the|this|my|her|his|its|their)|make\s+(?:the|her|his|its)\s+\w+\s+(?:look\s+)?(?:\w+er|red|blue|green|yellow|purple|pink|orange|black|white|gr[ae]y|brown|golden))\b"),
    ("canny_draw", r"\b(?:draw|generate|create|make|paint|render|produce)\b[^.?!;]{0,80}?\b(?:from|using|based on|following|with)\s+(?:the\s+|its\s+|their\s+|these\s+)?(?:edges?|outlines?|contours?|canny|edge\s+map)\b"),
    ("detail", r"\b(?:describe|tell me about|caption|analy[sz]e)\b[^.?!;]{0,60}?\b(?:as much detail|in (?:great |full |more |as much )?detail|everything|all you can|thorough\w*|exhaustive\w*)"),
    ("detail", r"\b(?:tell me )?everything (?:about|in) (?:this|the|that|it)\b"),
    ("asr", r"\b(?:transcri\w+|what (?:does|did) (?:it|this|that|the \w+|s?he|they) say|what (?:is|was) (?:being )?said|speech[- ]to[- ]text|(?:convert|turn)\s+(?:the\s+|this\s+|my\s+)?(?:audio|voice|speech|recording)[\w\s]{0,20}?\s+(?:in)?to\s+text|recogni[sz]e (?:the )?speech)"),
    ("tts", r"\b(?:read\s+(?:it|this|that|them|the\s+\w+|\S+)?\s*(?:back\s+)?(?:aloud|out\s+loud|out|back)|(?:in|with)\s+a\s+(?:different|another|new|female|male|nice)\s+voice|text[- ]to[- ]speech|speak\s+(?:it|this|that)|say\s+(?=[\"'“])|(?:turn|convert|make)\b[^.?!;]{0,40}?\b(?:into|to)\s+(?:an?\s+)?(?:natural[- ]sounding\s+)?(?:speech|audio|voice)|audio\s+(?:response|version)|voice-?over|pronounce"
            r"|(?:natural[- ]sounding\s+)?speech\s+(?:from|of)\s+(?:the\s+)?(?:following|this|that|my|given)|audio\s+file\s+(?:generated\s+|made\s+|created\s+)?(?:from|describing|that\s+describes|of)"
            r"|(?:generate|create|produce|synthesi[sz]e)\s+(?:an?\s+)?(?:natural[- ]sounding\s+)?(?:speech|audio|voice)\b|spoken\s+(?:version|aloud)|narrat\w+)"),
    ("edit", r"\b(?:make|turn)\s+(?:it|this|that|them|the\s+(?:" + KIND_WORDS["image"] + r")|this\s+(?:" + KIND_WORDS["image"] + r")|[\w.-]+\.(?:png|jpe?g|webp))\s+(?!into an? (?:speech|audio))"),
    ("edit", r"\b(?:edit|modify|transform|colou?ri[sz]e|recolou?r|black and white|grayscale|greyscale|sepia|stylize|cartoonify)\w*\b"),
    ("edit", r"\b(?:paint|draw)\b(?!\s+(?:me\s+)?(?:an?\s+|the\s+)?(?:new\s+)?(?:picture|image|drawing|painting|sketch|version|copy)s?\b)"
             r"[^.?!;]{0,40}?\b(?:in|on)\s+(?:this|the|my|that)\s+(?:" + KIND_WORDS["image"] + r")\b"),
    ("edit", r"\b(?:change|replace|remove|add)\s+(?:the\s+|a\s+|an\s+)?(?:[\w']+\s+){0,2}(?:background|sky|colou?rs?|hair|style|weather|season|lighting)\b"),
    ("video", r"\b(?:generate|create|make|produce|render|animate)\b[^.?!;]{0,30}?\b(?:video|clip|animation|movie)s?\b"),
    ("generate", r"\b(?:generate|create|make|produce|render|design|give me|show me)\b\s+(?:me\s+)?(?:an?\s+|some\s+|the\s+|one\s+|two\s+|\d+\s+)?(?:new\s+|\w+\s+){0,2}?(?:image|picture|photo|photograph|drawing|painting|illustration|artwork|portrait|poster|logo|wallpaper|sketch)s?\b"),
    ("generate", r"\b(?:draw|paint|sketch|illustrate)\b(?!\s+(?:a\s+|the\s+)?(?:conclusion|attention|bounding|box(?:es)?|rectangles?|frames?|outlines?|labels?|circles?)\b)"),
    ("hed", r"\b(?:hed|soft[- ]edges?|soft[- ]edge\s+map|holistic\s+edges?)\b"),
    ("mlsd", r"\b(?:mlsd|straight[- ]lines?|line\s+segments?)\b"),
    ("scribble", r"\bscribbles?\b"),
    ("normal", r"\b(?:normal[- ]maps?|surface\s+normals?)\b"),
    ("canny", r"\b(?:edges?|edge\s+map|canny|outlines?|contours?)\b"),
    ("pose", r"\b(?:pose|poses|skeleton|keypoints?)\b"),
    ("depth", r"\bdepth\b"),
    ("segment", r"\b(?:segment\w*|masks?|panoptic)\b"),
    ("detect", r"\b(?:detect\w*|locate|count\w*|number\s+of|tally|(?:find|spot|locate|point\s+out|highlight|mark)\b[^.?!;]{0,40}?\bin\s+(?:the|this|that|my)\s+(?:" + KIND_WORDS["image"] + r")|bounding\s+box(?:es)?|object\s+detection|how\s+many|what\s+objects|which\s+objects|(?:find|identify|label|list)\s+(?:all\s+)?(?:the\s+)?(?:objects|things|items|people|persons))\b"),
    ("classify", r"\b(?:what|which)\s+(?:breed|kind|type|species|sort|category|class|model|make)\b|\bbreed\b|\bclassif\w+(?!\s+(?:the\s+)?(?:tokens|entities|words))|\bcategori[sz]\w*|\bsentiment|\bemotions?\b|\bmood\b"),
    ("caption", r"\b(?:describe|caption\w*|what(?:'s| is)\s+(?:in|on|shown\s+in)\b|what\s+do\s+you\s+see|what\s+does\s+(?:this|the|that|it)\s+(?:\w+\s+)?(?:show|depict)|tell\s+me\s+about\s+(?:this|the|that)\s+(?:" + KIND_WORDS["image"] + r")|extract\s+(?:the\s+)?text|read\s+the\s+text|ocr)\b"),
    ("summarize", r"\b(?:summari[sz]\w*|summary|tl;?dr|shorten|(?:main|key)\s+points|gist)\b"),
    ("similar", r"\b(?:how\s+similar|similarity|similar\s+(?:they|these|the\s+two)|same\s+meaning|semantically\s+(?:similar|close)|compare\s+(?:these|the|two)\s+(?:two\s+)?sentences)\b"),
    ("chat", r"\b(?:conversational\s+(?:response|reply)|have\s+a\s+conversation|chat\s+(?:with|about)|respond\s+to|reply\s+to|discuss)\b"),
    ("translate", r"\btranslat\w+\b"),
    ("tokens", r"\b(?:named\s+entit\w+|entities|tokens?|parts?\s+of\s+speech|ner)\b"),
    ("rewrite", r"\b(?:paraphrase|rewrite|rephrase|grammar|proofread|correct)\w*\b"),
    ("write", r"\b(?:generate|create|come\s+up\s+with|need|give\s+me|suggest)\s+(?:me\s+)?(?:an?\s+|some\s+)?(?:new\s+|\w+\s+){0,3}?(?:slogan|tagline|headline|story|poem|sentence|paragraph|essay|tweet|title)s?\b"),
    ("write", r"\b(?:write|compose|continue)\b\s+(?:me\s+)?(?:an?\s+|the\s+|some\s+)?(?:\w+\s+)?(?:story|poem|text|paragraph|essay|letter|haiku|article|song|continuation|it)\b"),
    ("enhance", r"\b(?:denois\w*|noise|clearer|less\s+noisy|clean\s+up\s+(?:the\s+|this\s+|my\s+)?(?:audio|sound|recording)|enhance\s+(?:the\s+)?(?:audio|speech|sound|voice|recording)|separate)\b"),
    ("qa", r"\banswer\b|\?|\b(?:my|the|a)\s+question\b|^\s*(?:does|do|did|is|are|was|were|can|could|has|have|will|would)\s"
           r"|\b(?:check|verify|confirm|find\s+out|see|tell\s+me|know|wonder\w*|ask\w*)\s+(?:whether|if)\b"),
]
_COMPILED = [(name, re.compile(p, re.I)) for name, p in _INTENTS]

_VISUAL_WORDS = re.compile(
    r"\b(?:doing|wearing|holding|colou?r|see|seen|shown|visible|look|looks|background|foreground|left|right|"
    r"there|here|sitting|standing|picture|photo|image|pic|this|it|he|she|they|in it)\b",
    re.I,
)


def _intent_matches(text: str, skip: frozenset[str] = frozenset()) -> list[tuple[str, int, int]]:
    """Non-overlapping intent matches ``(name, start, end)`` in text order (quotes excluded),
    leaving out the intents named in ``skip``."""
    masked = mask_quotes(text)
    taken: list[tuple[int, int]] = []
    found: list[tuple[str, int, int]] = []
    for name, rx in _COMPILED:
        if name in skip:
            continue
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


def plan_tasks(text: str, resources: list[dict[str, Any]], available_tasks: list[str],
               tools: dict[str, list[str]] | None = None, *, first_turn: bool = False) -> list[dict[str, Any]]:
    """Plan ``text`` as a task graph with keywords (the sandbox's stand-in for §3.1 task planning).

    Args:
        text: the user's request.
        resources: files of the conversation, ``{"id", "kind", "name"?, "origin", ...}``, newest last.
        available_tasks: task names that may appear in the plan; other tasks are left out.
        tools: MCP task name → argument keys (:func:`sandbox.phrasings.tool_args`); a tool
            the request names is planned first.
        first_turn: the request opens the conversation (its planning prompt has no chat log), so
            the user's files came with it and a question is about them.

    Returns:
        Tasks ``[{"task", "id", "dep", "args"}]`` with ids ``0..n-1`` in order, ``dep`` ``[-1]``
        when none and every dependency earlier than the task; ``[]`` for chit-chat and plain
        questions. Deterministic: the same input always gives the same plan.
    """
    text = str(text or "")
    res = [r for r in resources if isinstance(r, dict) and r.get("id") and r.get("kind")]
    p = Planner(text=text, resources=res, available=set(available_tasks), first_turn=first_turn)
    if not text.strip():
        return []
    plan_tools(p, tools or {})
    # An intent whose only task is unavailable must not hide the others (a fill-in-the-blank
    # request still gets its question answered when no fill-mask model is offered).
    matches = _intent_matches(text, _unavailable_intents(p.available) | _no_file_for(p))
    others = [m for m in matches if m[0] != "qa"]
    if SMALL_TALK.search(text) and not others:
        return []
    explicit_question = any(q[2].rstrip().endswith("?") for q in quotes(text))
    handled_qa = bool(others) and not explicit_question
    last_clause_end: dict[str, int] = {}
    waiting: list = []
    for i, (name, s, e) in enumerate(matches):
        later = [m for m in matches[i + 1:] if m[0] in ("caption", "classify", "detail", "asr", "summarize", "translate", "qa", "write")]
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
        if handler and deferred(name, p, clause) and later:
            waiting.append((handler, clause, ctx, s, e))
        elif handler:
            handler(p, clause, ctx, s, e)
    for handler, clause, ctx, s, e in waiting:  # what they need is planned now
        handler(p, clause, ctx, s, e)
    text_for_the_controller(p)  # no file, no model task: the controller answers it
    return p.tasks


def _image(p: Planner, clause: str, ctx: str) -> tuple[str, list[int]] | None:
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
    """A handler adding ``task`` for each image the clause is about (:func:`image_sources`)."""
    def h(p, clause, ctx, s, e):
        for val, deps in image_sources(p, clause, ctx):
            p.add(task, {"image": val}, deps, produces)

    return h


def _h_caption(p, clause, ctx, s, e):
    if not (p.of_kind("image") or "image" in p.produced):
        return
    _single_image("image-to-text", "text")(p, clause, ctx, s, e)


def _h_classify(p, clause, ctx, s, e):
    word = p.text[s:e].lower()
    if re.search(r"sentiment|emotion|mood", word) and p.of_kind("audio") and re.search(r"audio|speech|voice|recording|speaker", ctx, re.I):
        src = p.source("audio", clause) or p.source("audio", ctx)
        if src:
            p.add("audio-classification", {"audio": src[0]}, src[1], "text")
        return
    text_words = re.search(r"\b(?:text|sentence|review|sentiment|tweet|comment|message|paragraph)\b", ctx, re.I)
    video = video_source(p, clause, ctx) if not text_words else None
    if video:  # "classify the action in the clip": the video, not one of its frames
        p.add("video-classification", {"video": video[0]}, video[1], "text")
    elif (p.of_kind("image") or "image" in p.produced) and not (text_words and quotes(ctx)):
        _single_image("image-classification", "text")(p, clause, ctx, s, e)
    elif p.of_kind("audio") and re.search(r"audio|sound|recording|speech", ctx, re.I):
        src = p.source("audio", clause) or p.source("audio", ctx)
        if src:
            p.add("audio-classification", {"audio": src[0]}, src[1], "text")
    elif quotes(ctx) or "text" in p.produced or text_words:
        val, deps = p.text_source(clause)
        p.add("text-classification", {"text": val}, deps, "text")


_REFERS_TO_TEXT = re.compile(
    r"(?:it|this|that|what (?:it|this|that|they|he|she|the \w+) (?:describes|says|said|mentions|talks about)|"
    r"the (?:transcript(?:ion)?|text|result|description|caption|story|summary))",
    re.I,
)
"""A description that points at the text an earlier task of the plan produced (speech → text → image)."""


def _h_generate(p, clause, ctx, s, e):
    desc = _description(p, s, e) or _strip_lead(clause[e - s :]) or "a picture"
    subject = re.sub(r"^(?:an?\s+|the\s+)?(?:picture|image|photo|drawing|painting|illustration)\s+(?:of\s+)?", "",
                     desc.strip().rstrip("."), flags=re.I)
    if _REFERS_TO_TEXT.fullmatch(subject) and "text" in p.produced:
        desc, deps = f"<resource>-{p.produced['text']}", [p.produced["text"]]
    else:
        deps = []
    p.add("text-to-image", {"text": desc}, deps, "image")


def _h_video(p, clause, ctx, s, e):
    desc = _description(p, s, e)
    deps: list[int] = []
    about = about_an_image(p, clause)
    if about:
        desc, deps = about
    elif not desc or desc.lower() in ("it", "this", "that"):
        desc, deps = p.text_source(clause)
    p.add("text-to-video", {"text": desc}, deps, "video")


def _h_edit(p, clause, ctx, s, e):
    q = quotes(clause)
    if not q:
        edit_images(p, clause, ctx, s, e)
    elif p.of_kind("image") or "image" in p.produced:
        for val, deps in image_sources(p, clause, ctx):
            p.add("image-to-image", {"image": val, "text": q[0][2]}, deps, "image")


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
    for val, deps in media_sources(p, clause, ctx, "audio"):
        p.add("automatic-speech-recognition", {"audio": val}, deps, "text")


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
    for val, deps in media_sources(p, clause, ctx, "audio"):
        p.add("audio-to-audio", {"audio": val}, deps, "audio")


def _text_task(task: str, after: str | None = None, wrap: Callable[[str, str], str] | None = None):
    def h(p, clause, ctx, s, e):
        val, deps = p.text_source(clause, after)
        if wrap and not re.fullmatch(r"text-\d+", val):  # a text file goes whole, by id
            val = wrap(val, clause)
        p.add(task, {"text": val}, deps, "text")

    return h


def _target_language(val: str, clause: str) -> str:
    m = re.search(r"\b(?:in|into|to)\s+(" + "|".join(LANGUAGES) + r")\b", mask_quotes(clause), re.I)
    return f"{val} (to {m.group(1).capitalize()})" if m else val


def _h_qa(p, clause, ctx, s, e):
    """A question: about an image (VQA) or about a quoted passage (question answering)."""
    text = p.text
    qs = quotes(text)
    question_quotes = [q for q in qs if q[2].rstrip().endswith("?")]
    if SMALL_TALK.search(text) and not question_quotes:
        return
    if question_quotes:
        question = question_quotes[0][2]
    else:
        sentences = re.findall(r"[^.!?]*\?", mask_quotes(text))
        if not sentences:  # "I would like to know which colour is more dominant in the image."
            asked = re.search(r"\b(?:know|tell\s+me|find\s+out|wonder\w*|ask\w*|check|verify|confirm|see)\s+((?:what|which|who|how|where|when|why|whether|if)\b[^.!?]*)"
                              r"|^\s*((?:does|do|did|is|are|was|were|can|could|has|have|will|would)\s[^.!?]*)", mask_quotes(text), re.I)
            group = next((g for g in (1, 2) if asked and asked.group(g)), None)
            asked_text = re.sub(r"^(?:whether|if)\s+", "", text[asked.start(group):asked.end(group)].strip(), flags=re.I) if group else ""
            sentences = [asked_text + "?"] if asked_text else []
        if not sentences:
            return
        m = re.search(re.escape(sentences[0].strip()), mask_quotes(text))
        question = text[m.start() : m.end()].strip() if m else sentences[0].strip()
        wh = re.search(r"\b(?:what|who|whom|whose|when|where|why|how|which)\b[^?]*\?", mask_quotes(question), re.I)
        if wh:
            question = question[wh.start() : wh.end()]
    passages = [q for q in qs if not q[2].rstrip().endswith("?") and len(q[2]) > 15]
    has_image = bool(p.of_kind("image")) or "image" in p.produced
    if video_question(p, question) and not passages:
        video = video_source(p, question, text)
        if "video-text-to-text" in p.available:  # a video VLM watches it: the question goes along
            p.add("video-text-to-text", {"video": video[0], "text": question}, video[1], "text")
        else:
            p.add("video-classification", {"video": video[0]}, video[1], "text")
        return
    about = _VISUAL_WORDS.search(question) or names_what_a_file_shows(p, question) or (p.first_turn and p.user_files())
    if has_image and (about or question_quotes) and not passages:
        task = "document-question-answering" if re.search(r"\bdocument|\binvoice|\bform\b|\breceipt", text, re.I) else "visual-question-answering"
        for val, deps in image_sources(p, question, text):
            p.add(task, {"image": val, "text": question}, deps, "text")
        return
    doc = p.document(text)
    if passages:
        p.add("question-answering", {"text": question, "context": passages[0][2]}, [], "text")
    elif doc is not None:
        p.add("question-answering", {"text": question, "context": doc["id"]}, [], "text")
    elif "text" in p.produced and question_quotes:
        pid = p.produced["text"]
        p.add("question-answering", {"text": question, "context": f"<resource>-{pid}"}, [pid], "text")


_MASK_RE = re.compile(r"\[MASK\]|<mask>|_{2,}")
_INTENT_TASK = {"fill_mask": "fill-mask"}  # intents served by exactly one task


def _unavailable_intents(available: set[str]) -> frozenset[str]:
    return frozenset(name for name, task in _INTENT_TASK.items() if task not in available)


def _no_file_for(p: Planner) -> frozenset[str]:
    """Intents whose words mean something else without their file: "the action" of a story with
    no video, "remove the last sentence" with no picture."""
    return frozenset(name for name, kind in (("video_action", "video"), ("remove", "image")) if not p.of_kind(kind))
_BEFORE_HOLE = re.compile(r"[.!?:;](?=\s)|\n")


def _h_fill_mask(p, clause, ctx, s, e):
    """``Fill in the blank: Paris is the [MASK] of France.``: the passage with the hole (a quote
    holding it, else the clause around it)."""
    quoted = [q[2] for q in quotes(p.text) if _MASK_RE.search(q[2])]
    if quoted:
        passage = quoted[0]
    else:
        hole = _MASK_RE.search(mask_quotes(p.text))
        if hole is None:
            return  # nothing to fill: a made-up sentence would mislead
        starts = [m.end() for m in _BEFORE_HOLE.finditer(p.text, 0, hole.start())]
        start = starts[-1] if starts else 0
        end = clause_end(p.text, hole.end())
        if end < len(p.text) and p.text[end] in ".!?":
            end += 1
        passage = p.text[start:end]
    # the user's own mask token stays (models differ: BERT [MASK], RoBERTa <mask>); a blank
    # written as ___ becomes BERT's [MASK], the most common one
    passage = re.sub(r"_{2,}", "[MASK]", passage.strip(), count=1).strip()
    if passage:
        p.add("fill-mask", {"text": passage}, [], "text")


_HANDLERS: dict[str, Callable[..., None]] = {
    "detail": _h_detail,
    "caption": _h_caption,
    "detect": _single_image("object-detection", None),
    "classify": _h_classify,
    "segment": _single_image("image-segmentation", None),
    "depth": _single_image("depth-estimation", "image"),
    "hed": _single_image("hed-control", "image"),
    "mlsd": _single_image("mlsd-control", "image"),
    "scribble": _single_image("scribble-control", "image"),
    "normal": _single_image("normal-control", "image"),
    "canny": _single_image("canny-control", "image"),
    "pose": _single_image("openpose-control", "image"),
    "canny_draw": _h_canny_draw,
    "generate": _h_generate,
    "video": _h_video,
    "edit": _h_edit,
    "remove": edit_images,
    "video_action": video_action,
    "asr": _h_asr,
    "tts": _h_tts,
    "enhance": _h_enhance,
    "summarize": _text_task("summarization", r"\b(?:summari[sz]\w*|summary of|tl;?dr)\b"),
    "translate": _text_task("translation", r"\btranslat\w+\b", _target_language),
    "tokens": _text_task("token-classification"),
    "rewrite": _text_task("text2text-generation", r"\b(?:paraphrase|rewrite|rephrase)\w*\b"),
    "write": _text_task("text-generation", r"\b(?:write|compose|continue)\b"),
    "qa": _h_qa,
    "fill_mask": _h_fill_mask,
    "similar": similar_sentences,
    "chat": _text_task("conversational"),
}
