"""The deployment files in deploy/ fit the package they deploy: every command they run is a real
``hugginggpt`` command line, the image holds every package of the distribution and runs as a
non-root user with ffmpeg, and shutdown leaves runs in flight their grace period."""

from __future__ import annotations

import configparser
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from hugginggpt import build_parser

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
GRACE_DEFAULT = 30.0  # hugginggpt.common.add_grace_option


def _parses(argv: list[str]) -> None:
    build_parser().parse_args(argv)  # SystemExit(2) on an unknown command or option


def test_compose_file_is_valid_compose_and_its_bots_share_postgres_and_one_volume():
    # the Compose Specification's JSON schema, as vendored by check-jsonschema (docker compose
    # itself is not on every machine; when it is, test_docker_compose_accepts_the_file runs too)
    p = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec",
                        str(DEPLOY / "compose.yaml")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    bots = {name: svc for name, svc in services.items() if svc.get("image") == "hugginggpt-bot"}
    assert {"migrate", "slack", "slack-http", "discord", "api"} <= set(bots)
    for name, svc in bots.items():
        _parses(svc["command"])
        assert "data:/data" in svc["volumes"], name  # media files: one volume every process shares
        assert svc["environment"]["DATABASE_URL"].startswith("postgresql://hugginggpt:${POSTGRES_PASSWORD")
        assert svc["depends_on"]["db"] == {"condition": "service_healthy"}, name
        if name != "migrate":
            assert svc["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}, name
            assert svc["environment"]["HUGGINGGPT_STORAGE__AUTO_MIGRATE"] == "false" and svc["restart"] == "unless-stopped"
            grace = float(re.fullmatch(r"(\d+)s", svc["stop_grace_period"]).group(1))
            assert grace > GRACE_DEFAULT, name  # SIGTERM: runs in flight get their grace period
    assert bots["migrate"]["command"] == ["db", "upgrade"] and bots["migrate"]["build"]["dockerfile"] == "deploy/Dockerfile"
    assert "pg_isready" in " ".join(services["db"]["healthcheck"]["test"])
    # Slack HTTP mode: replicas behind nginx, whose upstream is their port, health checked on /readyz
    http = bots["slack-http"]
    port = http["command"][http["command"].index("--port") + 1]
    assert http["deploy"]["replicas"] >= 2 and http["environment"]["HUGGINGGPT_HEALTH_URL"].endswith(f":{port}/readyz")
    conf = (DEPLOY / "nginx.conf").read_text()
    assert f"server slack-http:{port}" in conf and "non_idempotent" in conf
    assert services["lb"]["profiles"] == http["profiles"] == ["http"] and bots["slack"]["profiles"] == ["socket"]
    assert {"data", "pgdata"} <= set(compose["volumes"])


def test_dockerfile_installs_every_package_runs_unprivileged_with_ffmpeg():
    text = (DEPLOY / "Dockerfile").read_text()
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    for pattern in packages:  # "bot*" -> the bot/ directory must be copied into the image
        assert re.search(rf"^COPY {pattern.rstrip('*')} \./{pattern.rstrip('*')}$", text, re.M), pattern
    assert "ffmpeg" in text and re.search(r"^USER (?!root)\w+", text, re.M)
    entry = re.search(r'^ENTRYPOINT \["hugginggpt"\]$', text, re.M)
    cmd = re.search(r"^CMD (\[.*\])$", text, re.M)
    assert entry and cmd
    _parses(yaml.safe_load(cmd.group(1)))


@pytest.mark.parametrize("unit_file", ["hugginggpt-slack.service", "hugginggpt-discord.service", "hugginggpt-serve.service"])
def test_systemd_unit_runs_a_real_command_and_waits_for_the_grace_period(unit_file):
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string((DEPLOY / unit_file).read_text())
    argv = shlex.split(unit["Service"]["ExecStart"])
    assert argv[0].endswith("/hugginggpt") and argv[1] == unit_file.split("-")[1].split(".")[0]
    _parses(argv[1:])
    assert unit["Service"]["KillSignal"] == "SIGTERM" and float(unit["Service"]["TimeoutStopSec"]) > GRACE_DEFAULT
    assert unit["Service"]["User"] != "root"


def _has_compose() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30).returncode == 0


