"""Plan normalisation: what a controller meant, read before the plan is validated.

Real controllers write well-formed intentions in forms :func:`pipeline.planning.validate_plan`
does not take: TaskBench's tool names (``"Sentiment Analysis"``), arguments by position
(``["example.jpg", "What is in it?"]``) or under another key (``"image_path"``), a file name in
quotes or behind a folder (``'example.jpg'``, ``image/example.jpg``, ``<user-input>``), a task's
own output (``<node-0>`` in task 0) for "the user's file", or words naming the kind of file the user
attached (``"this PDF"``, ``"the video"``; ``"both photos"`` becomes one task per photo). Each :data:`RULES` entry is one small
rule that rewrites such a form into the plan's own form, only where the reading is unambiguous,
and says what it did in a :class:`Note` (the run record's ``notes``). Anything it cannot read for
certain is left as it is: validation then refuses it with the fact the controller must fix.

Normalising never adds a file: a file reference becomes a resource id of the conversation or
stays as written; nothing here reads a path or fetches a URL. A valid plan is left unchanged, and
normalising a normalised plan changes nothing more.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .media import NAME_KINDS
from .tasks import TASKS, TaskSpec, canonical_task
from .types import MEDIA_MODALITIES, MODALITIES, PLACEHOLDER, Resource, placeholder_id

__all__ = ["MAX_REFERENCE_CHARS", "Note", "Normalised", "RULES", "named_kinds", "normalise_plan"]

MAX_REFERENCE_CHARS = 200
"""Characters, longest argument value read as a file reference (a name with its decorations); a
longer value is text or a path, never rewritten."""

_QUOTES = "'\"`‘’“”"
_BRACKETS = {"<": ">", "[": "]", "(": ")", "{": "}"}
_GENERIC = {"input", "user", "file", "files", "the", "my", "uploaded", "attached", "given", "provided",
            "original", "source", "input_file", "user_input", "resource", "media"}
_KIND_WORDS = {
    "image": {"image", "img", "photo", "picture", "pic", "jpg", "png"},
    "audio": {"audio", "sound", "recording", "wav", "speech"},
    "video": {"video", "clip", "mp4", "movie"},
    "text": {"text", "document", "txt", "doc"},
}
_KEY_WORDS = {**{w: k for k, ws in _KIND_WORDS.items() for w in ws},
              **dict.fromkeys(("prompt", "query", "question", "sentence", "caption", "content", "message"), "text")}
_CONTEXT_KEYS = {"context", "passage", "paragraph", "document", "article", "reference", "source_text"}
_NOT_BY_POSITION = {"src_lang"}  # a translation's second value is the language to translate into
_ARG_ALIASES = ("arguments", "parameters", "params", "inputs", "input")


@dataclass(frozen=True)
class Note:
    """What one rule did to one plan: ``rule`` (a :data:`RULES` name) and a sentence for the record."""

    rule: str
    text: str


@dataclass(frozen=True)
class Normalised:
    """A plan after normalisation: the records to validate, and what was changed."""

    records: list[Any]
    notes: tuple[Note, ...] = ()


@dataclass
class _Plan:
    """What the rules read: the conversation's resources and task id → what the task produces."""

    resources: Sequence[Resource]
    outputs: dict[int, tuple[str, ...]]

    def only(self, kind: str) -> Resource | None:
        """The one resource of ``kind``, or ``None`` when there are none or several."""
        found = [r for r in self.resources if r.kind == kind]
        return found[0] if len(found) == 1 else None


Rule = Callable[[int, dict[str, Any], _Plan], list[str]]
"""``(task id, record, plan) -> sentences``: rewrites ``record`` in place, says what it did."""


def normalise_plan(raw_tasks: Sequence[Any], *, resources: Sequence[Resource]) -> Normalised:
    """Apply every :data:`RULES` rule to each task record of a parsed plan.

    Args:
        raw_tasks: records from :func:`pipeline.planning.parse_plan` (not changed: rules work on
            a copy of each record and of its values one level down, all they rewrite; records
            that are not task objects pass through for validation to refuse).
        resources: the conversation's resources (ids, kinds, the user's file names).

    Returns:
        :class:`Normalised`: the records in their order, and one :class:`Note` per change.
    """
    records = [{k: copy.copy(v) if isinstance(v, (dict, list)) else v for k, v in r.items()} if isinstance(r, dict) else r
               for r in raw_tasks]
    plan = _Plan(resources, {})
    for pos, r in enumerate(records):
        if isinstance(r, dict):
            spec = _spec(r)
            plan.outputs.setdefault(_tid(r, pos), spec.outputs if spec else ())
    notes: list[Note] = []
    for name, rule in RULES:
        for pos, r in enumerate(records):
            if isinstance(r, dict):
                notes += [Note(name, text) for text in rule(_tid(r, pos), r, plan)]
    records, said = plural_phrase(records, plan)
    return Normalised(records, tuple(notes) + tuple(Note("plural-phrase", text) for text in said))


