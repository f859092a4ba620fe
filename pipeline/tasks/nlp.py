"""Text tasks (HuggingGPT Table 1, NLP), one registry entry each."""

from __future__ import annotations

import csv
import io
from typing import Any

from huggingface_hub import (
    ChatCompletionOutput,
    FillMaskOutputElement,
    QuestionAnsweringOutputElement,
    TokenClassificationOutputElement,
)

from ..errors import ExpertError
from ..types import Output
from . import languages
from .base import Inputs, Saver, TaskSpec, best, entry, flatten, labels_output, text_of
from .outputs import Entities, Entity, Label, Fills, Predictions, SentenceScore, Similarities, Span

TEXT = {"text": "text"}
TEXT_AND_CONTEXT = {"text": "text", "context": "text"}


async def _token_classification(raw: list[TokenClassificationOutputElement], inputs: Inputs, saver: Saver) -> Output:
    ents = []
    found = flatten(raw)
    if len(found) > saver.limits.max_items:  # keep the best-scored, in text order
        kept = {id(x) for x in best(found, saver.limits.max_items, lambda x: float(x.score))}
        found = [x for x in found if id(x) in kept]
    for x in found:
        group = x.entity_group or x.entity or ""
        ents.append(Entity(str(x.word), str(group), float(x.score), x.start, x.end))
    text = ", ".join(f"{e.word} ({e.entity})" for e in ents) or "no entities found"
    return Output(text=text, data=Entities(tuple(ents)))


async def _conversational(raw: ChatCompletionOutput, inputs: Inputs, saver: Saver) -> Output:
    content = raw.choices[0].message.content
    if content is None:
        raise ValueError("chat completion without content")
    return Output(text=str(content))


async def _question_answering(raw: QuestionAnsweringOutputElement | list[QuestionAnsweringOutputElement], inputs: Inputs, saver: Saver) -> Output:
    x = raw[0] if isinstance(raw, list) else raw
    span = Span(str(x.answer), None if x.score is None else float(x.score), x.start, x.end)
    return Output(text=span.answer, data=span)


def _sentences(inputs: Inputs) -> list[str]:
    others = [line.strip() for line in inputs.text["context"].splitlines() if line.strip()]
    if not others:
        raise ValueError("Sentence similarity needs other sentences, one per line.")
    return others


async def _sentence_similarity(raw: list[float], inputs: Inputs, saver: Saver) -> Output:
    sentences: list[str] = inputs.prepared
    scores = [float(s) for s in raw]
    if len(scores) != len(sentences):
        raise ValueError(f"{len(scores)} scores for {len(sentences)} sentences")
    ranked = sorted(zip(sentences, scores), key=lambda p: -p[1])
    text = "; ".join(f"{s:.2f} {sent[:60]!r}" for sent, s in ranked)
    return Output(text=text, data=Similarities(tuple(SentenceScore(s, v) for s, v in zip(sentences, scores))))


def _languages(inputs: Inputs) -> tuple[str | None, str | None]:
    """``(src, tgt)`` ISO 639-1 codes of the translation's ``src_lang``/``tgt_lang`` arguments.

    Raises:
        ValueError: a language this bot does not know (one sentence for the user).
    """
    codes = []
    for key in ("src_lang", "tgt_lang"):
        value = inputs.text.get(key, "").strip()
        code = languages.language(value) if value else None
        if value and code is None:
            raise ValueError(f"I do not know the language {value[:40]!r}; name it in English, like French or German.")
        codes.append(code)
    return codes[0], codes[1]


async def _translate(client: Any, model: str, inputs: Inputs) -> Any:
    """Translate, passing ``src_lang``/``tgt_lang`` codes to the models that need them
    (:mod:`pipeline.tasks.languages` says which and how they are written)."""
    try:
        params = languages.model_codes(model, *inputs.prepared)
    except ValueError as e:
        raise ExpertError(str(e), f"translation on {model}: {e}", reason="refused") from None
    return await client.translation(inputs.text["text"], model=model, **params)


