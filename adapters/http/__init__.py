"""The HTTP API (``hugginggpt serve``): platform I/O only, on the same service as the bots.

Modules: :mod:`.app` (the application), :mod:`.openai_api` (``/v1``: chat completions, models,
files), :mod:`.reference` (the reference implementation's ``/hugginggpt``, ``/tasks``, ``/results``),
:mod:`.content` and :mod:`.fetch` (messages and content parts to the service's input),
:mod:`.render` (events to OpenAI objects), :mod:`.runs` (a turn in a task, cancellable),
:mod:`.auth` (keys, budgets, file link signatures), :mod:`.errors` (OpenAI error objects),
:mod:`.common` (what the routes share), :mod:`.models` (request bodies).
"""

from .app import create_app

__all__ = ["create_app"]
