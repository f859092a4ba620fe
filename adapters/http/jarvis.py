"""The reference implementation's endpoints (microsoft/JARVIS ``hugginggpt/server``,
``awesome_chat.py``), so its clients and web demo work against this server.

Requests: ``{"messages": [{"role", "content"}, ...]}`` (the last message is the request, the
others its context; its ``api_key``/``openaikey``/``api_endpoint`` fields are ignored: the
controller is this server's). Answers, as there:

* ``POST /hugginggpt`` → ``{"message": <answer>}`` (generated files linked after the text; a
  failed run answers ``{"message": <the reason>}`` as the reference does);
* ``POST /tasks`` → the task list ``[{"task", "id", "dep", "args"}]`` (task planning only: the
  run is stopped once the plan is ready);
* ``POST /results`` → ``{"<task id>": {"task": {...}, "inference result": {...},
  "choose model result": {"id", "reason"}}}``.

Authentication and limits are those of ``/v1`` (``Authorization: Bearer KEY``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from pipeline.types import PlanReady, RunRecord

from .common import caller_of, conversation_of, file_url, read_json, safe_answer
from .errors import ApiError
from .models import JarvisRequest, Message, schema_of
from .openai_api import run_error, start_run
from .render import file_links

router = APIRouter(tags=["reference implementation"])


async def _run(request: Request, *, plan_only: bool = False) -> tuple[Any, Any, RunRecord | None, tuple | None]:
    caller = await caller_of(request)
    body: JarvisRequest = await read_json(request, JarvisRequest)
    messages = [Message(role=m.role if m.role in ("system", "user", "assistant") else "user", content=m.content)
                for m in body.messages]
    if messages[-1].role != "user":
        messages[-1] = Message(role="user", content=messages[-1].content)
    run = await start_run(request, caller, messages, conversation_of(request, caller, None), None)
    if plan_only:
        async for event in run.events():
            if isinstance(event, PlanReady):
                await run.cancel()
                return caller, run, None, event.tasks
        return caller, run, run.record, None
    if not await run.wait_or_disconnect(request.receive):
        return caller, run, None, None
    async for _ in run.events():
        pass
    return caller, run, run.record, None


@router.post("/hugginggpt", summary="Answer a request (reference implementation)", openapi_extra=schema_of(JarvisRequest))
async def hugginggpt(request: Request) -> dict[str, Any]:
    """``{"message": <answer with links to the generated files>}``."""
    caller, run, record, _ = await _run(request)
    if record is None:
        return {"message": "The request was cancelled."}
    if not record.answered:
        return {"message": record.error or "The request could not be answered."}
    links = file_links(record.files, lambda f: file_url(request, caller, run.conversation_id or "", f))
    return {"message": safe_answer(request, record.response) + links}


@router.post("/tasks", summary="Plan a request (reference implementation)", openapi_extra=schema_of(JarvisRequest))
async def tasks(request: Request) -> list[dict[str, Any]]:
    """The validated task list, the paper's record shape (``dep`` ``[-1]`` when none)."""
    _, _, record, planned = await _run(request, plan_only=True)
    if planned is not None:
        return [t.to_json() for t in planned]
    if record is not None and not record.answered:
        raise run_error(record)
    return [t.to_json() for t in (record.tasks if record else [])]


@router.post("/results", summary="Run a request's tasks (reference implementation)", openapi_extra=schema_of(JarvisRequest))
async def results(request: Request) -> dict[str, Any]:
    """Task id → ``{"task", "inference result", "choose model result"}``."""
    caller, run, record, _ = await _run(request)
    if record is None:
        raise ApiError(499, "The request was cancelled.", "cancelled")
    if not record.answered and not record.results:
        raise run_error(record)
    out: dict[str, Any] = {}
    for task in record.tasks:
        result = record.results.get(task.id)
        selection = record.selections.get(task.id)
        inference: dict[str, Any]
        if result is None:
            inference = {"error": "The task did not run."}
        elif result.status != "ok" or result.output is None:
            inference = {"error": result.error or f"The task was {result.status}."}
        else:
            inference = {}
            if result.output.text is not None:
                inference["generated text"] = result.output.text
            for f in result.output.files:
                inference[f"generated {f.kind}"] = file_url(request, caller, run.conversation_id or "", f)
            if result.output.data is not None:
                inference["data"] = result.output.data.to_json()
        out[str(task.id)] = {
            "task": task.to_json(),
            "inference result": inference,
            "choose model result": {"id": selection.model, "reason": selection.reason} if selection else None,
        }
    return out