def _tid(record: dict[str, Any], pos: int) -> int:
    """The record's id as validation reads it, else its position (for notes and references)."""
    raw = record.get("id", pos)
    try:
        return int(str(raw).strip())
    except ValueError:
        return pos


def _spec(record: dict[str, Any]) -> TaskSpec | None:
    name = record.get("task")
    canon = canonical_task(name) if isinstance(name, str) else None
    return TASKS.get(canon) if canon else None


# ---------------------------------------------------------------------------------------------
# The rules


def task_name(tid: int, record: dict[str, Any], plan: _Plan) -> list[str]:
    """A task named other than by its pipeline tag (TaskBench's ``"Image Classification"``, a near
    name such as ``"Sentiment Analysis"``: :data:`pipeline.tasks.ALIASES`) gets the tag."""
    name = record.get("task")
    canon = canonical_task(name) if isinstance(name, str) else None
    if canon is None or canon == name:
        return []
    record["task"] = canon
    return [f"read task {tid}'s {name.strip()[:60]!r} as {canon}"]


def argument_list(tid: int, record: dict[str, Any], plan: _Plan) -> list[str]:
    """Arguments under another key (``"arguments"``, ``"inputs"``), as ``[{"name", "value"}]``, or
    by position (``["example.jpg", "What is it?"]``: each value to the first argument of its kind
    not yet given, in the task's order) become the ``args`` object."""
    notes = []
    if "args" not in record:
        key = next((k for k in _ARG_ALIASES if k in record), None)
        if key is None:
            return []
        record["args"] = record.pop(key)
        notes.append(f"read task {tid}'s {key!r} as its arguments")
    args, spec = record["args"], _spec(record)
    if not isinstance(args, list) or spec is None:
        return notes
    if args and all(isinstance(a, dict) and set(a) == {"name", "value"} for a in args):
        record["args"] = {str(a["name"]): a["value"] for a in args}
        return notes + [f"read task {tid}'s list of named arguments as an object"]
    placed = _by_position(tid, args, spec, plan)
    if placed is None:
        return notes
    record["args"] = placed
    return notes + [f"read task {tid}'s arguments by position as {', '.join(placed)}"]


def _by_position(tid: int, values: list[Any], spec: TaskSpec, plan: _Plan) -> dict[str, Any] | None:
    """Each value to the first unfilled argument of a kind it can be; failing that, in the task's
    order where only file arguments get a value of another kind (validation then names the file
    that is not there). ``None`` when neither places every value."""
    if not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in values):
        return None
    keys = [k for k in spec.allowed if k not in _NOT_BY_POSITION]
    kinds = [_value_kinds(tid, str(v), plan) for v in values]
    placed: dict[str, Any] = {}
    for value, can in zip(values, kinds):
        key = next((k for k in keys if k not in placed and spec.allowed[k] in can), None)
        if key is None:
            break
        placed[key] = value
    else:
        return _question_first(placed)
    if len(values) > len(keys) or any(spec.allowed[k] == "text" and "text" not in can for k, can in zip(keys, kinds)):
        return None
    return dict(zip(keys, values))


def _question_first(placed: dict[str, Any]) -> dict[str, Any]:
    """A task taking ``text`` and ``context`` (question answering) gets the question as its text."""
    text, context = placed.get("text"), placed.get("context")
    if isinstance(text, str) and isinstance(context, str) and context.rstrip().endswith("?") \
            and not text.rstrip().endswith("?"):
        placed["text"], placed["context"] = context, text
    return placed


