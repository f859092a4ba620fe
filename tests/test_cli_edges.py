"""Rough edges of the command line, tried as a user meets them (issue 32, item 3): a real
``python -m hugginggpt`` process each time, asserting what the user reads and the exit status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.harness.realparts import free_port
from sandbox.faulty_controller import FaultyController

MEDIA = Path(__file__).parent / "fixtures" / "media"


def hugginggpt(args: list[str], tmp_path: Path, env: dict[str, str] | None = None, timeout: float = 120,
               stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m hugginggpt ARGS`` in ``tmp_path`` with a clean environment (plus ``env``)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_"))}
    base["HUGGINGGPT_STORAGE__DATA_DIR"] = str(tmp_path / "data")
    base.update(env or {})
    p = subprocess.run([sys.executable, "-m", "hugginggpt", *args], cwd=tmp_path, env=base, capture_output=True,
                       text=True, timeout=timeout, input=stdin)
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout, p.stderr
    return p


@pytest.mark.parametrize("argv,usage", [
    (["experts", "serve", "--bogus"], "usage: hugginggpt experts serve "),
    (["catalog", "show", "object-detection", "--bogus"], "usage: hugginggpt catalog show "),
    (["run", "--bogus", "hello"], "usage: hugginggpt run "),
])
def test_a_usage_error_of_a_subcommand_prints_that_subcommands_usage(tmp_path, argv, usage):
    p = hugginggpt(argv, tmp_path, timeout=60)
    assert p.returncode == 2
    assert p.stderr.startswith(usage), p.stderr
    assert "error: unrecognized arguments: --bogus" in p.stderr
    assert "COMMAND ..." not in p.stderr  # not the top-level usage


def test_a_failed_task_is_said_with_its_name_and_failed_once(tmp_path):
    """Every candidate answers 404: the progress line and the note name the task and say "failed"
    once each, with the cause after it."""
    controller = FaultyController().start()
    try:
        controller.plan = json.dumps({"tasks": [{"task": "image-to-text", "id": 0, "dep": [-1],
                                                 "args": {"image": "image-1"}}]})
        p = hugginggpt(["run", "Caption this photo", "--file", str(MEDIA / "chelsea.png")], tmp_path, env={
            "HUGGINGGPT_LLM__BASE_URL": controller.url, "HUGGINGGPT_LLM__API_KEY": "sk-edges-0123456789",
            "HUGGINGGPT_LLM__MAX_RETRIES": "0", "HUGGINGGPT_INFERENCE__BASE_URL": f"http://127.0.0.1:{controller.port}",
            "HUGGINGGPT_INFERENCE__SELECTION": "top", "HUGGINGGPT_INFERENCE__BACKOFF_MAX": "0.1"})
    finally:
        controller.close()
    assert p.returncode == 6, p.stderr
    progress = [line for line in p.stderr.splitlines() if line.strip().startswith("[0] failed:")]
    assert progress and progress[0].strip().startswith("[0] failed: The model "), p.stderr
    note = next(line for line in p.stderr.splitlines() if line.startswith("Note:"))
    assert "task 0 (image-to-text): The model " in note, note
    assert "failed: image-to-text failed" not in p.stderr and p.stderr.count("image-to-text failed") == 0


def test_experts_download_without_the_hub_ends_with_one_sentence(tmp_path):
    from expert_server.download import preset_models

    closed, n = f"http://127.0.0.1:{free_port()}", len(preset_models("minimal"))
    p = hugginggpt(["experts", "download", "--preset", "minimal"], tmp_path,
                   env={"HF_ENDPOINT": closed, "HF_HOME": str(tmp_path / "hf")})
    assert p.returncode == 6, p.stderr
    assert p.stdout == ""
    assert p.stderr.strip().splitlines() == [
        f"Error: The Hugging Face Hub at {closed} cannot be reached, so {n} of {n} models were not downloaded; "
        "check the network, the proxy and HF_ENDPOINT."]


def test_catalog_refresh_without_the_hub_exits_with_the_backend_status_not_settings(tmp_path):
    closed = f"http://127.0.0.1:{free_port()}"
    p = hugginggpt(["catalog", "refresh", "--tasks", "translation", "--out", str(tmp_path / "c.jsonl")], tmp_path,
                   env={"HF_ENDPOINT": closed, "HF_HOME": str(tmp_path / "hf")})
    assert p.returncode == 6, p.stderr  # docs/command-line.md: a backend failed (2 is a setting)
    [line] = p.stderr.strip().splitlines()
    assert line.startswith(f"Error: The Hugging Face Hub at {closed} cannot be reached"), line
    assert not (tmp_path / "c.jsonl").exists()
