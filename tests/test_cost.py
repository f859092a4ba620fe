"""What runs cost, and budgets: the estimate of a plan and the actual cost of a run on the sandbox
(whose stand-ins report tokens as OpenAI's ``usage`` and billed seconds as Hugging Face inference's
``x-compute-time``), recorded per turn on SQLite and PostgreSQL, shown by ``hugginggpt usage``;
budgets refusing with one sentence, and 20 concurrent reservations never passing one budget.
"""

from __future__ import annotations

import asyncio
import math
import os
import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx2
import pytest

from bot.budgets import FLUSH_SECONDS, refusal_sentence
from bot.errors import ConfigError, StorageError
from bot.incoming import ConversationKey, Message, Requester
from bot.service import Service
from bot.settings import load_settings
from bot.store.sql import spend
from bot.stored import Limit, Overspent, Payer, Settled, period_bounds
from pipeline.cost import PriceFileError, PriceTable, dollars, estimate_plan
from pipeline.experts.http import MAX_BILLED_SECONDS, billed_seconds
from pipeline.types import Task
from sandbox.routing import content_text

ROOT = Path(__file__).resolve().parent.parent
PER_SECOND, PER_IMAGE = 0.5, 0.02
"""The test's prices of the sandbox's gateway: dollars per billed second, per generated image."""
PRICES_IN, PRICES_OUT = 2.0, 8.0
"""The test's controller prices, dollars per million tokens read and written."""
SLACK_USER = Requester("slack", "U1", ("C1",), "T1")


def priced(sandbox, tmp_path: Path, backend: str, request, **sections) -> dict:
    """The sandbox's settings with a price file for its gateway and controller prices."""
    table = tmp_path / "prices.toml"
    table.write_text(f"[providers.gateway]\nper_second = {PER_SECOND}\n"
                     f"[providers.gateway.tasks.text-to-image]\nper_image = {PER_IMAGE}\n")
    o = sandbox.overrides(tmp_path / "data")
    o["llm"].update(price_input_per_million=PRICES_IN, price_output_per_million=PRICES_OUT)
    o["prices"] = {"file": str(table)}
    if backend == "postgres":
        o["storage"]["database_url"] = request.getfixturevalue("postgres_url")
    for name, values in sections.items():
        o.setdefault(name, {}).update(values)
    return o


async def ask(service: Service, text: str, who: Requester = SLACK_USER, thread: str = "t1") -> list:
    key = ConversationKey("slack", "T1", "C1", thread)
    return [e async for e in service.handle(Message(text, [], key=key, who=who))]