def _value_kinds(tid: int, value: str, plan: _Plan) -> tuple[str, ...]:
    """The kinds a value can stand for: what a referred task produces (any kind for a reference
    to itself or to no task), a resource's or a file name's kind, else text."""
    m = PLACEHOLDER.fullmatch(value.strip())
    if m:
        n = placeholder_id(m)
        return plan.outputs[n] if n != tid and plan.outputs.get(n) else MODALITIES
    name = _undecorate(value)
    if name is not None:
        res = _match(name, None, plan)
        if res is not None:
            return (res.kind,)
        ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
        if ext in NAME_KINDS:
            return (NAME_KINDS[ext],)
        generic = tuple(k for k in MEDIA_MODALITIES if _means_a_file(name, k))
        if generic and name != value.strip():  # "<user-input>", "'image'"; a bare word stays text
            return generic
    return ("text",)


def argument_key(tid: int, record: dict[str, Any], plan: _Plan) -> list[str]:
    """An argument under a key the task does not take (``"image_path"``, ``"question"``) moves to
    the one argument of the task not yet given whose kind the key or the value says."""
    args, spec = record.get("args"), _spec(record)
    if not isinstance(args, dict) or spec is None:
        return []
    notes = []
    for key in list(args):
        k = str(key).strip().lower()
        if k in spec.allowed:
            continue
        free = [a for a in spec.allowed if a not in {str(x).strip().lower() for x in args}]
        target = _target_key(tid, k, args[key], free, spec, plan)
        if target is not None:
            args[target] = args.pop(key)
            notes.append(f"read task {tid}'s argument {str(key)[:40]!r} as {target!r}")
    return notes


def _target_key(tid: int, key: str, value: Any, free: list[str], spec: TaskSpec, plan: _Plan) -> str | None:
    if "context" in free and key in _CONTEXT_KEYS:
        return "context"
    words = [w for w in re.split(r"[^a-z0-9]+", key) if w]
    said = {_KEY_WORDS[w] for w in words if w in _KEY_WORDS}
    kinds = tuple(said) if len(said) == 1 else _value_kinds(tid, str(value), plan) if isinstance(value, str) else ()
    fits = [a for a in free if spec.allowed[a] in kinds]
    if len(fits) > 1 and "text" in fits:
        fits = ["text"]  # "question" or "prompt" for a task taking text and context
    return fits[0] if len(fits) == 1 else None


def self_reference(tid: int, record: dict[str, Any], plan: _Plan) -> list[str]:
    """A task with no other dependency that names its own output (``<node-0>`` in task 0) means
    the user's file: it becomes the conversation's only resource of the argument's kind."""
    args, spec = record.get("args"), _spec(record)
    if not isinstance(args, dict) or spec is None or _other_deps(tid, record.get("dep")):
        return []
    notes = []
    for key, value in args.items():
        m = PLACEHOLDER.fullmatch(value.strip()) if isinstance(value, str) else None
        kind = spec.allowed.get(str(key).strip().lower())
        if m is None or placeholder_id(m) != tid or kind is None or (res := plan.only(kind)) is None:
            continue
        args[key] = res.id
        notes.append(f"read task {tid}'s own output {m.group(0)} as {res.id}, the only {kind} of the conversation")
    if notes and isinstance(record.get("dep"), list):
        record["dep"] = [d for d in record["dep"] if str(d).strip() != str(tid)] or [-1]
    return notes


def _other_deps(tid: int, dep: Any) -> bool:
    deps = dep if isinstance(dep, list) else [] if dep is None else [dep]
    return any(str(d).strip() not in (str(tid), "-1") for d in deps)


def file_reference(tid: int, record: dict[str, Any], plan: _Plan) -> list[str]:
    """A file argument written with quotes, a folder, brackets or a generic word (``'example.jpg'``,
    ``image/example.jpg``, ``<file-0>``, ``"image"``) becomes the resource it names: the same name,
    else the same stem and kind, else the only resource of that kind. A text argument is read as
    a text file only when it is a decorated name of one."""
    args, spec = record.get("args"), _spec(record)
    if not isinstance(args, dict) or spec is None:
        return []
    notes = []
    for key, value in args.items():
        kind = spec.allowed.get(str(key).strip().lower())
        if kind is None or not isinstance(value, str) or _resolves(value, kind, plan) or PLACEHOLDER.search(value):
            continue
        name = _undecorate(value)
        if name is None or (kind == "text" and name == value.strip()):
            continue
        res = _match(name, kind, plan)
        if res is None and kind in MEDIA_MODALITIES and _means_a_file(name, kind):
            res = plan.only(kind)
        if res is not None:
            args[key] = res.id
            notes.append(f"read {value.strip()[:80]!r} as {res.id}" + (f" ({res.name})" if res.name else ""))
    return notes


