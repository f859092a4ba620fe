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
from collections.abc import Awaitable, Callable, Iterable, Mapping
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

REMOVED = frozenset({"black-forest-labs", "clarifai", "hyperbolic", "nebius", "nvidia", "sambanova"})
"""Providers Hugging Face removed from the Inference Providers router on 2026-07-01 (their helpers
are gone from ``huggingface_hub.inference._providers``). Never routed to, whatever a model's
``inferenceProviderMapping`` still says."""
REMOVED_ON = "2026-07-01"
ENABLED_PAGE = "https://huggingface.co/settings/inference-providers"
"""Where an account enables and orders its Inference Providers."""

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


def routable(providers: Iterable[str]) -> list[str]:
    """``providers`` (in order, once each) without the :data:`REMOVED` ones: what may be sent to."""
    return [p for p in dict.fromkeys(providers) if p not in REMOVED]


def provider_problem(setting: str, provider: str, seen_live: Iterable[str] = (), value: str | None = None) -> str | None:
    """The one sentence for a configured provider that cannot be used, or ``None``.

    Args:
        setting: how the user names the setting (``"[inference] provider"``,
            ``"[inference.providers] \"text-to-image\""``).
        provider: the provider it names (a policy is never a problem).
        seen_live: providers the Hub listed as live for some model (the router knows providers the
            installed client has no helper for).
        value: the setting's value as written (a ``model:provider`` pin), default ``provider``.

    Returns:
        A sentence saying the provider was removed (:data:`REMOVED`) or is unknown (neither in the
        installed client's table nor seen live on the Hub), and what to do (:data:`ENABLED_PAGE`).
    """
    if provider in POLICIES:
        return None
    if provider in REMOVED:
        why = f"names {provider}, which Hugging Face removed from Inference Providers on {REMOVED_ON}"
    elif client_knows(provider) or provider in set(seen_live):
        return None
    else:
        why = f"names {provider}, which is not a provider the Hugging Face router knows"
    return f"{setting} = \"{value or provider}\" {why}; set it to \"auto\" or to a provider enabled at {ENABLED_PAGE}."


async def watch_providers(policy: ProviderPolicy, live_of: Callable[[str], Awaitable[tuple[str, ...] | None]],
                          interval: float) -> None:
    """Log :meth:`ProviderPolicy.problems` now and again every ``interval`` seconds (``0``: once),
    each sentence when it first appears (a warning) and when it is gone (info). Runs until cancelled.

    Args:
        policy: the provider policy of the settings.
        live_of: model id → its live providers from the Hub (``None`` when the Hub did not answer).
        interval: seconds between checks (``[catalog] availability_ttl``).
    """
    said: set[str] = set()
    while True:
        try:
            now = set(await policy.problems(live_of))
        except Exception as exc:  # noqa: BLE001 - a check that failed is tried again at the next tick
            log.warning("provider check failed (%r); trying again in %g s", exc, interval)
            now = said
        for sentence in sorted(now - said):
            log.warning("provider settings: %s", sentence)
        for sentence in sorted(said - now):
            log.info("provider settings: resolved: %s", sentence)
        said = now
        if interval <= 0:
            return
        await asyncio.sleep(interval)


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
    seen_live: set[str] = field(default_factory=set)
    """Providers the Hub listed as live for a model this process looked up (filled by
    :class:`pipeline.catalog.availability.Availability`)."""

    def configured(self) -> list[tuple[str, str, str, str | None]]:
        """Every provider the settings name: ``(setting, value as written, provider, pinned model
        or None)``; policies included."""
        out = [] if self.default is None else [("[inference] provider", self.default, self.default, None)]
        for task, value in sorted(self.per_task.items()):
            model, pinned = split_pin(value)
            out.append((f'[inference.providers] "{task}"', value, pinned or value, model if pinned else None))
        return out

    def problem_for(self, task: str) -> str | None:
        """The sentence for the provider setting ``task`` would use (its override, else the
        default) when that provider is removed or unknown (:func:`provider_problem`), else ``None``."""
        override = self.per_task.get(task)
        if override is not None:
            pinned = split_pin(override)[1]
            return provider_problem(f'[inference.providers] "{task}"', pinned or override, self.seen_live, override)
        return None if self.default is None else provider_problem("[inference] provider", self.default, self.seen_live)

    async def problems(self, live_of: Callable[[str], Awaitable[tuple[str, ...] | None]]) -> list[str]:
        """One sentence per provider setting that cannot be used: a removed or unknown provider
        (:func:`provider_problem`), or a ``model:provider`` pin whose model the Hub does not list
        as live on that provider (``live_of(model)``: its live providers, ``None`` when the Hub
        did not answer; then only the provider name is checked)."""
        out = []
        for setting, value, provider, model in self.configured():
            sentence = provider_problem(setting, provider, self.seen_live, value)
            if sentence is None and model is not None and provider not in POLICIES:
                live = await live_of(model)
                if live is not None and provider not in routable(live):
                    listed = ", ".join(routable(live)) or "no live provider"
                    sentence = (f'{setting} = "{value}" pins {model} to {provider}, which does not serve it now '
                                f'(the Hub lists {listed}); pin one of those or a provider enabled at {ENABLED_PAGE}.')
            if sentence is not None:
                out.append(sentence)
        return out

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
        live = routable(live)  # a mapping may still list a removed provider: never sent to
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
