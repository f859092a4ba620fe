"""Text tasks: classification, token classification, fill-mask, question answering, embeddings and
sentence similarity, zero-shot classification, generation, and the sequence-to-sequence tasks
(summarization, translation, text2text-generation). transformers 5 has no pipeline for question
answering or the sequence-to-sequence tasks, so those run the model directly."""

from __future__ import annotations

from typing import Any

from .. import payload as P
from ..errors import BadPayload
from . import Task
from .common import MAX_NEW_TOKENS, first_device, load_pipeline, run_grouped, with_options

NEW_TOKENS = 20  # new tokens of a generation that asks for no number (transformers' default length)
MAX_TOKENS = 512  # tokens of a text the directly run models read (less when the tokenizer says so)
# sampling parameters: (type, lowest, highest, whether the lowest is allowed); transformers' own
# checks raise on the values outside (GenerationConfig.validate)
SAMPLING = {"max_new_tokens": (int, 1, MAX_NEW_TOKENS, True), "temperature": ((int, float), 0, 100, False),
            "top_p": ((int, float), 0, 1, False), "top_k": (int, 0, 100_000, True)}


def _classify_prepare(p: P.Payload) -> tuple[str, dict]:
    top_k = P.param(p, "top_k", int)
    fn = P.param(p, "function_to_apply", str)
    if fn is not None and fn not in ("sigmoid", "softmax", "none"):
        raise BadPayload("parameters.function_to_apply", "must be sigmoid, softmax or none")
    if top_k is not None and top_k < 1:
        raise BadPayload("parameters.top_k", "must be at least 1")
    return P.text(p), {"top_k": top_k, "truncation": True, **({"function_to_apply": fn} if fn else {})}


def _generation_prepare(p: P.Payload) -> tuple[str, dict]:
    opts: dict[str, Any] = {}
    for name, (kind, low, high, low_ok) in SAMPLING.items():
        value = P.param(p, name, kind)
        if value is None:
            continue
        if value > high:
            raise BadPayload(f"parameters.{name}", f"must be at most {high}")
        if value < low or (value == low and not low_ok):
            raise BadPayload(f"parameters.{name}", f"must be {'at least' if low_ok else 'above'} {low}")
        opts[name] = value
    for name in ("do_sample", "return_full_text"):
        value = P.param(p, name, bool)
        if value is not None:
            opts[name] = value
    P.param(p, "seed", int)
    return P.text(p), opts


def max_tokens(tok: Any) -> int:
    """Tokens the model of ``tok`` reads: :data:`MAX_TOKENS`, or the tokenizer's own maximum when lower."""
    return min(MAX_TOKENS, int(getattr(tok, "model_max_length", MAX_TOKENS) or MAX_TOKENS))


def _zero_shot_prepare(p: P.Payload) -> tuple[str, dict]:
    labels = P.texts(p, "parameters.candidate_labels", p.parameters.get("candidate_labels"))
    multi = P.param(p, "multi_label", bool, False)
    return P.text(p), {"candidate_labels": labels, "multi_label": multi}


def _qa_prepare(p: P.Payload) -> tuple[str, str]:
    if not isinstance(p.inputs, dict):
        raise BadPayload("inputs", "must be an object with 'question' and 'context'")
    return P.text(p, "inputs.question", p.inputs.get("question")), P.text(p, "inputs.context", p.inputs.get("context"))


def _qa_run(runner: Any, items: list[tuple[str, str]]) -> list[dict]:
    import torch

    net, tok = runner
    out = []
    for question, context in items:
        enc = tok(question, context, truncation="only_second", max_length=max_tokens(tok), return_offsets_mapping=True,
                  return_tensors="pt")
        offsets = enc.pop("offset_mapping")[0].tolist()
        seq_ids = enc.sequence_ids(0)
        with torch.inference_mode():
            res = net(**{k: v.to(first_device(net)) for k, v in enc.items()})
        start = res.start_logits[0].softmax(-1)
        end = res.end_logits[0].softmax(-1)
        ctx = [i for i, s in enumerate(seq_ids) if s == 1]
        best = max(((start[i] * end[j]).item(), i, j) for i in ctx for j in ctx if i <= j < i + 30)
        score, i, j = best
        s, e = offsets[i][0], offsets[j][1]
        out.append({"answer": context[s:e], "score": score, "start": s, "end": e})
    return out


def _load_tokenized(model: Any, device: str) -> tuple[Any, Any]:
    """``(model, tokenizer)``: the class named by ``config.json`` ``architectures``."""
    import transformers
    from transformers import AutoTokenizer

    net = getattr(transformers, model.architectures[0]).from_pretrained(str(model.path)).to(device).eval()
    return net, AutoTokenizer.from_pretrained(str(model.path))