def _resolves(value: str, kind: str, plan: _Plan) -> bool:
    """Whether validation already takes ``value`` as a file of ``kind`` (an id, or a unique name)."""
    low = value.strip().lower()
    hits = [r for r in plan.resources if r.id.lower() == low] or [r for r in plan.resources if (r.name or "").lower() == low]
    return len(hits) == 1 and hits[0].kind == kind


def _undecorate(value: str) -> str | None:
    """``value`` without quotes, brackets and folders; ``None`` for what is no plain file
    reference: a URL, an absolute or parent path, or more than :data:`MAX_REFERENCE_CHARS`."""
    v = value.strip()
    if len(v) > MAX_REFERENCE_CHARS or "://" in v or v.startswith(("/", "~", "\\")) or re.match(r"[A-Za-z]:\\", v):
        return None
    for _ in range(3):
        v = v.strip().strip(_QUOTES).strip()
        if v[:1] in _BRACKETS and v.endswith(_BRACKETS[v[:1]]):
            v = v[1:-1]
    parts = [p for p in re.split(r"[/\\]", v) if p]
    if not parts or ".." in parts or any(p.strip() != p for p in parts):
        return None
    name = parts[-1].strip(_QUOTES).strip()
    return name or None


def _match(name: str, kind: str | None, plan: _Plan) -> Resource | None:
    """The one resource ``name`` names (of ``kind`` when given): by id or file name, else by the
    same stem with a file name extension of that kind (``example.jpg`` for ``example.png``)."""
    low = name.lower()
    pool = [r for r in plan.resources if kind is None or r.kind == kind]
    for same in ([r for r in pool if r.id.lower() == low], [r for r in pool if (r.name or "").lower() == low]):
        if same:
            return same[0] if len(same) == 1 else None
    stem, dot, ext = low.rpartition(".")
    if not dot or NAME_KINDS.get(ext) is None or (kind is not None and NAME_KINDS[ext] != kind):
        return None
    same = [r for r in pool if r.name and r.name.lower().rpartition(".")[0] == stem and r.kind == NAME_KINDS[ext]]
    return same[0] if len(same) == 1 else None


def _means_a_file(name: str, kind: str) -> bool:
    """Whether ``name`` can only mean a file of ``kind``: a file name with an extension of that
    kind, or generic words (``user input``, ``file-0``, ``the image``) naming no other kind."""
    stem, dot, ext = name.lower().rpartition(".")
    if dot and " " not in name:
        return NAME_KINDS.get(ext) == kind
    words = [w for w in re.split(r"[^a-z]+", name.lower()) if w]
    kinds = {k for k, ws in _KIND_WORDS.items() for w in words if w in ws}
    return bool(words) and kinds <= {kind} and all(w in _GENERIC or w in _KIND_WORDS[kind] for w in words)


_PHRASE_KINDS = {
    **dict.fromkeys(("pdf", "document", "doc", "report", "paper", "article", "page", "scan"), "document"),
    **dict.fromkeys(("photo", "picture", "image", "pic", "screenshot", "frame"), "image"),
    **dict.fromkeys(("recording", "audio", "sound", "voice note"), "audio"),
    **dict.fromkeys(("video", "clip", "movie"), "video"),
    "text file": "text", "file": "any", "attachment": "any",
}
_PHRASE = re.compile(
    r"(?:(?:this|that|the|my|our|your|attached|uploaded|given|provided|enclosed|above|same|both|these|those|all|"
    r"two|three|user's|input)\s+)+(" + "|".join(sorted(_PHRASE_KINDS, key=len, reverse=True)) + r")(s?)",
    re.IGNORECASE)
_PLURAL = re.compile(r"\b(?:both|these|those|all|two|three)\b", re.IGNORECASE)
_DOCUMENT_KINDS = ("text", "image")
"""What a PDF becomes here (:mod:`bot.documents`): a text file of its text, images of its pages without text."""


def named_kinds(value: str) -> tuple[str, ...] | None:
    """The kinds of file ``value`` names when it is only a phrase naming an attached file ("this
    PDF", "the video", "both photos"); ``None`` for anything else. A PDF or document is a text
    file or page images (:data:`_DOCUMENT_KINDS`); "the file" is any kind."""
    m = _PHRASE.fullmatch(value.strip().strip(_QUOTES).strip())
    if m is None:
        return None
    kind = _PHRASE_KINDS[m.group(1).lower()]
    return {"document": _DOCUMENT_KINDS, "any": MODALITIES}.get(kind, (kind,))