def prompt_tokens(controller) -> int:
    """The prompt tokens the controller stand-in reported for every call it answered (its rule:
    about four characters a token per message)."""
    return sum((len(content_text(m)) + 3) // 4 for r in controller.requests
               for m in r.body.get("messages", []) if isinstance(m, dict))


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_sandbox_run_records_its_estimate_and_its_actual_cost_per_turn(sandbox, tmp_path, backend, request):
    service = await Service.create(load_settings(env={}, overrides=priced(sandbox, tmp_path, backend, request)))
    try:
        events = await ask(service, "Generate an image of a cat on a red sofa")
    finally:
        await service.close()
    record = events[-1].record
    assert record.status == "ok"
    [ready] = [e for e in events if type(e).__name__ == "PlanReady"]
    assert ready.estimate is record.estimate and record.estimate.usd is not None and record.estimate.usd > 0
    [task, controller] = record.cost.lines
    # the expert line: the seconds the stand-in reported in x-compute-time, at the table's prices
    billed = record.results[0].output.billed_seconds
    [served] = [r for r in sandbox.inference.records if r.status == 200]
    assert billed is not None and 0 < billed <= served.end - served.start
    assert task.usd == pytest.approx(PER_SECOND * billed + PER_IMAGE) and "s billed" in task.basis
    # the controller line: every call's tokens, streamed ones included (stream_options.include_usage)
    assert any(r.body.get("stream") and r.body.get("stream_options") == {"include_usage": True}
               for r in sandbox.controller.requests)
    prompt = prompt_tokens(sandbox.controller)
    assert controller.basis.startswith(f"{prompt} in, ")
    completion = int(controller.basis.split(", ")[1].split()[0])
    assert completion > 0 and controller.usd == pytest.approx((prompt * PRICES_IN + completion * PRICES_OUT) / 1e6)
    assert record.to_json()["cost"]["actual"]["usd"] == pytest.approx(task.usd + controller.usd, abs=1e-6)
    # stored per turn, read back by `hugginggpt usage --csv` as a user runs it
    env = {**os.environ, "HUGGINGGPT_STORAGE__DATA_DIR": str(tmp_path / "data")}
    if backend == "postgres":
        env["HUGGINGGPT_STORAGE__DATABASE_URL"] = request.getfixturevalue("postgres_url")
    month = datetime.now(timezone.utc).strftime("%Y-%m")
    out = subprocess.run([sys.executable, "-m", "hugginggpt", "usage", "--by", "channel", "--csv"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "period,by,id,runs,estimate_usd,charged_usd,unknown_cost_runs",
        f"{month},channel,slack:C1,1,{record.estimate.usd:.6f},{record.cost.usd:.6f},0",
    ]


async def test_a_missing_price_is_unknown_never_zero(sandbox, tmp_path, request):
    o = sandbox.overrides(tmp_path / "data")  # no price for the gateway, none for the controller
    service = await Service.create(load_settings(env={}, overrides={**o, "prices": {"show_cost": True}}))
    try:
        events = await ask(service, "Generate an image of a cat on a red sofa")
    finally:
        await service.close()
    record = events[-1].record
    assert record.estimate.usd is None and record.cost.usd is None and record.cost.known_usd == 0
    assert record.to_json()["cost"]["actual"]["usd"] is None
    assert all(line.usd is None for line in record.cost.lines)
    assert record.response.endswith("Cost: unknown (a price is missing; $0.0000 known, estimated unknown).")


async def test_show_cost_ends_the_answer_with_its_cost(sandbox, tmp_path, request):
    o = priced(sandbox, tmp_path, "sqlite", request, prices={"show_cost": True})
    service = await Service.create(load_settings(env={}, overrides=o))
    try:
        events = await ask(service, "Generate an image of a cat on a red sofa")
    finally:
        await service.close()
    record = events[-1].record
    footer = f"Cost: {dollars(record.cost.usd)} (estimated {dollars(record.estimate.usd)})."
    assert footer.startswith("Cost: $0.0")  # an image and the controller's tokens at the test's prices
    assert record.response.endswith("\n\n" + footer)
    assert "".join(e.text for e in events if type(e).__name__ == "ResponseDelta").endswith(footer)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_budget_refuses_a_plan_that_would_pass_it_and_then_a_spent_one(sandbox, tmp_path, backend, request):
    o = priced(sandbox, tmp_path, backend, request, budgets={"per_channel_day": 0.05, "per_user_month": 10.0},
               slack={"rate_limit_per_minute": 0})
    service = await Service.create(load_settings(env={}, overrides=o))
    try:
        refused = (await ask(service, "Generate an image of a cat on a red sofa"))[-1].record
        assert refused.status == "error" and refused.results == {}
        estimate = refused.estimate.known_usd
        assert refused.error == (f"This plan's estimated cost of {dollars(estimate)} would pass this channel's daily "
                                 f"budget of $0.0500 ($0.0000 spent); it resets at 00:00 UTC.")
        assert not sandbox.inference.records  # refused before any task ran: no eager start while gated
        # runs without experts fit until the channel's day is spent; each run's tokens are charged
        errors = []
        for n in range(12):
            errors.append((await ask(service, "Tell me a short joke about cats", thread=f"j{n}"))[-1].record.error)
            if errors[-1] and errors[-1].startswith("This plan's"):  # its planning tokens count once written
                await asyncio.sleep(FLUSH_SECONDS + 0.5)
        spent = "This channel's daily budget of $0.0500 is spent; it resets at 00:00 UTC."
        assert errors[0] is None and spent in errors
        first = errors.index(spent)
        assert all(e is None or e.startswith("This plan's estimated cost of ") for e in errors[:first])
        assert set(errors[first:]) == {spent}
        other = Requester("slack", "U2", ("C2",), "T1")  # another channel has its own budget
        assert (await ask(service, "Tell me a short joke about cats", who=other, thread="x"))[-1].record.status == "ok"
    finally:
        await service.close()


async def test_twenty_concurrent_reservations_never_pass_one_budget(new_store):
    """Two stores on one database stand for two processes; 20 runs reserve $0.30 at once against
    a $5.00 budget: exactly 16 fit, and what is counted never passes $5.00."""
    a, b = new_store(), new_store()
    await a.open()
    await b.open()
    try:
        now = time.time()
        since, until = period_bounds("day", now)
        limits = [Limit("channel", "slack:C1", "day", 5.0, since, until), Limit("user", "slack:U1", "day", 100.0, since, until)]
        payer = Payer("slack", "slack:U1", "slack:C1", "slack:T1")
        results = await asyncio.gather(*[(a, b)[n % 2].reserve_spend(f"run{n}", payer, 0.30, limits) for n in range(20)])
        refused = [r for r in results if r is not None]
        assert len(refused) == 4 and all(r.limit.scope == "channel" for r in refused)
        assert all(r.spent == pytest.approx(4.80) for r in refused)
        [row] = await a.spend_report("channel", since, until)
        assert row.runs == 16 and row.charged_usd == pytest.approx(4.80)
        await b.settle_spends([Settled("run0", payer, now, 0.30, 0.10, 0.10)])  # the actual cost frees $0.20
        assert await a.reserve_spend("late", payer, 0.30, limits) is None
        assert (await b.reserve_spend("later", payer, 0.30, limits)).spent == pytest.approx(4.90)
    finally:
        await a.close()
        await b.close()


async def test_what_was_spent_before_budgets_and_before_revision_0010_counts(tmp_path):
    """Runs recorded with no budget set count once one is set; and a database of revision 0009
    (no ``spend_total``) gets its periods' totals from its runs when it upgrades."""
    from bot.store import MediaStore
    from tests.test_store import sqlite_at

    data, now = tmp_path / "data", time.time()
    payer, since_until = Payer("slack", "slack:U1", "slack:C1", "slack:T1"), period_bounds("month", now)
    limits = [Limit("team", "slack:T1", "month", 5.0, *since_until)]
    async with sqlite_at(data, MediaStore(data)) as s:
        await s.settle_spends([Settled("old", payer, now, None, 5.0, 5.0)])  # recorded only: no budget then
        assert (await s.check_spend(payer, limits)).spent == pytest.approx(5.0)
    with sqlite3.connect(data / "conversations.sqlite3") as db:  # as revision 0009 left it
        db.execute("DROP TABLE spend_total")
        db.execute("DROP TABLE expert_servers")  # revision 0011's
        for scope in ("user", "channel", "team"):
            db.execute(f'CREATE INDEX spend_{scope} ON spend ("{scope}", at)')
        db.execute("UPDATE alembic_version SET version_num = '0009'")
    async with sqlite_at(data, MediaStore(data)) as s:
        assert s.database.applied == ["0010", "0011"]
        assert (await s.check_spend(payer, limits)).spent == pytest.approx(5.0)
        assert (await s.reserve_spend("new", payer, 0.01, limits)).limit.scope == "team"


async def test_a_reservation_does_not_wait_for_the_disk_but_every_other_write_still_does(tmp_path):
    """SQLite: the reservation's commit runs at ``synchronous=NORMAL``; the writer is back at
    FULL (2) for the next transaction, also when the reservation failed (a NOT NULL column left empty)."""
    from bot.store import MediaStore
    from tests.test_store import sqlite_at

    payer, limits = Payer("slack", "slack:U1"), [Limit("user", "slack:U1", "day", 1.0, *period_bounds("day", time.time()))]
    level = []

    def reserve_and_look(conn, *args, **kw):
        level.append(conn.exec_driver_sql("PRAGMA synchronous").scalar())
        return spend.reserve(conn, *args, **kw)

    async with sqlite_at(tmp_path, MediaStore(tmp_path)) as s:
        assert await s.database.run("t", reserve_and_look, "r1", payer, 0.5, limits, now=time.time(),
                                    durable=False) is None
        with pytest.raises(StorageError):
            await s.database.run("t", reserve_and_look, "r2", Payer(None, "slack:U1"), 0.1, limits, now=time.time(), durable=False)
        after = await s.database.run("t", lambda conn: conn.exec_driver_sql("PRAGMA synchronous").scalar())
    assert level == [1, 1] and after == 2


async def test_a_budget_another_process_spent_refuses_the_next_run_before_planning(tmp_path):
    """Two stores on one file stand for two processes: once the other spends the channel's budget,
    this one's next run is refused before planning (no planning call spent on a refused run)."""
    from bot.budgets import Budgets
    from bot.errors import Refused
    from bot.settings import BudgetSettings
    from bot.store import MediaStore
    from tests.test_store import sqlite_at

    payer = Payer("slack", "slack:U1", "slack:C1", "slack:T1")
    async with sqlite_at(tmp_path, MediaStore(tmp_path)) as mine, sqlite_at(tmp_path, MediaStore(tmp_path)) as other:
        budgets = Budgets(BudgetSettings(per_channel_day=5.0), mine)
        assert await budgets.open(SLACK_USER) is not None  # unspent
        limit = Limit("channel", "slack:C1", "day", 5.0, *period_bounds("day", time.time()))
        assert await other.reserve_spend("first", payer, 5.0, [limit]) is None
        with pytest.raises(Refused) as run:
            await budgets.open(SLACK_USER)
        assert run.value.user_message.startswith("This channel's daily budget of $5.00 is spent")


def test_the_refusal_sentences_name_the_budget_and_its_reset():
    now = datetime(2026, 11, 27, 15, 0, tzinfo=timezone.utc).timestamp()
    since, until = period_bounds("month", now)
    assert datetime.fromtimestamp(until, timezone.utc) == datetime(2026, 12, 1, tzinfo=timezone.utc)
    month = Overspent(Limit("team", "discord:G1", "month", 100.0, since, until), 100.0)
    assert refusal_sentence(month, "discord") == ("This server's monthly budget of $100.00 is spent; "
                                                  "it resets on 1 December at 00:00 UTC.")
    day = Overspent(Limit("user", "slack:U1", "day", 5.0, *period_bounds("day", now)), 4.8)
    assert refusal_sentence(day, "slack", 0.4) == ("This plan's estimated cost of $0.4000 would pass your daily "
                                                   "budget of $5.00 ($4.80 spent); it resets at 00:00 UTC.")


def test_the_estimate_prices_each_task_and_leaves_unpriced_ones_unknown():
    table = PriceTable.load(input_per_million=1.0, output_per_million=1.0)
    plan = [Task(0, "text-to-video", args={"text": "a cat"}), Task(1, "image-to-text", (0,), {"image": "<resource>-0"})]
    on_fal = estimate_plan(plan, table, lambda task: "fal-ai")
    a = table.assumptions
    assert on_fal.lines[0].usd == pytest.approx(0.10 * a["video_seconds"])  # fal-ai's text-to-video: per second of video
    assert on_fal.lines[1].usd == pytest.approx(0.002)
    assert on_fal.usd == pytest.approx(sum(line.usd for line in on_fal.lines))
    unpriced = estimate_plan(plan, table, lambda task: "some-new-provider")
    assert unpriced.usd is None and unpriced.known_usd == pytest.approx(unpriced.lines[-1].usd)
    assert estimate_plan(plan, PriceTable.load(), lambda task: "local").usd is None  # controller prices unknown


def test_a_price_file_that_cannot_be_used_is_one_sentence(tmp_path):
    bad = tmp_path / "prices.toml"
    bad.write_text("[providers.fal-ai]\nper_call = -1\n")
    with pytest.raises(PriceFileError, match=r"^The price file .* gives providers.fal-ai.per_call the value -1, "):
        PriceTable.load(bad)
    bad.write_text("[providers.fal-ai]\nper_token = 1\n")
    with pytest.raises(PriceFileError, match=r"unknown key providers.fal-ai.per_token"):
        PriceTable.load(bad)
    from bot.backends import build_pricing

    settings = load_settings(env={}, overrides={"prices": {"file": str(bad)}})
    with pytest.raises(ConfigError, match=r"^The price file "):
        build_pricing(settings, "providers")


def test_a_reported_compute_time_is_believed_only_within_its_bound():
    def seconds(value: str) -> float | None:
        return billed_seconds(httpx2.Headers({"x-compute-time": value}))

    assert seconds("0.111191439") == pytest.approx(0.111191439)  # as HF inference servers send it
    assert seconds(str(MAX_BILLED_SECONDS)) == MAX_BILLED_SECONDS
    for bad in ("nan", "inf", "-1", str(MAX_BILLED_SECONDS * 2), "1e308", "soon"):
        assert seconds(bad) is None, bad
    assert billed_seconds(httpx2.Headers({})) is None
    assert not math.isnan(seconds("0") or 0.0)


async def test_a_team_with_its_own_bill_to_pays_its_expert_calls(sandbox, tmp_path):
    o = sandbox.overrides(tmp_path / "data")
    o["inference"].update(bill_to="default-org", bill_to_teams={"T1": "acme-research"})
    service = await Service.create(load_settings(env={}, overrides=o))
    try:
        await ask(service, "Generate an image of a cat on a red sofa")  # from workspace T1
        other = Requester("slack", "U2", ("C9",), "T2")
        await ask(service, "Generate an image of a dog on a red sofa", who=other, thread="t2")
    finally:
        await service.close()
    payers = [(r.asked, r.bill_to) for r in sandbox.inference.records if r.status == 200]
    assert [b for a, b in payers if "cat" in a] == ["acme-research"]
    assert [b for a, b in payers if "dog" in a] == ["default-org"]