@pytest.mark.skipif(not _has_compose(), reason="no docker compose on this machine")
def test_docker_compose_accepts_the_file(tmp_path):
    env = DEPLOY / ".env"
    created = not env.exists()
    if created:
        env.write_text((DEPLOY / "env.example").read_text())
    try:
        p = subprocess.run(["docker", "compose", "-f", str(DEPLOY / "compose.yaml"), "config", "--quiet"],
                           capture_output=True, text=True, timeout=60)
    finally:
        if created:
            env.unlink()
    assert p.returncode == 0, p.stderr


def test_compose_experts_profile_runs_the_expert_server_with_a_gpu_reservation():
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    svc = compose["services"]["experts"]
    assert svc["profiles"] == ["experts"] and svc["entrypoint"] == ["hugginggpt", "experts"]
    _parses(["experts", *svc["command"]])
    assert svc["build"]["args"]["EXTRAS"] == "experts" and "hf-cache" in compose["volumes"]
    port = svc["command"][svc["command"].index("--port") + 1]
    assert svc["environment"]["HUGGINGGPT_HEALTH_URL"].endswith(f":{port}/readyz")
    device = svc["deploy"]["resources"]["reservations"]["devices"][0]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    # issue 39: reachable on the compose network only, and it binds 0.0.0.0 there, so it needs its key
    assert "ports" not in svc and svc["expose"] == [port]
    assert svc["environment"]["HUGGINGGPT_EXPERTS_API_KEY"] == "${EXPERTS_API_KEY:-}"


def _env_example(filled: bool) -> dict[str, str]:
    """``deploy/env.example``'s variables; ``filled``: empty ones get a placeholder of the right
    form, as an operator following the file's comments fills them in."""
    forms = {"SLACK_BOT_TOKEN": "xoxb-1-2-placeholder", "SLACK_APP_TOKEN": "xapp-1-A1-2-placeholder"}
    out = {}
    for line in (DEPLOY / "env.example").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value or (forms.get(key, f"placeholder-{key.lower()}") if filled else "")
    return out


def _start(command: list[str], env_file: dict[str, str], service_env: dict[str, str], tmp_path: Path):
    """Start ``hugginggpt COMMAND`` as compose would (the env file, then the service's environment),
    without the database host compose provides (SQLite in ``tmp_path``) and with free ports."""
    import os
    import socket

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HUGGINGGPT_", "OPENAI_", "HF_", "SLACK_", "DISCORD_"))}
    env.update(env_file)
    env.update({k: v for k, v in service_env.items() if k != "DATABASE_URL"})
    env.update(HUGGINGGPT_STORAGE__DATA_DIR=str(tmp_path / command[0]), HUGGINGGPT_DISCORD__API_BASE_URL="http://127.0.0.1:9/api/v10")
    argv = list(command)
    if "--port" in argv:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            argv[argv.index("--port") + 1] = str(s.getsockname()[1])
    return subprocess.Popen([sys.executable, "-m", "hugginggpt", *argv], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _profile_services() -> dict[str, dict]:
    services = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    return {name: svc for name, svc in services.items() if svc.get("image") == "hugginggpt-bot" and svc.get("profiles")}


def test_every_profile_starts_with_the_env_file_filled_in_as_it_says(tmp_path):
    env_file = _env_example(filled=True)
    settings_words = ["OPENAI_API_KEY", "HF_TOKEN", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET",
                      "DISCORD_BOT_TOKEN", "HUGGINGGPT_SERVER__API_KEYS", "POSTGRES_PASSWORD"]
    procs = {}
    for name, svc in _profile_services().items():
        service_env = {k: str(v) for k, v in svc.get("environment", {}).items()}
        procs[name] = _start(svc["command"], env_file, service_env, tmp_path)
    for name, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=8)
        except subprocess.TimeoutExpired:  # still serving or connecting: past its settings
            proc.kill()
            out, err = proc.communicate()
            continue
        assert "Traceback" not in err, (name, err)
        if proc.returncode == 2:  # refused at start: never because of a setting the env file should hold
            assert not any(word in err for word in settings_words), (name, err)


def test_the_api_profile_says_its_keys_are_required(tmp_path):
    text = (DEPLOY / "env.example").read_text()
    assert re.search(r"^# .*profile \"api\".*required", text, re.M | re.I) and "HUGGINGGPT_SERVER__API_KEYS=" in text
    env_file = _env_example(filled=True)
    env_file["HUGGINGGPT_SERVER__API_KEYS"] = ""  # left empty: the api profile refuses to start, saying why
    api = _profile_services()["api"]
    proc = _start(api["command"], env_file, {k: str(v) for k, v in api["environment"].items()}, tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "HUGGINGGPT_SERVER__API_KEYS" in err and "Traceback" not in err, err