def kind_phrase(tid: int, record: dict[str, Any], plan: _Plan) -> list[str]:
    """An argument that is only a phrase naming a kind of file the user attached ("this PDF",
    "the document", "the video", "the recording") becomes that file: the one user file of the
    argument's kind the phrase can mean. A plural ("both photos") or several candidates is left
    for validation (its repair hint lists the files)."""
    args, spec = record.get("args"), _spec(record)
    if not isinstance(args, dict) or spec is None:
        return []
    notes = []
    for key, value in args.items():
        kind = spec.allowed.get(str(key).strip().lower())
        if kind is None or not isinstance(value, str) or _resolves(value, kind, plan):
            continue
        m = _PHRASE.fullmatch(value.strip().strip(_QUOTES).strip())
        kinds = named_kinds(value)
        if m is None or kinds is None or kind not in kinds or m.group(2) or _PLURAL.search(value):
            continue
        found = [r for r in plan.resources if r.kind == kind and r.origin == "user"]
        if len(found) == 1:
            args[key] = found[0].id
            notes.append(f"read {value.strip()[:80]!r} as {found[0].id}" + (f" ({found[0].name})" if found[0].name else ""))
    return notes


def plural_phrase(records: list[Any], plan: _Plan) -> tuple[list[Any], list[str]]:
    """A task whose one file argument is words naming several attached files of its kind ("both
    photos", "these images", "all the recordings") becomes one task per such file (the user's files
    of that kind, in order; new ids after the plan's highest), when no other task uses its output.

    Returns:
        The records (the same list when nothing changed) and one sentence per expanded task.
    """
    ids = [_tid(r, pos) for pos, r in enumerate(records) if isinstance(r, dict)]
    next_id = max(ids, default=-1) + 1
    out: list[Any] = []
    said: list[str] = []
    for pos, r in enumerate(records):
        found = _plural_files(_tid(r, pos), r, records, plan) if isinstance(r, dict) else None
        if found is None:
            out.append(r)
            continue
        key, files = found
        copies = [{**r, "args": {**r["args"], key: f.id}, "id": _tid(r, pos) if n == 0 else next_id + n - 1}
                  for n, f in enumerate(files)]
        next_id += len(files) - 1
        out += copies
        said.append(f"read {str(r['args'][key]).strip()[:80]!r} as {', '.join(f.id for f in files)}: one task each")
    return out, said


def _plural_files(tid: int, record: dict[str, Any], records: list[Any], plan: _Plan) -> tuple[str, list[Resource]] | None:
    """``(argument, files)`` when ``record``'s file argument names several user files in the plural."""
    args, spec = record.get("args"), _spec(record)
    if not isinstance(args, dict) or spec is None:
        return None
    media = [(k, v) for k, v in args.items() if spec.allowed.get(str(k).strip().lower()) in MEDIA_MODALITIES]
    if len(media) != 1 or not isinstance(media[0][1], str):
        return None
    key, value = media[0]
    kind = spec.allowed[str(key).strip().lower()]
    m = _PHRASE.fullmatch(value.strip().strip(_QUOTES).strip())
    kinds = named_kinds(value)
    if m is None or kinds is None or kind not in kinds or not (m.group(2) or _PLURAL.search(value)):
        return None
    files = [r for r in plan.resources if r.kind == kind and r.origin == "user"]
    return (key, files) if len(files) >= 2 and not _used_by_others(tid, record, records) else None


def _used_by_others(tid: int, record: dict[str, Any], records: list[Any]) -> bool:
    """Whether another record depends on task ``tid`` or names its output."""
    for other in records:
        if not isinstance(other, dict) or other is record:
            continue
        dep = other.get("dep")
        if tid in (dep if isinstance(dep, list) else [dep]):
            return True
        args = other.get("args")
        values = args.values() if isinstance(args, dict) else args if isinstance(args, list) else []
        if any(isinstance(v, str) and any(placeholder_id(m) == tid for m in PLACEHOLDER.finditer(v)) for v in values):
            return True
    return False


RULES: tuple[tuple[str, Rule], ...] = (
    ("task-name", task_name),
    ("argument-list", argument_list),
    ("argument-key", argument_key),
    ("self-reference", self_reference),
    ("file-reference", file_reference),
    ("kind-phrase", kind_phrase),
)
"""The rules in the order they run (a later one reads what an earlier one wrote)."""
