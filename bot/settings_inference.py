"""Settings of today's Inference Providers and of document uploads (re-exported by :mod:`bot.settings`).

``[inference]`` gets its provider keys from :class:`ProviderKeys` (the provider policy, per-task
overrides, billing, the router's URL; the Hub is ``HF_ENDPOINT``); ``[documents]`` is :class:`DocumentSettings`
(PDF attachments). Sources of the words: Hugging Face's Inference Providers documentation
(``provider="auto"`` is the fastest provider by default; ``:fastest``, ``:cheapest``,
``:preferred`` and ``model:provider`` suffixes; ``bill_to`` sends ``X-HF-Bill-To``).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pipeline import decoding
from pipeline.experts.providers import POLICIES, check_choice

MiB = 1024 * 1024
_ORG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")


def _http_url(v: str | None) -> str | None:
    if v is None or not v.strip():
        return None
    u = urlsplit(v.strip())
    if u.scheme not in ("http", "https") or not u.hostname or u.query or u.fragment or u.username or u.password:
        raise ValueError(f"{v[:80]!r} is not an http:// or https:// URL without a query or credentials")
    return v.strip().rstrip("/")


class ProviderKeys(BaseModel):
    """The provider keys of ``[inference]``.

    Attributes:
        provider: ``"auto"`` (default: the Hub's order for the account, the router's fastest for chat
            models), ``"fastest"``, ``"cheapest"``, ``"preferred"``, a provider name (``"fal-ai"``),
            or ``None``/``""`` (no provider: gateway, endpoints or expert servers only).
        providers: pipeline tag → a policy, a provider name, or ``"model:provider"`` (that model,
            pinned to that provider) for that task; e.g. ``{"text-to-image": "fal-ai"}``.
        bill_to: the organisation (or user) whose Hugging Face credits pay every expert call
            (the client's ``bill_to``, sent as ``X-HF-Bill-To``); ``None``: the token's owner.
        router_url: the Inference Providers router (``None``: ``https://router.huggingface.co``,
            as ``huggingface_hub`` builds it); an operator's egress proxy or a test stand-in that
            forwards by path.
    """

    model_config = ConfigDict(extra="forbid")

    provider: str | None = Field("auto", description="auto | fastest | cheapest | preferred | a provider name | none")
    providers: dict[str, str] = Field(default_factory=dict, description="task -> policy, provider or model:provider")
    bill_to: str | None = Field(None, description="organisation whose credits pay expert calls (X-HF-Bill-To)")
    router_url: str | None = Field(None, description="Inference Providers router (default router.huggingface.co)")

    @field_validator("provider", mode="after")
    @classmethod
    def _provider(cls, v: str | None) -> str | None:
        if v is None or not v.strip() or v.strip().lower() == "none":
            return None
        return check_choice(v.strip())

    @field_validator("providers", mode="after")
    @classmethod
    def _per_task(cls, v: dict[str, str]) -> dict[str, str]:
        from pipeline.tasks import canonical_task

        out = {}
        for task, choice in v.items():
            canon = canonical_task(task)
            if canon is None:
                raise ValueError(f"{task!r} is not a known task")
            out[canon] = check_choice(str(choice).strip(), allow_pin=True)
        return out

    @field_validator("bill_to", mode="after")
    @classmethod
    def _org(cls, v: str | None) -> str | None:
        if v is None or not v.strip():
            return None
        if not _ORG.match(v.strip()):
            raise ValueError(f"{v[:40]!r} is not a Hugging Face organisation or user name")
        return v.strip()

    @field_validator("router_url", mode="after")
    @classmethod
    def _urls(cls, v: str | None) -> str | None:
        return _http_url(v)


class DocumentSettings(BaseModel):
    """``[documents]``: PDF attachments (text through pypdf, image-only pages rendered by pypdfium2),
    and the worker processes that decode attachments (PDFs, a video's sound and frames, audio and
    video probes; :class:`pipeline.decoding.Decoder`).

    Attributes:
        pdf: whether PDF attachments are accepted at all.
        max_pdf_bytes: bytes, largest PDF accepted.
        max_pages: pages read of one PDF (the rest is left out, and the answer says so).
        max_page_images: image-only pages rendered as images for vision tasks, at most.
        render_dpi: dots per inch of a rendered page (72 = 1 pixel per PDF point).
        max_text_bytes: bytes of UTF-8 text kept from one PDF.
        max_page_content_bytes: bytes, the largest content stream of a page that is read (decoded
            size; a larger page is left out, and the text file says so).
        decode_workers: decoding jobs running at once (each in a process of its own).
        decode_memory_bytes: bytes, the memory ceiling of one decoding job.
        decode_timeout: seconds one decoding job may take (a PDF, a video's parts, a probe).
    """

    model_config = ConfigDict(extra="forbid")

    pdf: bool = Field(True, description="PDF attachments are read (their text, and image-only pages as images); false: refused")
    max_pdf_bytes: int = Field(20 * MiB, ge=1024, le=1024 * MiB, description="bytes, largest PDF accepted")
    max_pages: int = Field(50, ge=1, le=5000, description="pages read of one PDF")
    max_page_images: int = Field(4, ge=0, le=50, description="image-only pages rendered for vision tasks")
    render_dpi: int = Field(110, ge=36, le=300, description="dots per inch of a rendered page")
    max_text_bytes: int = Field(512 * 1024, ge=1024, le=64 * MiB, description="bytes of text kept from one PDF")
    max_page_content_bytes: int = Field(4 * MiB, ge=4096, le=256 * MiB,
                                        description="bytes, largest decoded content stream of a PDF page that is read")
    decode_workers: int = Field(decoding.WORKERS, ge=1, le=64, description="decoding jobs (PDF, video, audio) running at once")
    decode_memory_bytes: int = Field(decoding.MEMORY_BYTES, ge=256 * MiB, le=64 * 1024 * MiB,
                                     description="bytes, memory ceiling of one decoding job")
    decode_timeout: float = Field(decoding.TIMEOUT, gt=0, le=3600, description="seconds one decoding job may take")


__all__ = ["POLICIES", "DocumentSettings", "ProviderKeys"]
