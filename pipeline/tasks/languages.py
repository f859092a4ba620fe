"""Languages of the translation task: names, and the codes many-to-many models take.

The Inference API's translation task takes ``src_lang`` and ``tgt_lang`` parameters
(``AsyncInferenceClient.translation(text, model=, src_lang=, tgt_lang=)``); transformers'
translation pipeline hands them to the tokenizer of many-to-many models, which needs *both*
(``"Translation requires a src_lang and a tgt_lang for this model"``). Each family writes a
language its own way. The rule (by the model id, or the URL that serves it, lower-cased):

* contains ``mbart``: mBART-50 codes, ``fr_XX``, ``de_DE`` (the 52 languages of mBART-50);
* contains ``nllb``: NLLB-200 (FLORES-200) codes, ``fra_Latn``, ``deu_Latn``;
* contains ``m2m``: M2M-100 codes, plain ISO 639-1, ``fr``, ``de``;
* anything else (Marian ``opus-mt-en-fr``, T5, ...): no codes are sent; such models translate in
  the direction they were trained for (T5 through the API: English to German).

Sources: the model cards and tokenizer language lists of ``facebook/mbart-large-50-many-to-many-mmt``,
``facebook/nllb-200-distilled-600M`` and ``facebook/m2m100_418M``.
"""

from __future__ import annotations

import re

# ISO 639-1 -> (English name, mBART-50 code or None, NLLB-200 code). M2M-100 takes the ISO code.
LANGUAGES: dict[str, tuple[str, str | None, str]] = {
    "en": ("English", "en_XX", "eng_Latn"),
    "fr": ("French", "fr_XX", "fra_Latn"),
    "de": ("German", "de_DE", "deu_Latn"),
    "es": ("Spanish", "es_XX", "spa_Latn"),
    "it": ("Italian", "it_IT", "ita_Latn"),
    "pt": ("Portuguese", "pt_XX", "por_Latn"),
    "nl": ("Dutch", "nl_XX", "nld_Latn"),
    "ru": ("Russian", "ru_RU", "rus_Cyrl"),
    "zh": ("Chinese", "zh_CN", "zho_Hans"),
    "ja": ("Japanese", "ja_XX", "jpn_Jpan"),
    "ko": ("Korean", "ko_KR", "kor_Hang"),
    "ar": ("Arabic", "ar_AR", "arb_Arab"),
    "hi": ("Hindi", "hi_IN", "hin_Deva"),
    "tr": ("Turkish", "tr_TR", "tur_Latn"),
    "pl": ("Polish", "pl_PL", "pol_Latn"),
    "uk": ("Ukrainian", "uk_UA", "ukr_Cyrl"),
    "sv": ("Swedish", "sv_SE", "swe_Latn"),
    "cs": ("Czech", "cs_CZ", "ces_Latn"),
    "ro": ("Romanian", "ro_RO", "ron_Latn"),
    "vi": ("Vietnamese", "vi_VN", "vie_Latn"),
    "fi": ("Finnish", "fi_FI", "fin_Latn"),
    "he": ("Hebrew", "he_IL", "heb_Hebr"),
    "id": ("Indonesian", "id_ID", "ind_Latn"),
    "fa": ("Persian", "fa_IR", "pes_Arab"),
    "th": ("Thai", "th_TH", "tha_Thai"),
    "bn": ("Bengali", "bn_IN", "ben_Beng"),
    "el": ("Greek", None, "ell_Grek"),
    "da": ("Danish", None, "dan_Latn"),
    "no": ("Norwegian", None, "nob_Latn"),
    "hu": ("Hungarian", None, "hun_Latn"),
}

_ALIASES = {"mandarin": "zh", "farsi": "fa", "bangla": "bn", "castilian": "es", "flemish": "nl"}