def csv_table(inputs: Inputs) -> dict[str, list[str]]:
    """CSV text with a header row → ``{column: [values...]}`` (the tabular tasks' ``table``).

    Raises:
        ValueError: fewer than two rows, or rows of another width than the header.
    """
    rows = [r for r in csv.reader(io.StringIO(inputs.text["text"].strip())) if any(c.strip() for c in r)]
    if len(rows) < 2:
        raise ValueError("Tabular classification needs CSV text with a header row and at least one data row.")
    header = [h.strip() for h in rows[0]]
    if any(len(r) != len(header) for r in rows[1:]):
        raise ValueError("Every CSV row must have as many values as the header.")
    return {h: [r[i].strip() for r in rows[1:]] for i, h in enumerate(header)}


async def _tabular_classification(raw: list[str], inputs: Inputs, saver: Saver) -> Output:
    rows = len(next(iter(inputs.prepared.values())))
    preds = [str(p) for p in raw]
    if len(preds) != rows:
        raise ValueError(f"{len(preds)} predictions for {rows} rows")
    text = ", ".join(f"row {i + 1}: {p}" for i, p in enumerate(preds))
    return Output(text=text, data=Predictions(tuple(preds)))


async def _fill_mask(raw: list[FillMaskOutputElement], inputs: Inputs, saver: Saver) -> Output:
    items = best(flatten(raw), saver.limits.max_items, lambda x: float(x.score))
    if not items:
        raise ValueError("no completions")
    labels = tuple(Label(str(x.token_str).strip(), float(x.score)) for x in items)
    return Output(text=str(items[0].sequence), data=Fills(labels, tuple(str(x.sequence) for x in items)))


TASKS: list[TaskSpec] = [
    entry("text-classification", "nlp", TEXT, ("text",), "label a text (sentiment, topic, ...)",
          lambda c, m, i: c.text_classification(i.text["text"], model=m), labels_output),
    entry("token-classification", "nlp", TEXT, ("text",), "tag words in a text (named entities, parts of speech)",
          lambda c, m, i: c.token_classification(i.text["text"], model=m), _token_classification),
    entry("text2text-generation", "nlp", TEXT, ("text",), "rewrite a text into another text",
          lambda c, m, i: c.text_generation(i.text["text"], model=m, max_new_tokens=256), text_of("generated_text"),
          controller_capable=True),
    entry("summarization", "nlp", TEXT, ("text",), "shorten a text to its main points",
          lambda c, m, i: c.summarization(i.text["text"], model=m), text_of("summary_text"), controller_capable=True),
    entry("translation", "nlp", TEXT, ("text",),
          "translate a text; src_lang/tgt_lang: the languages by English name (e.g. German, French)",
          _translate, text_of("translation_text"), controller_capable=True, prepare=_languages,
          optional={"src_lang": "text", "tgt_lang": "text"}, from_request=languages.from_request),
    entry("question-answering", "nlp", TEXT_AND_CONTEXT, ("text",), "answer a question (text) from a passage (context)",
          lambda c, m, i: c.question_answering(question=i.text["text"], context=i.text["context"], model=m),
          _question_answering),
    entry("conversational", "nlp", TEXT, ("text",), "reply to a chat message",
          lambda c, m, i: c.chat_completion(messages=[{"role": "user", "content": i.text["text"]}], model=m, max_tokens=512),
          _conversational, controller_capable=True),
    entry("text-generation", "nlp", TEXT, ("text",), "continue or write a text from a prompt",
          lambda c, m, i: c.text_generation(i.text["text"], model=m, max_new_tokens=256), text_of("generated_text"),
          controller_capable=True),
    entry("sentence-similarity", "nlp", TEXT_AND_CONTEXT, ("text",),
          "score how similar a sentence (text) is to others (context, one per line)",
          lambda c, m, i: c.sentence_similarity(i.text["text"], other_sentences=i.prepared, model=m),
          _sentence_similarity, prepare=_sentences),
    entry("tabular-classification", "nlp", TEXT, ("text",), "classify rows of a table given as CSV text",
          lambda c, m, i: c.tabular_classification(i.prepared, model=m), _tabular_classification, prepare=csv_table),
    entry("fill-mask", "nlp", TEXT, ("text",), "fill in the [MASK] word of a sentence",
          lambda c, m, i: c.fill_mask(i.text["text"], model=m), _fill_mask),
]
