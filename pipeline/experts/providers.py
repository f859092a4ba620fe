"""The provider policy: which Inference Provider runs a model for a task, and in which order the
others are tried when it fails.

Words and rules from Hugging Face's Inference Providers documentation and the installed
``huggingface_hub`` (2.4):

* ``"auto"``: the client's default. For chat models (``conversational``, and the VLMs of
  ``image-text-to-text``, which providers serve through chat completion) the router picks the
  provider server-side (``router.huggingface.co/v1/chat/completions``, the fastest by default, with
  failover); ``model:fastest`` / ``model:cheapest`` / ``model:preferred`` ask for another order.
  For every other task the client takes the *first* live provider of the model's
  ``inferenceProviderMapping``, which the Hub lists in the account's preference order.
* a provider name: only that provider.
* ``model:provider`` (a pin): that model on that provider only, whatever the policy.

What this module adds, because the client does not do it for non-chat tasks: the whole ordered
list of live providers (the client takes one, and has no failover), so the fallback chain moves
across providers before it moves to another model. ``fastest`` for non-chat tasks orders by the
latency this process observed per provider (unobserved ones keep the Hub's order, after observed
ones); ``cheapest`` for non-chat tasks keeps the Hub's order, because the mapping carries no prices
(the router decides ``cheapest`` for chat models).
"""

from __future__ import annotations

import asyncio
import logging
import re
import statistics
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

POLICIES = ("auto", "fastest", "cheapest", "preferred")
"""Policy names accepted where a provider is (``[inference] provider`` and per-task overrides)."""

CHAT_TASKS = frozenset({"conversational", "image-text-to-text", "video-text-to-text", "audio-text-to-text"})
"""Tasks served through chat completion (the router picks a provider for policies): VLMs and
audio language models are chat models whose messages carry image, video or audio parts."""

CLIENT_TASK: dict[str, str] = {"image-text-to-image": "image-to-image", "image-text-to-video": "image-to-video"}
"""Our task → the provider helper of ``huggingface_hub`` 2.4 that runs it: the client has no
``image_text_to_image`` / ``image_text_to_video`` method, and its ``image_to_image`` /
``image_to_video`` helpers take the instruction as ``prompt`` (fal-ai sends ``image_url`` and
``prompt``, as instruction-edit models take them)."""


def client_task(task: str) -> str:
    """The task name the client's provider table and the Hub's provider mapping use for ``task``."""
    return "conversational" if task in CHAT_TASKS else CLIENT_TASK.get(task, task)

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,40}$")


def check_choice(value: str, *, allow_pin: bool = False) -> str:
    """Validate a policy, a provider name or (``allow_pin``) a ``model:provider`` pin.

    Returns:
        ``value`` (a policy lower-cased).

    Raises:
        ValueError: with a sentence naming what is accepted.
    """
    if value.lower() in POLICIES:
        return value.lower()
    if ":" in value:
        model, provider = split_pin(value)
        if not allow_pin or model is None or provider is None:
            raise ValueError(f"{value!r}: a model pinned to a provider ('model:provider') is only accepted per task")
        return value
    if not _NAME.match(value):
        raise ValueError(f"{value!r} is not a provider name or one of {', '.join(POLICIES)}")
    return value


def split_pin(value: str) -> tuple[str | None, str | None]:
    """``"org/model:fal-ai"`` → ``("org/model", "fal-ai")``; ``"org/model"`` → ``("org/model", None)``.

    A Hub model id has no ``:``, so the part after the last one is a provider or a policy.
    Returns ``(None, None)`` for a malformed pin (empty parts, a bad provider name).
    """
    if ":" not in value:
        return value, None
    model, _, provider = value.rpartition(":")
    provider = provider.strip().lower()
    if not model.strip() or not (_NAME.match(provider) or provider in POLICIES):
        return None, None
    return model.strip(), provider


def client_serves(provider: str, task: str) -> bool:
    """Whether the installed ``huggingface_hub`` has a helper for ``task`` on ``provider``
    (its ``PROVIDERS`` table). Chat tasks are served by every provider the router knows (the
    router's OpenAI-compatible route ``/{provider}/v1/chat/completions``)."""
    if task in CHAT_TASKS:
        return True
    try:
        from huggingface_hub.inference._providers import PROVIDERS
    except ImportError:  # pragma: no cover - a client without the table: trust the Hub's mapping
        return True
    return client_task(task) in PROVIDERS.get(provider, {})  # type: ignore[call-overload]


def client_serves_anywhere(task: str) -> bool:
    """Whether some provider of the installed ``huggingface_hub`` has a helper for ``task``
    (chat tasks: always, through the router)."""
    if task in CHAT_TASKS:
        return True
    try:
        from huggingface_hub.inference._providers import PROVIDERS
    except ImportError:  # pragma: no cover - a client without the table: trust the Hub's mapping
        return True
    return any(client_task(task) in tasks for tasks in PROVIDERS.values())


