"""``hugginggpt experts launch`` (a real subprocess, huggingface_hub's ``HfApi`` inside it)
against the stand-in of the Hugging Face Jobs API (:mod:`sandbox.hf_jobs`, the format of
huggingface_hub 2.4's ``run_job``, ``inspect_job``, ``cancel_job`` and ``list_jobs_hardware``)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from sandbox.hf_jobs import JobsApi


async def launch(api: JobsApi, data: Path, *options: str, token: str | None = None, stop_after: float | None = None):
    """Run the command against ``api`` with its store in ``data``; returns (exit status, stdout,
    stderr). ``stop_after``: send SIGINT after that many seconds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "HF_"))}
    env.update(HF_ENDPOINT=api.url, HF_HUB_DISABLE_TELEMETRY="1", HF_TOKEN=token or api.token,
               HUGGINGGPT_STORAGE__DATA_DIR=str(data))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "hugginggpt", "experts", "launch", "--image", "registry.example/hugginggpt-experts:1",
        "--poll", "0.2", *options, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    if stop_after is not None:
        await asyncio.sleep(stop_after)
        proc.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode, out.decode(), err.decode()


async def test_an_idle_server_is_cancelled_and_its_cost_said_and_no_register_prints_the_settings(tmp_path):
    async with JobsApi() as api:
        code, out, err = await launch(api, tmp_path / "data", "--flavor", "a10g-small", "--idle-minutes", "0.02",
                                      "--no-register")
        assert code == 0, err
        [job] = api.jobs.values()
        spec = job.spec
        assert spec["dockerImage"] == "registry.example/hugginggpt-experts:1" and spec["flavor"] == "a10g-small"
        assert spec["command"] == ["sh", "-c", "hugginggpt experts download --preset minimal && "
                                               "exec hugginggpt experts serve --host 0.0.0.0 --port 8081"]
        assert spec["expose"] == {"ports": [8081], "portsPublic": [8081]} and spec["timeoutSeconds"] == 3600
        key = spec["secrets"]["HUGGINGGPT_EXPERTS_API_KEY"]
        assert len(key) >= 40 and spec["secrets"]["HF_TOKEN"] == api.token
        assert api.cancelled == [job.id]
    url = f"{api.url}/proxy/{job.id}/8081"
    assert f"Started job {job.id} on a10g-small ($0.016667 per minute)" in out
    assert f"HUGGINGGPT_INFERENCE__EXPERTS_URL={url}\n" in out
    assert f"HUGGINGGPT_INFERENCE__EXPERTS_API_KEYS={json.dumps({url: key})}" in out
    assert not (tmp_path / "data" / "conversations.sqlite3").exists()  # --no-register: no store is opened
    assert f"Its expert server was idle for 0.02 minutes. Job {job.id} is cancelled." in out
    secs = job.running_secs()
    assert f"It ran {secs} seconds on a10g-small at $0.016667 per minute: ${secs / 60 * 0.016667:.4f}." in out


async def test_a_busy_server_is_cancelled_at_the_deadline_and_ctrl_c_cancels_too(tmp_path):
    async with JobsApi(busy=True) as api:
        code, out, err = await launch(api, tmp_path / "data", "--flavor", "cpu-basic", "--max-minutes", "0.03")
        assert code == 0, err
        assert "The deadline of 0.03 minutes passed." in out and len(api.cancelled) == 1
        code, out, err = await launch(api, tmp_path / "data", "--flavor", "cpu-basic", stop_after=4)
        assert code == 0, err
        assert "Stopped on request." in out and len(api.cancelled) == 2


@pytest.mark.parametrize("options, token, sentence, status", [
    (("--flavor", "b200-huge"), None, "There is no Jobs hardware flavour 'b200-huge'; the GPU ones are: a10g-small.", 2),
    (("--flavor", "a10g-small"), "hf_wrong", "Could not list the hardware on Hugging Face Jobs: the HF token was "
                                            "refused.", 6),
])
async def test_refusals_are_one_sentence_and_start_nothing(options, token, sentence, status, tmp_path):
    async with JobsApi() as api:
        code, out, err = await launch(api, tmp_path / "data", *options, token=token)
        assert api.jobs == {}
    assert code == status and sentence in err and "Traceback" not in err + out


async def test_a_job_that_fails_before_its_server_answers_is_one_sentence_and_its_cost_is_said(tmp_path):
    async with JobsApi(fails=True) as api:
        code, out, err = await launch(api, tmp_path / "data", "--flavor", "a10g-small")
        [job] = api.jobs.values()
    assert code == 6 and "Traceback" not in err + out
    assert f"The job {job.id} ended (error) before its expert server answered: CUDA out of memory." in err
    assert f"It ran {job.running_secs()} seconds on a10g-small" in out


async def test_a_server_not_ready_yet_is_not_registered(tmp_path):
    from bot.settings import StorageSettings
    from bot.store.sql.experts import read_registered

    async with JobsApi(ready=False) as api:  # answers GET /models, but /readyz says 503 (cache scan under way)
        code, out, err = await launch(api, tmp_path / "data", "--flavor", "cpu-basic", "--max-minutes", "0.05")
    assert code == 0, err
    assert "The deadline of 0.05 minutes passed." in out and "registered" not in out
    assert await read_registered(StorageSettings(data_dir=tmp_path / "data")) == []
    assert (tmp_path / "data" / "conversations.sqlite3").exists()  # the store was opened before the job started
