"""One data dir per user by default: the resume command ``chat`` prints works from any directory,
and ``hugginggpt --version`` says where the data goes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_TOKEN", "XDG_"))}
    env["XDG_DATA_HOME"] = str(home / "xdg")  # platformdirs' user data dir on Linux
    return env


def _chat(cwd: Path, env: dict[str, str], lines: str, *args: str) -> subprocess.CompletedProcess:
    cwd.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "hugginggpt", "chat", "--sandbox", *args], input=lines, cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_conversation_resumes_from_another_directory(tmp_path):
    env = _env(tmp_path)
    p = _chat(tmp_path / "one", env, "remember the word lighthouse\n/new\n/quit\n")
    assert p.returncode == 0, p.stderr
    first = p.stdout.split("(Resume the previous one with: ")[1].split(")")[0].split("--conversation ")[1].split()[0]
    p = _chat(tmp_path / "two", env, "/quit\n", "--conversation", first)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "remember the word lighthouse" in p.stdout
    assert (tmp_path / "xdg" / "hugginggpt" / "conversations.sqlite3").exists()
    assert not (tmp_path / "one" / "hugginggpt-data").exists() and not (tmp_path / "two" / "hugginggpt-data").exists()


def test_version_prints_the_default_data_dir(tmp_path):
    p = subprocess.run([sys.executable, "-m", "hugginggpt", "--version"], env=_env(tmp_path), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("hugginggpt ")
    assert f"data dir (unless [storage] data_dir is set): {tmp_path / 'xdg' / 'hugginggpt'}" in p.stdout


def test_an_explicit_relative_data_dir_stays_as_it_is(tmp_path):
    env = _env(tmp_path) | {"HUGGINGGPT_STORAGE__DATA_DIR": "here-data"}
    p = _chat(tmp_path / "one", env, "hello\n/quit\n")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "one" / "here-data").is_dir() and not (tmp_path / "xdg").exists()
