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

A plan that waits for approval (``[planning] approve``, :mod:`bot.approval`): ``/hugginggpt``
answers ``{"message": <the plan and what to do>, "plan": {"id", "tasks", "cost", "expires"}}``
(nothing run); ``POST /plans/{id}/run`` (body ``{"drop": [task ids]}``, optional) runs it and
answers as ``/hugginggpt``; ``POST /plans/{id}/cancel`` discards it. Only the API key that asked
may run or cancel it: 403 for another, 409 for a plan run, cancelled or expired.

Authentication and limits are those of ``/v1`` (``Authorization: Bearer KEY``).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request

from adapters.turn import Outcome, follow, notice_of
from bot.approval import ApprovalNeeded
from bot.errors import InputError, Refused
from bot.incoming import Approve, Message as Incoming, Requester
from pipeline.types import PlanReady

from .common import caller_of, conversation_of, file_url, read_json, safe_answer, state_of
from .errors import ApiError
from .models import ReferenceRequest, Message, schema_of
from .openai_api import CompletionView, notice_paragraph, run_error, start_run, turn_error
from .runs import Run
from .render import file_links

router = APIRouter(tags=["reference implementation"])


async def _run(request: Request, *, plan_only: bool = False) -> tuple[Any, Any, Outcome | None, tuple | None]:
    """Start the request's turn; ``(caller, run, outcome, planned tasks)``: the outcome once it is
    over (:func:`adapters.turn.follow`, ``None`` when the client went away or ``plan_only``)."""
    caller = await caller_of(request)
    body: ReferenceRequest = await read_json(request, ReferenceRequest)
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
        record = run.record  # the run ended before its plan (refused, or it failed)
        return caller, run, Outcome(*notice_of(record), record) if record else None, None
    if not await run.wait_or_disconnect(request.receive):
        return caller, run, None, None
    return caller, run, *(await _follow(request, caller, run))


async def _follow(request: Request, caller: Any, run: Any) -> tuple[Outcome, tuple[ApprovalNeeded, ...]]:
    """Follow ``run`` to its end; its outcome and the plan it left waiting for approval, if any."""
    waiting: list[ApprovalNeeded] = []

    async def watched() -> Any:
        async for event in run.events():
            if isinstance(event, ApprovalNeeded):
                waiting.append(event)
            yield event

    view = CompletionView(request, caller, run, "none")
    return await follow(watched(), view, where=f"http {run.conversation_id}/{run.turn}"), tuple(waiting)


def _answer(request: Request, caller: Any, run: Any, outcome: Outcome | None, waiting: tuple | None) -> dict[str, Any]:
    """The reference's ``{"message"}`` of a turn (and ``plan`` when its plan waits for approval)."""
    if waiting:
        plan = waiting[0]
        return {"message": plan.text(), "plan": {"id": plan.plan_id, "tasks": [t.to_json() for t in plan.tasks],
                                                 "cost": plan.estimate_usd, "expires": plan.expires}}
    if outcome is None:
        return {"message": "The request was cancelled."}
    record = outcome.record
    if record is None or not record.answered:
        return {"message": outcome.sentence or "The request could not be answered."}
    links = file_links(record.files, lambda f: file_url(request, caller, run.conversation_id or "", f))
    notice = notice_paragraph(outcome.sentence) if outcome.sentence else ""
    return {"message": safe_answer(request, record.response) + links + notice}


@router.post("/hugginggpt", summary="Answer a request (reference implementation)", openapi_extra=schema_of(ReferenceRequest))
async def hugginggpt(request: Request) -> dict[str, Any]:
    """``{"message": <answer with links to the generated files>}`` (and ``plan``: waiting for approval)."""
    caller, run, outcome, waiting = await _run(request)
    return _answer(request, caller, run, outcome, waiting)


async def _pending(request: Request, plan_id: str) -> tuple[Any, Requester]:
    """The caller of a press on plan ``plan_id``, checked (403 another key's, 409 run, cancelled or expired)."""
    caller = await caller_of(request)
    who = Requester("http", caller.key_id)
    try:
        await state_of(request).service.pending_plan(plan_id, who)
    except Refused as e:
        raise ApiError(403, e.user_message, "not_your_plan") from None
    except InputError as e:
        raise ApiError(409, e.user_message, "plan_not_waiting") from None
    return caller, who


@router.post("/plans/{plan_id}/run", summary="Run a plan that waits for approval")
async def run_plan(request: Request, plan_id: str) -> dict[str, Any]:
    """Run the kept plan (less ``drop``'s task ids and what needs them); answered as ``/hugginggpt``."""
    caller, who = await _pending(request, plan_id)
    try:
        body = json.loads(await request.body() or b"{}")
    except ValueError:
        body = None
    drop = body.get("drop", []) if isinstance(body, dict) else None
    if not isinstance(drop, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in drop):
        raise ApiError(400, 'The body must be JSON: {"drop": [task ids]} (or empty).', "invalid_request", "drop")
    st = state_of(request)
    release = await st.keys.reserve(caller)
    run = Run(st.service, Incoming("", who=who, approve=Approve(plan_id, tuple(drop))), on_end=release)
    await run.started()
    outcome, waiting = await _follow(request, caller, run)
    return _answer(request, caller, run, outcome, waiting)


@router.post("/plans/{plan_id}/cancel", summary="Cancel a plan that waits for approval")
async def cancel_plan(request: Request, plan_id: str) -> dict[str, Any]:
    """``{"message": "The plan was cancelled; nothing was run."}``."""
    _, who = await _pending(request, plan_id)
    try:
        return {"message": await state_of(request).service.cancel_plan(plan_id, who)}
    except InputError as e:
        raise ApiError(409, e.user_message, "plan_not_waiting") from None


@router.post("/tasks", summary="Plan a request (reference implementation)", openapi_extra=schema_of(ReferenceRequest))
async def tasks(request: Request) -> list[dict[str, Any]]:
    """The validated task list, the paper's record shape (``dep`` ``[-1]`` when none)."""
    _, _, outcome, planned = await _run(request, plan_only=True)
    record = outcome.record if outcome is not None else None
    if planned is not None:
        return [t.to_json() for t in planned]
    if record is not None and not record.answered:
        raise run_error(record)
    return [t.to_json() for t in (record.tasks if record else [])]


@router.post("/results", summary="Run a request's tasks (reference implementation)", openapi_extra=schema_of(ReferenceRequest))
async def results(request: Request) -> dict[str, Any]:
    """Task id → ``{"task", "inference result", "choose model result"}``."""
    caller, run, outcome, _ = await _run(request)
    if outcome is None:
        raise ApiError(499, "The request was cancelled.", "cancelled")
    record = outcome.record
    if record is None:
        raise turn_error(outcome)
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
