"""Audio tasks: speech recognition (``{"text": ...}``), audio classification (labels),
text-to-speech (a WAV file) and audio-text-to-text (a question about a recording, asked and answered
in the chat-completions format). Audio is decoded and resampled with PyAV when the request is read."""

from __future__ import annotations

from typing import Any

from .. import payload as P
from . import Binary, Task
from .common import chat_answer, chat_reply, chat_request, load_multimodal, load_pipeline, run_grouped


def _rate(runner: Any) -> int:
    fe = getattr(runner, "feature_extractor", None)
    return int(getattr(fe, "sampling_rate", 16000) or 16000)


RATE = 16000  # what speech models take; a model with another rate gets the audio resampled
CHUNK_SECONDS = 10  # speech recognition reads a clip this many seconds at a time (the chunk length
# transformers' docs use for CTC models); its working memory grows with it


def _asr_prepare(p: P.Payload) -> tuple[Any, dict]:
    return P.audio(p, RATE, run_seconds=CHUNK_SECONDS), {}


def _classify_prepare(p: P.Payload) -> tuple[Any, dict]:
    top_k = P.param(p, "top_k", int)
    return P.audio(p, RATE), ({"top_k": top_k} if top_k else {})


def _decoded(runner: Any, items: list[tuple[Any, dict]]) -> list[tuple[Any, dict]]:
    import numpy as np

    rate = _rate(runner)
    out = []
    for samples, opts in items:
        if rate != RATE:
            n = int(len(samples) * rate / RATE)
            samples = np.interp(np.linspace(0, len(samples) - 1, n), np.arange(len(samples)), samples).astype("float32")
        out.append(({"raw": samples, "sampling_rate": rate}, opts))
    return out


def _asr_run(runner: Any, items: list[tuple[Any, dict]]) -> list[Any]:
    """Transcripts. Clips up to :data:`CHUNK_SECONDS` run as one batch; a longer clip runs alone,
    read in chunks of that length (the pipeline's ``chunk_length_s``), so the model's activations
    do not grow with the clip's length (nor, padded, with the batch's longest clip)."""
    decoded = _decoded(runner, items)
    out: list[Any] = [None] * len(items)
    short = [i for i, (a, _) in enumerate(decoded) if len(a["raw"]) <= CHUNK_SECONDS * a["sampling_rate"]]
    for i, r in zip(short, run_grouped(runner, [decoded[i] for i in short]) if short else [], strict=True):
        out[i] = r
    for i in sorted(set(range(len(items))) - set(short)):
        audio, opts = decoded[i]
        out[i] = runner(audio, chunk_length_s=CHUNK_SECONDS, **opts)
    return [{"text": str(r["text"]).strip()} for r in out]


def _classify_run(runner: Any, items: list[tuple[Any, dict]]) -> list[Any]:
    return [P.plain(r) for r in run_grouped(runner, _decoded(runner, items))]


def _tts_prepare(p: P.Payload) -> str:
    return P.text(p)


def _tts_run(runner: Any, items: list[str]) -> list[Any]:
    out = []
    for text in items:
        res = runner(text)
        out.append(Binary(P.wav(res["audio"], res["sampling_rate"]), "audio/wav"))
    return out


def _identity(result: Any) -> Any:
    return result


TASKS = [
    Task("automatic-speech-recognition", load_pipeline("automatic-speech-recognition"), _asr_prepare, _asr_run,
         _identity, batch=True),
    Task("audio-classification", load_pipeline("audio-classification"), _classify_prepare, _classify_run, _identity,
         batch=True),
    Task("text-to-speech", load_pipeline("text-to-audio"), _tts_prepare, _tts_run, _identity, text_only=True),
    Task("text-to-audio", load_pipeline("text-to-audio"), _tts_prepare, _tts_run, _identity, text_only=True),
]


def _ask_prepare(p: P.Payload) -> tuple[Any, str, int]:
    return chat_request(p, "audio", lambda name, data: P.audio(p, RATE, name, value=data))


def _ask_run(runner: Any, items: list[tuple[Any, str, int]]) -> list[Any]:
    """Chat-completions replies: the model listens to each clip (resampled to its feature
    extractor's rate; the extractor reads at most its own ``chunk_length`` seconds) and answers."""
    out = []
    for (samples, opts), (_, question, tokens) in zip(_decoded(runner[0], [(s, {}) for s, _, _ in items]), items,
                                                      strict=True):
        answer = chat_answer(runner, "audio", samples["raw"], question, tokens, sampling_rate=samples["sampling_rate"])
        out.append(chat_reply(runner[2], answer))
    return out


TASKS.append(Task("audio-text-to-text", load_multimodal, _ask_prepare, _ask_run, _identity))
