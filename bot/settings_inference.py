"""Settings of today's Inference Providers (re-exported by :mod:`bot.settings`).

``[inference]`` gets its provider keys from :class:`ProviderKeys` (the provider policy, per-task
overrides, billing, the router's URL; the Hub is ``HF_ENDPOINT``). Sources of the words: Hugging Face's Inference Providers documentation
(``provider="auto"`` is the fastest provider by default; ``:fastest``, ``:cheapest``,
``:preferred`` and ``model:provider`` suffixes; ``bill_to`` sends ``X-HF-Bill-To``).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pipeline.experts.providers import POLICIES, check_choice

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


__all__ = ["POLICIES", "ProviderKeys"]
