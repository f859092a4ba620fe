"""Audio tasks (HuggingGPT Table 1, audio), one registry entry each."""

from __future__ import annotations

import base64

from huggingface_hub import AudioToAudioOutputElement

from ..media import sniff
from ..types import Output
from .base import Inputs, Saver, TaskSpec, entry, labels_output, text_of
from .outputs import AudioParts

AUDIO = {"audio": "audio"}


async def _text_to_speech(raw: bytes, inputs: Inputs, saver: Saver) -> Output:
    s = sniff(raw)
    if s is None or s.kind != "audio":
        raise ValueError("text-to-speech output is not audio")
    return Output(files=[await saver.file(raw, "audio", s.mime, f"speech of {inputs.text['text'][:60]!r}")])


async def _audio_to_audio(raw: list[AudioToAudioOutputElement], inputs: Inputs, saver: Saver) -> Output:
    files = []
    parts = list(raw)[: saver.limits.max_items]
    for x in parts:
        blob = x.blob if isinstance(x.blob, bytes) else base64.b64decode(x.blob)
        s = sniff(blob)
        if s is None or s.kind != "audio":
            raise ValueError("audio-to-audio output is not audio")
        files.append(await saver.file(blob, "audio", s.mime, f"{x.label} from {inputs.resources['audio'].id}"))
    if not files:
        raise ValueError("no audio returned")
    labels = tuple(str(x.label) for x in parts)
    return Output(text=", ".join(labels), files=files, data=AudioParts(labels))


TASKS: list[TaskSpec] = [
    entry("text-to-speech", "audio", {"text": "text"}, ("audio",), "speak a text aloud",
          lambda c, m, i: c.text_to_speech(i.text["text"], model=m), _text_to_speech, reply="media"),
    entry("automatic-speech-recognition", "audio", AUDIO, ("text",), "transcribe speech to text",
          lambda c, m, i: c.automatic_speech_recognition(i.media["audio"], model=m), text_of("text")),
    entry("audio-to-audio", "audio", AUDIO, ("audio",), "transform audio (enhance, separate, convert voice)",
          lambda c, m, i: c.audio_to_audio(i.media["audio"], model=m), _audio_to_audio, reply="media-json"),
    entry("audio-classification", "audio", AUDIO, ("text",), "label a sound or a speaker's emotion",
          lambda c, m, i: c.audio_classification(i.media["audio"], model=m), labels_output),
]
