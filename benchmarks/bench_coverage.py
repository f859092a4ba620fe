"""Nothing silently dropped, measured: ``python -m benchmarks.bench_coverage [--limit N]``.

Runs real requests with their real files through the pipeline on the sandbox stand-ins, as the
service runs a one-off request (its files checked, a PDF expanded into its text file and page
images, a video's sound and frames read out of it):

- ``tests/fixtures/runs/requests.jsonl``: 24 TaskBench requests with the photo and speech they name;
- TaskBench's multimedia requests that name only ``example.jpg``, ``example.wav`` and
  ``example.mp4``, attached from ``tests/fixtures/media`` (the cat photo, the weather speech, the
  rocket video with speech);
- the requests of issue 32: "Summarize this PDF" with a text PDF and with a scanned one (built from
  the cat photo), "Describe both photos" with two photos, "What objects are in this video".

For each run it reads, from the run's own record and the files stored for it (not from
:mod:`pipeline.coverage`), which attached files some task read (a video counts when it or one of
its parts is read), and prints: attachments used / attached, runs ending ``ok`` with something
skipped (an attached file unused, or a task of the last round not ``ok``: must be 0), runs ending
``partial`` and runs refused or failed. It also reads the 65 recorded plans of
``tests/fixtures/plans/quirky_plans.jsonl`` (nothing run) and counts those that leave a file the
request names unused: each of those gets the repair round before it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import logging
import re
import tempfile
from collections import Counter
from pathlib import Path

from PIL import Image

from benchmarks.harness.crafted_files import text_page_pdf
from bot.incoming import IncomingFile
from bot.service import Service
from bot.settings import load_settings
from bot.store import LocalResourceSink
from hugginggpt.evaluation.plans import load_plans
from hugginggpt.evaluation.runs import RunCase, load_cases
from pipeline.errors import HuggingGPTError
from pipeline.planning import PlanInvalid, parse_plan, read_plan
from pipeline.replanning import last_round_ids, unsettled
from pipeline.tasks import TASKS
from pipeline.types import Done, Request, RunRecord
from sandbox import Sandbox

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
MEDIA = FIXTURES / "media"
AS_NAMED = {"example.jpg": "chelsea.png", "example.wav": "speech_weather.wav", "example.mp4": "rocket_speech.mp4"}
_NAMES = re.compile(r"\b[\w-]+\.(?:jpe?g|png|wav|mp3|mp4|txt|pdf|gif|flac|csv)\b", re.IGNORECASE)


def taskbench_cases(limit: int) -> list[RunCase]:
    """TaskBench multimedia requests naming only the files we have, those files attached."""
    out = []
    for line in (FIXTURES / "taskbench" / "data_multimedia_requests.jsonl").read_text().splitlines():
        raw = json.loads(line)
        text = raw["user_request"]
        names = list(dict.fromkeys(n.lower() for n in _NAMES.findall(text)))
        if not names or any(n not in AS_NAMED for n in names) or "http" in text:
            continue
        out.append(RunCase(f"tb-{raw['id']}", text, [(MEDIA / AS_NAMED[n], n) for n in names]))
        if len(out) == limit:
            break
    return out


def issue_cases(folder: Path) -> list[RunCase]:
    """The requests issue 32 found dropping part of their files, with real files."""
    (folder / "report.pdf").write_bytes(text_page_pdf())
    buf = io.BytesIO()
    Image.open(MEDIA / "chelsea.png").convert("RGB").save(buf, "PDF", resolution=72)
    (folder / "scan.pdf").write_bytes(buf.getvalue())
    return [
        RunCase("pdf-text", "Summarize this PDF", [(folder / "report.pdf", "report.pdf")]),
        RunCase("pdf-scan", "Summarize this PDF", [(folder / "scan.pdf", "scan.pdf")]),
        RunCase("two-photos", "Describe both photos", [(MEDIA / "chelsea.png", "chelsea.png"), (MEDIA / "coffee.png", "coffee.png")]),
        RunCase("video-objects", "What objects are in this video", [(MEDIA / "rocket_zoom.mp4", "rocket_zoom.mp4")]),
    ]


async def run_one(service: Service, case: RunCase) -> tuple[int, int, RunRecord | None, str | None]:
    """One request as the service runs a one-off: ``(attached, used, record, refusal)``."""
    sink = LocalResourceSink(service.media)
    try:
        checked = await service.check_files([IncomingFile(p.read_bytes(), name=n) for p, n in case.files])
        files = [await sink.add(f.data, kind=f.checked.kind, mime=f.checked.mime, origin="user",  # type: ignore[union-attr]
                                description=f.checked.description, name=f.name) for f in checked]  # type: ignore[union-attr]
    except HuggingGPTError as e:
        return 0, 0, None, e.user_message
    record = None
    async for event in service.pipeline.run(Request(text=case.request, files=files), sink):
        if isinstance(event, Done):
            record = event.record
    assert record is not None
    read = {v for t in record.tasks for v in t.args.values()}
    parts = {r.id: r.origin for r in sink.resources if r.origin != "user"}
    used = sum(1 for f in files if f.id in read or any(parts.get(v) == f.id for v in read))
    return len(files), used, record, None


def skipped_but_ok(record: RunRecord, attached: int, used: int) -> bool:
    """A run that says ``ok`` though part of it was not done."""
    return record.status == "ok" and (used < attached or bool(unsettled(record.tasks, record.results,
                                                                        last_round_ids(record.rounds))))


async def measure(cases: list[RunCase]) -> dict[str, object]:
    attached = used = ok_skipped = 0
    statuses: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        async with Sandbox() as sandbox:
            service = await Service.create(load_settings(env={}, overrides=sandbox.overrides(Path(tmp) / "data")),
                                           conversations=False)
            try:
                for case in cases:
                    a, u, record, refused = await run_one(service, case)
                    attached, used = attached + a, used + u
                    statuses[refused and "refused" or record.status] += 1  # type: ignore[union-attr]
                    ok_skipped += record is not None and skipped_but_ok(record, a, u)
            finally:
                await service.close()
    return {"runs": len(cases), "attached": attached, "used": used, "ok_skipped": ok_skipped, **statuses}


def recorded_plans() -> tuple[int, int]:
    """Of the recorded plans that read as valid: how many leave a file the request names unused."""
    available = frozenset(n for n, s in TASKS.items() if s.domain != "mcp")
    total = unused = 0
    for case in load_plans((FIXTURES / "plans" / "quirky_plans.jsonl").read_text()):
        try:
            tasks = read_plan(parse_plan(json.dumps(case.records)), available=available, resources=case.resources,
                              request_text=case.request).tasks
        except PlanInvalid:
            continue
        total += 1
        read = {v for t in tasks for v in t.args.values()}
        unused += any(r.id not in read for r in case.resources)
    return total, unused


def main(limit: int) -> None:
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as folder:
        groups = {
            "TaskBench runs (tests/fixtures/runs)": load_cases(FIXTURES / "runs" / "requests.jsonl")[:limit],
            "TaskBench multimedia (example.jpg/.wav/.mp4)": taskbench_cases(limit),
            "issue 32 requests (PDFs, two photos, video)": issue_cases(Path(folder)),
        }
        print("| requests | runs | attachments used / attached | ok with something skipped | partial | error | refused |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for title, cases in groups.items():
            m = asyncio.run(measure(cases))
            print(f"| {title} | {m['runs']} | {m['used']} / {m['attached']} | {m['ok_skipped']} | {m.get('partial', 0)} "
                  f"| {m.get('error', 0)} | {m.get('refused', 0)} |")
    total, unused = recorded_plans()
    print(f"recorded plans (tests/fixtures/plans): {unused} of {total} valid plans leave a named file unused "
          "(each gets the repair round with that fact before it runs)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=24, help="requests per TaskBench group (default 24)")
    main(parser.parse_args().limit)
