"""The live renderer on its own (a rich console writing to memory, a clock the test moves): what
stays in the scrollback after a run, and what a model's answer may not do to a terminal."""

from __future__ import annotations

import io
import re

from rich.console import Console

from adapters.terminal.live import LiveRenderer, answer_markdown
from pipeline.types import Done, ResponseDelta, RunRecord
from tests.test_progress import EVENTS, PLAN

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _console(buf: io.StringIO) -> Console:
    return Console(file=buf, width=120, height=30, force_terminal=True, color_system="standard")


def test_after_a_run_the_tasks_with_states_and_seconds_then_the_answer_stay():
    buf, now = io.StringIO(), [100.0]
    r = LiveRenderer(_console(buf), clock=lambda: now[0])
    for i, e in enumerate(EVENTS):
        now[0] = 100.0 + 0.5 * i
        r.render(e)
    now[0] = 106.0
    r.render(ResponseDelta("A cat on a **sofa**."))
    r.render(Done(RunRecord("r", tasks=list(PLAN), response="A cat on a **sofa**.", status="partial",
                            timings_ms={"total": 6000.0})))
    text = _ANSI.sub("", buf.getvalue())
    final = text[text.rindex("[1] image-to-text"):]  # what stays after the live region is cleared
    assert "[1] image-to-text  done by Salesforce/blip-image-captioning-large  1.5 s"  # started at 101.0, done at 102.5 in final
    assert "[3] object-detection  failed  1.0 s: The model facebook/detr-resnet-50 is still loading." in final
    assert "[4] image-classification  skipped: Task 3, whose output it needs, did not succeed." in final
    assert "[2] text-to-speech  stopped" in final  # never ran: the run ended without it
    assert "A cat on a sofa." in final and "**" not in final
    assert final.rstrip().endswith("Done in 6.0 s.")


def test_an_answer_cannot_drive_the_terminal_and_links_show_their_address():
    buf = io.StringIO()
    _console(buf).print(answer_markdown("See [the docs](https://evil.example/x)\x1b]0;pwned\x07\x1b[2J done"))
    out = buf.getvalue()
    assert "\x1b]" not in out and "\x1b[2J" not in out and "pwned" not in out
    assert "the docs (https://evil.example/x)" in _ANSI.sub("", out)
