"""What agent clients (the MCP server, :mod:`adapters.mcp`) ask of the service besides a whole
turn: task planning alone (HuggingGPT §3.1, nothing run), and one task of the registry on its
own (§3.2 model selection and §3.3 execution, with the usual fallbacks, no planning and no
answer). Both are one-off: their files go to the media store, outside any conversation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pipeline.llm import Usage
from pipeline.planning import plan
from pipeline.tasks import TASKS
from pipeline.types import Event, Request, Resource, Selection, Task, TaskResult

from .errors import InputError
from .incoming import IncomingFile
from .service import Service
from .store import LocalResourceSink


async def _stored(service: Service, files: Sequence[IncomingFile], sink: LocalResourceSink) -> list[Resource]:
    checked = await service.check_files(files)
    out = []
    for f in checked:
        info = f.checked
        assert info is not None  # check_files marks every file
        out.append(await sink.add(f.data, kind=info.kind, mime=info.mime, origin="user", description=info.description,
                                  name=f.name))
    return out


async def plan_only(service: Service, text: str, files: Sequence[IncomingFile] = ()) -> list[Task]:
    """Task planning of ``text`` with ``files``, within the run's deadline; nothing is executed.

    Returns:
        The validated task graph (``[]``: the controller would answer directly).

    Raises:
        InputError: no text, or an unusable file.
        PlanError, ControllerError: as :func:`pipeline.planning.plan`.
        DeadlineError: ``[inference] deadline`` seconds passed.
    """
    if not text.strip():
        raise InputError("Please write a request to plan.")
    sink = LocalResourceSink(service.media)
    request = Request(text=text.strip(), files=await _stored(service, files, sink))
    pipeline = service.pipeline
    async with asyncio.timeout(pipeline.limits.deadline):
        available, _ = pipeline.selector.offered_tasks(await pipeline.served_tasks(), request.text)
        return await plan(pipeline.controller, request, available, Usage())


@dataclass
class SingleTask:
    """The outcome of one task run on its own: its selection (``None`` when none was made) and result."""

    selection: Selection | None
    result: TaskResult


async def run_task(
    service: Service, task: str, text_args: dict[str, str], files: dict[str, IncomingFile],
    emit: Callable[[Event], None] = lambda e: None,
) -> SingleTask:
    """Run the registry task ``task`` once: model selection, then execution with fallbacks.

    Args:
        text_args: text arguments by key (``"text"``, ``"context"``).
        files: file arguments by key (``"image"``, ``"audio"``, ``"video"``).
        emit: called with the execution's events (model selected, task started/finished).

    Raises:
        InputError: an unknown task, a missing or unexpected argument, an unusable file or one of
            another kind than the argument takes.
        HuggingGPTError: an error that is not the model's (storage).
    """
    spec = TASKS.get(task)
    if spec is None or spec.domain == "mcp":
        raise InputError(f"There is no task called {task}.")
    keys = list(files)
    sink = LocalResourceSink(service.media)
    stored = dict(zip(keys, await _stored(service, [files[k] for k in keys], sink)))
    for key, res in stored.items():
        if res.kind != spec.allowed[key]:
            raise InputError(f"The argument '{key}' of {task} must be {spec.allowed[key]}, but the file is {res.kind}.")
    args = {**text_args, **{k: r.id for k, r in stored.items()}}
    request = Request(text=text_args.get("text", task), files=list(stored.values()))
    pipeline = service.pipeline
    end = asyncio.get_running_loop().time() + pipeline.limits.deadline
    selections, results = await pipeline.executor.execute([Task(0, task, (), args)], request, sink, emit, Usage(), end=end)
    return SingleTask(selections.get(0), results.get(0) or TaskResult(0, "failed", error=f"{task} did not run."))