def client_knows(provider: str) -> bool:
    """Whether the installed ``huggingface_hub`` has helpers for ``provider`` at all."""
    try:
        from huggingface_hub.inference._providers import PROVIDERS
    except ImportError:  # pragma: no cover
        return True
    return provider in PROVIDERS


async def warm_mapping(provider: str | None, task: str, model: str) -> None:
    """Do the client's Hub look-ups for ``model`` on ``provider`` ahead, in a worker thread.

    ``huggingface_hub`` looks a model's provider mapping (and, on ``hf-inference``, its pipeline
    tag) up with a synchronous ``HfApi.model_info`` inside the async call, cached per model for the
    process; done here first, the call finds them cached instead of blocking the event loop.
    ``task`` is our task name (:func:`client_task`: ``image-text-to-text`` is the client's
    ``conversational``).
    Failures are not raised here: the client meets them again in the call, where they are mapped
    to one sentence as usual.
    """
    if model.startswith(("http://", "https://")):
        return
    def look_up() -> None:
        from huggingface_hub.inference._providers import get_provider_helper

        helper = get_provider_helper(provider, client_task(task), model)  # type: ignore[arg-type]
        helper._prepare_mapping_info(model)  # noqa: SLF001 - the client's own cached look-up

    try:
        await asyncio.to_thread(look_up)
    except Exception as exc:  # noqa: BLE001 - the call reports it
        log.debug("provider mapping of %s on %s not looked up ahead: %r", model, provider, exc)


@dataclass
class LatencyBook:
    """Seconds each provider took to answer, the last ``keep`` calls per provider (this process)."""

    keep: int = 20
    _seen: dict[str, deque[float]] = field(default_factory=lambda: defaultdict(deque))

    def note(self, provider: str, seconds: float) -> None:
        """Record one successful call of ``provider`` that took ``seconds``."""
        q = self._seen[provider]
        q.append(seconds)
        while len(q) > self.keep:
            q.popleft()

    def median(self, provider: str) -> float | None:
        """The median of the recorded seconds, or ``None`` when never observed."""
        q = self._seen.get(provider)
        return statistics.median(q) if q else None


@dataclass
class ProviderPolicy:
    """``[inference] provider`` and ``[inference.providers]`` as rules.

    Args:
        default: a policy, a provider name, or ``None`` (no provider at all).
        per_task: task → policy, provider name, or ``model:provider``.
    """

    default: str | None = "auto"
    per_task: Mapping[str, str] = field(default_factory=dict)
    latency: LatencyBook = field(default_factory=LatencyBook)

    def choice(self, task: str, model: str | None = None) -> str | None:
        """The policy or provider for ``task`` (and ``model``): a pin of that model wins, then the
        task's override (a pin of another model does not apply to ``model``), then the default."""
        if model is not None:
            _, pinned = split_pin(model)
            if pinned is not None:
                return pinned
        override = self.per_task.get(task)
        if override is not None:
            pin_model, pinned = split_pin(override)
            if pinned is None:
                return override
            if model is None or pin_model == model:
                return pinned
        return self.default

    def pinned_model(self, task: str) -> str | None:
        """The model a per-task ``model:provider`` override pins, if any."""
        override = self.per_task.get(task)
        if override is None or ":" not in override:
            return None
        return split_pin(override)[0]

    def order(self, task: str, model: str, live: Iterable[str]) -> list[str]:
        """The providers to try for ``model`` on ``task``, first first.

        Args:
            task: registry task name.
            model: model id (a ``:provider`` suffix pins it).
            live: the model's live providers in the Hub's order (``inferenceProviderMapping``).

        Returns:
            For a chat task under a policy: ``["auto"]`` or ``["auto:<policy>"]`` (the router
            decides and fails over itself). Otherwise the live providers the client can call for
            the task, in the policy's order; ``[]`` when none (or no provider is configured).
        """
        choice = self.choice(task, model)
        if choice is None:
            return []
        live = list(dict.fromkeys(live))
        if choice in POLICIES:
            if task in CHAT_TASKS:
                return ["auto"] if choice == "auto" and live else ([f"auto:{choice}"] if live else [])
            served = [p for p in live if client_serves(p, task)]
            if choice == "fastest":
                observed = sorted((p for p in served if self.latency.median(p) is not None),
                                  key=lambda p: self.latency.median(p) or 0.0)
                return observed + [p for p in served if p not in observed]
            return served
        return [choice] if choice in live and client_serves(choice, task) else []

    def serves(self, task: str, model: str, live: Iterable[str]) -> bool:
        """Whether the policy can run ``model`` for ``task`` on one of its ``live`` providers."""
        return bool(self.order(task, model, live))