def _seq2seq_run(key: str) -> Any:
    def run(runner: Any, items: list[tuple[str, dict]]) -> list[list[dict]]:
        import torch

        net, tok = runner
        out = []
        for text, opts in items:
            enc = tok(text, return_tensors="pt", truncation=True, max_length=max_tokens(tok)).to(first_device(net))
            kwargs = {"max_new_tokens": opts.get("max_new_tokens", 64)}
            if opts.get("do_sample"):
                kwargs.update(do_sample=True, **{k: opts[k] for k in ("temperature", "top_p", "top_k") if k in opts})
            with torch.inference_mode():
                ids = net.generate(**enc, **kwargs)
            out.append([{key: tok.decode(ids[0], skip_special_tokens=True).strip()}])
        return out
    return run


def _embed(runner: Any, texts: list[str]) -> Any:
    import torch

    net, tok = runner
    enc = tok(texts, padding=True, truncation=True, max_length=max_tokens(tok), return_tensors="pt").to(first_device(net))
    with torch.inference_mode():
        hidden = net(**enc).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
    return torch.nn.functional.normalize(pooled, dim=-1).cpu()


def _features_prepare(p: P.Payload) -> Any:
    if isinstance(p.inputs, dict):  # sentence-similarity's body
        src = P.text(p, "inputs.source_sentence", p.inputs.get("source_sentence"))
        return ("similarity", [src, *P.texts(p, "inputs.sentences", p.inputs.get("sentences"))])
    if isinstance(p.inputs, list):
        return ("embed", P.texts(p, "inputs", p.inputs))
    return ("embed1", [P.text(p)])


def _features_run(runner: Any, items: list[tuple[str, list[str]]]) -> list[Any]:
    texts = [t for _, ts in items for t in ts]
    vectors = _embed(runner, texts)
    out, at = [], 0
    for kind, ts in items:
        v = vectors[at: at + len(ts)]
        at += len(ts)
        if kind == "similarity":
            out.append((v[1:] @ v[0]).tolist())
        else:
            out.append(v[0].tolist() if kind == "embed1" else v.tolist())
    return out


def _pipeline_run(runner: Any, items: list[Any]) -> list[Any]:
    return [P.plain(r) for r in run_grouped(runner, items)]


def _fill_mask_run(runner: Any, items: list[Any]) -> list[Any]:
    return _pipeline_run(runner, [(text, {**opts, "tokenizer_kwargs": {"truncation": True}}) for text, opts in items])


def _generation_run(runner: Any, items: list[Any]) -> list[Any]:
    """Generation keeps the end of a prompt longer than the model reads (transformers' "hole":
    room is left for the new tokens); asking for as many new tokens as the model reads in all is
    refused (400) for that item alone."""
    limit = int(getattr(runner.tokenizer, "model_max_length", 0) or 0)
    out: list[Any] = [None] * len(items)
    ok = []
    for i, (text, opts) in enumerate(items):
        opts = {"max_new_tokens": NEW_TOKENS, **opts}
        if 0 < limit <= opts["max_new_tokens"]:
            out[i] = BadPayload("parameters.max_new_tokens", f"must be below {limit}, the tokens this model reads")
        else:
            ok.append((i, (text, {**opts, "handle_long_generation": "hole"})))
    for (i, _), r in zip(ok, _pipeline_run(runner, [item for _, item in ok]) if ok else [], strict=True):
        out[i] = r
    return out


def _zero_shot_run(runner: Any, items: list[Any]) -> list[Any]:
    return [[{"label": label, "score": float(s)} for label, s in zip(r["labels"], r["scores"], strict=True)]
            for r in run_grouped(runner, items)]


def _identity(result: Any) -> Any:
    return result


def _wrap(result: Any) -> Any:
    return [result]


TASKS = [
    Task("text-classification", load_pipeline("text-classification"), _classify_prepare, _pipeline_run, _wrap, batch=True,
         text_only=True),
    Task("token-classification", load_pipeline("token-classification"),
         with_options(P.text, ("aggregation_strategy", str)), _pipeline_run, _identity, batch=True, text_only=True),
    Task("fill-mask", load_pipeline("fill-mask"), with_options(P.text, ("top_k", int)), _fill_mask_run, _identity, batch=True,
         text_only=True),
    Task("zero-shot-classification", load_pipeline("zero-shot-classification"), _zero_shot_prepare, _zero_shot_run, _identity,
         text_only=True),
    Task("question-answering", _load_tokenized, _qa_prepare, _qa_run, _identity, text_only=True),
    Task("feature-extraction", _load_tokenized, _features_prepare, _features_run, _identity, batch=True,
         text_only=True),
    Task("sentence-similarity", _load_tokenized, _features_prepare, _features_run, _identity, batch=True,
         text_only=True),
    Task("text-generation", load_pipeline("text-generation"), _generation_prepare, _generation_run, _identity,
         text_only=True),
    Task("summarization", _load_tokenized, _generation_prepare, _seq2seq_run("summary_text"), _identity,
         text_only=True),
    Task("translation", _load_tokenized, _generation_prepare, _seq2seq_run("translation_text"), _identity,
         text_only=True),
    Task("text2text-generation", _load_tokenized, _generation_prepare, _seq2seq_run("generated_text"), _identity,
         text_only=True),
]