_BY_WORD: dict[str, str] = dict(_ALIASES)
for _iso, (_name, _mbart, _nllb) in LANGUAGES.items():
    _BY_WORD[_name.lower()] = _iso
    _BY_WORD[_iso] = _iso
    _BY_WORD[_nllb.lower()] = _iso
    if _mbart:
        _BY_WORD[_mbart.lower()] = _iso

_NAMES = "|".join(sorted((w for w in _BY_WORD if len(w) > 3 and "_" not in w), key=len, reverse=True))
_PAIR = re.compile(rf"\b({_NAMES})\s+(?:to|into|->)\s+({_NAMES})\b", re.I)
_TARGET = re.compile(rf"\b(?:to|into)\s+({_NAMES})\b", re.I)
_TARGET_IN = re.compile(rf"\bin\s+({_NAMES})\b", re.I)
_SOURCE = re.compile(rf"\bfrom\s+({_NAMES})\b", re.I)


def language(value: str) -> str | None:
    """ISO 639-1 code of a language given by English name (``"French"``), ISO code (``"fr"``),
    mBART-50 code (``"fr_XX"``) or NLLB code (``"fra_Latn"``); ``None`` if unknown."""
    return _BY_WORD.get(value.strip().lower().replace("-", "_"))


def name(iso: str) -> str:
    """English name of an ISO 639-1 code of :data:`LANGUAGES`."""
    return LANGUAGES[iso][0]


def from_request(text: str) -> dict[str, str]:
    """Languages a translation request names: ``{"src_lang": "German", "tgt_lang": "English"}``.

    Reads "from German to English", "English to French", "translate ... into French" and, when no
    "to/into" names one, "... in Spanish". A side is left out when the request names none or
    several different languages for it (then the plan must say).

    Args:
        text: the user's request.

    Returns:
        ``src_lang`` and/or ``tgt_lang`` as English language names; ``{}`` if none is clear.
    """
    src: set[str] = set()
    tgt: set[str] = set()
    for a, b in _PAIR.findall(text):
        src.add(_BY_WORD[a.lower()])
        tgt.add(_BY_WORD[b.lower()])
    tgt.update(_BY_WORD[m.lower()] for m in _TARGET.findall(text))
    if not tgt:
        tgt.update(_BY_WORD[m.lower()] for m in _TARGET_IN.findall(text))
    src.update(_BY_WORD[m.lower()] for m in _SOURCE.findall(text))
    out = {}
    if len(src) == 1:
        out["src_lang"] = name(next(iter(src)))
    if len(tgt) == 1:
        out["tgt_lang"] = name(next(iter(tgt)))
    if out.get("src_lang") == out.get("tgt_lang"):
        out.pop("src_lang", None)
    return out


def model_codes(model: str, src: str | None, tgt: str | None) -> dict[str, str]:
    """The ``src_lang``/``tgt_lang`` parameters to send to ``model`` (see the module's rule).

    Args:
        model: model id or the URL that serves it.
        src, tgt: ISO 639-1 codes, or ``None`` when not known. A many-to-many model needs both:
            with only ``tgt``, the source is taken to be English (unless ``tgt`` is English).

    Returns:
        ``{}`` for models that take no codes or when no target is known; else both codes.

    Raises:
        ValueError: the model's family has no code for a language, or the source is unknown and
            the target is English (one sentence for the user).
    """
    low = model.lower()
    family = "mbart" if "mbart" in low else "nllb" if "nllb" in low else "m2m" if "m2m" in low else None
    if family is None or tgt is None:
        return {}
    if src is None:
        if tgt == "en":
            raise ValueError("Say which language the text is in (for example \"from German to English\").")
        src = "en"

    def code(iso: str) -> str:
        _, mbart, nllb = LANGUAGES[iso]
        c = mbart if family == "mbart" else nllb if family == "nllb" else iso
        if c is None:
            raise ValueError(f"This model cannot translate {'from' if iso == src else 'into'} {name(iso)}.")
        return c

    return {"src_lang": code(src), "tgt_lang": code(tgt)}
