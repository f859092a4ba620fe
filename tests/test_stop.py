"""Stopping a run (a Stop button, Ctrl-C once): what finished is kept and answered with, what was
still running is cut, and the turn is stored like any other. Real clients over HTTP against the
sandbox stand-ins; assertions are on what the user gets."""

from __future__ import annotations

import asyncio
import json

import pytest

from hugginggpt.common import record_exit_status
from bot.incoming import ConversationKey, Message, Requester
from adapters.progress import Progress
from bot.service import Service
from bot.settings import load_settings
from pipeline.types import Done, TaskFinished
from tests.conftest import MEDIA_DIR, media_file


@pytest.fixture
async def service(sandbox, tmp_path):
    overrides = sandbox.overrides(tmp_path / "data")
    overrides.setdefault("inference", {}).update({"selection": "top"})
    s = await Service.create(load_settings(env={}, overrides=overrides))
    yield s
    await s.close()


def _plan(*tasks):
    return {"content": json.dumps({"tasks": [{"task": t, "id": i, "dep": [-1], "args": a} for i, (t, a) in enumerate(tasks)]})}


async def test_stop_during_execution_answers_with_what_finished(service, sandbox):
    sandbox.inference.latency.update({"image-to-text": 30, "image-classification": 0.05})
    sandbox.controller.script.append(_plan(("image-classification", {"image": "image-1"}), ("image-to-text", {"image": "image-1"})))
    stop = asyncio.Event()
    progress = Progress()
    key = ConversationKey("test", "w", "c", "stop-1")
    stopped = False
    events = []
    async for event in service.handle(Message("classify and caption", [media_file("chelsea.png")], key=key, who=Requester("terminal", "u1"), stop=stop)):
        events.append(event)
        progress.apply(event)
        if isinstance(event, TaskFinished) and event.result.task_id == 0:
            stopped = True
            stop.set()
    record = events[-1].record
    assert isinstance(events[-1], Done) and stopped
    assert record.stopped and record.status == "partial" and record_exit_status(record) == 130
    assert record.results[0].status == "ok"
    assert record.results[1].status == "failed" and record.results[1].error == "Stopped before it finished."
    assert record.response.startswith("You stopped this run; here is what finished.")
    assert "task 0 (image-classification" in record.response
    assert [progress.tasks[0].state, progress.tasks[1].state] == ["done", "stopped"]
    # the turn is stored with its answer: the next turn of the thread sees it in its history
    conv = await service.conversation_id(key)
    history, _ = await service.store.context(conv, 10_000)
    assert "You stopped this run" in json.dumps([getattr(h, "__dict__", h) for h in history], default=str)


async def test_stop_during_planning_is_one_sentence(service, sandbox):
    sandbox.controller.script.append({"delay": 4})  # planning would succeed after 4 s
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.3, stop.set)
    events = [e async for e in service.handle(Message("draw a cat", stop=stop))]
    record = events[-1].record
    assert record.status == "error" and record.stopped and record_exit_status(record) == 130
    assert record.error == "You stopped this run before its plan was ready."


async def test_a_stop_after_the_run_ended_changes_nothing(service, sandbox):
    stop = asyncio.Event()
    events = [e async for e in service.handle(Message("hello there", stop=stop))]
    stop.set()
    record = events[-1].record
    assert record.status == "ok" and not record.stopped and record.response


def test_ctrl_c_once_stops_hugginggpt_run_with_what_finished(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from sandbox.faulty_controller import FaultyController

    c = FaultyController().start()
    try:
        c.plan = json.dumps({"tasks": [{"task": "image-to-text", "id": 0, "dep": [-1], "args": {"image": "image-1"}}]})
        c.expert_delay = 60
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_"))}
        env.update({"HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data"), "HUGGINGGPT_LLM__BASE_URL": c.url,
                    "HUGGINGGPT_LLM__API_KEY": "sk-test-0000", "HUGGINGGPT_INFERENCE__BASE_URL": f"http://127.0.0.1:{c.port}",
                    "HUGGINGGPT_INFERENCE__SELECTION": "top", "PYTHONUNBUFFERED": "1"})
        p = subprocess.Popen([sys.executable, "-m", "hugginggpt", "run", "describe this photo", "--file", str(MEDIA_DIR / "chelsea.png")],
                             cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = ""
        for line in p.stderr:  # type: ignore[union-attr]  (progress: stderr when stdout is not a terminal)
            seen += line
            if "running on" in line:
                p.send_signal(signal.SIGINT)
                break
        out, rest = p.communicate(timeout=60)
        err = seen + rest
        assert p.returncode == 130, err
        assert "Stopping this run" in err and "Traceback" not in err
        assert "You stopped this run; here is what finished." in out
        assert "task 0 (image-to-text): Stopped before it finished." in out
    finally:
        c.close()


async def test_closing_the_service_while_an_answer_streams_cancels_the_run_cleanly(service, sandbox):
    """Shutdown cancels a run waiting on its answer stream: the run ends cancelled (not with
    ``RuntimeError: aclose(): asynchronous generator is already running``) and its turn is stored
    as interrupted, so the thread's next turn sees it."""
    sandbox.controller.script += [_plan(("image-classification", {"image": "image-1"})), {"delay": 5}]
    key = ConversationKey("test", "w", "c", "close-while-answering")
    stop = asyncio.Event()  # a front end with a Stop button passes one: the answer is awaited beside it

    async def consume() -> list:
        return [e async for e in service.handle(Message("classify", [media_file("chelsea.png")], key=key,
                                                        who=Requester("terminal", "u1"), stop=stop))]

    run = asyncio.create_task(consume())
    for _ in range(300):  # the answer request has reached the controller: the run awaits its stream
        if len(sandbox.controller.requests) >= 2:
            break
        await asyncio.sleep(0.05)
    assert len(sandbox.controller.requests) >= 2
    conv = await service.conversation_id(key)
    await asyncio.sleep(0.1)
    await service.close()
    outcome = (await asyncio.gather(run, return_exceptions=True))[0]
    assert isinstance(outcome, asyncio.CancelledError), repr(outcome)
    again = await Service.create(service.settings)
    try:
        turns = await again.store.turns(conv)
    finally:
        await again.close()
    assert turns[-1]["status"] == "error" and turns[-1]["error"] == "This turn was interrupted before it finished."
