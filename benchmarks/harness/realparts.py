"""Real servers for tests and benchmarks: a throwaway PostgreSQL, nginx and Prometheus, started
from the Debian packages on 127.0.0.1 in a temporary directory and stopped afterwards (no mocks).

* :class:`PostgresServer` runs ``initdb`` and ``postgres`` (as the ``postgres`` system user when
  the tests run as root, which PostgreSQL refuses), with password authentication over TCP;
  :meth:`PostgresServer.create_database` makes a fresh database per test.
* :class:`NginxServer` runs ``nginx`` in the foreground with a generated configuration: one
  ``upstream`` of bot replicas behind one port (the way an operator runs Slack HTTP mode).
* :class:`PrometheusServer` runs ``prometheus`` with the shipped ``deploy/prometheus.yml``
  pointed at processes on 127.0.0.1 and a short scrape interval, and queries its HTTP API.

Each raises :class:`Missing` when the programs are not installed (``.ci/run`` installs them;
tests skip with that sentence elsewhere).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


class Missing(RuntimeError):
    """A program the real part needs is not installed."""


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}: {log.read_text(errors='replace')[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout} s")


def pg_bindir() -> Path:
    """The directory of ``initdb``/``postgres`` (Debian: ``/usr/lib/postgresql/N/bin``, newest N).

    Raises:
        Missing: PostgreSQL's server programs are not installed.
    """
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    exe = shutil.which("postgres")
    if exe:
        return Path(exe).resolve().parent
    raise Missing("PostgreSQL is not installed (apt-get install postgresql).")


class PostgresServer:
    """A throwaway PostgreSQL cluster on 127.0.0.1.

    Args:
        root: an empty directory for the cluster (deleted by the caller's temp dir).
        user, password: the superuser the tests connect as (password authentication over TCP).

    Attributes:
        port: the TCP port; url: ``postgresql://user:password@127.0.0.1:port/postgres``.
    """

    def __init__(self, root: Path, *, user: str = "hugginggpt", password: str = "pg-test-secret-7f3a") -> None:
        self.root, self.user, self.password = Path(root), user, password
        self.bindir = pg_bindir()
        self.data = self.root / "data"
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self._n = 0

    def _as_owner(self, cmd: list[str]) -> list[str]:
        if os.geteuid() != 0:
            return cmd
        return ["runuser", "-u", "postgres", "--", *cmd]

    def url(self, database: str = "postgres") -> str:
        """The connection URL of ``database`` (with the password)."""
        return f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/{database}"

    def start(self) -> PostgresServer:
        """Create the cluster and start the server; returns ``self`` when it accepts connections.

        Raises:
            Missing: PostgreSQL is not installed; RuntimeError: it did not start.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        pwfile = self.root / "pw"
        pwfile.write_text(self.password + "\n")
        if os.geteuid() == 0:  # the postgres user must reach the cluster: let it traverse the parents
            for parent in self.root.resolve().parents:
                mode = parent.stat().st_mode
                if not mode & 0o001:
                    os.chmod(parent, mode | 0o011)
            shutil.chown(self.root, "postgres")
            shutil.chown(pwfile, "postgres")
        subprocess.run(
            self._as_owner([
                str(self.bindir / "initdb"), "-D", str(self.data), "-U", self.user, f"--pwfile={pwfile}",
                "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--locale=C", "--no-sync",
            ]),
            check=True, capture_output=True,
        )
        log = self.root / "server.log"
        logf = open(log, "wb")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            self._as_owner([
                str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.root),
                "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
                "-c", "full_page_writes=off", "-c", "max_connections=300", "-c", "shared_buffers=64MB",
            ]),
            stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
        )
        logf.close()
        _wait_port(self.port, self.proc, 30.0, "postgres", log)
        for _ in range(100):  # the port opens a moment before the server accepts logins
            if self.psql("SELECT 1", check=False).returncode == 0:
                break
            time.sleep(0.05)
        return self

    def psql(self, sql: str, database: str = "postgres", *, check: bool = True) -> subprocess.CompletedProcess:
        """Run ``sql`` with ``psql`` over TCP as the superuser; the completed process (text)."""
        env = {**os.environ, "PGPASSWORD": self.password}
        return subprocess.run(
            ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user,
             "-d", database, "-tAc", sql],
            env=env, capture_output=True, text=True, check=check,
        )

    def create_database(self, prefix: str = "t") -> str:
        """Create an empty database; return its URL."""
        self._n += 1
        name = f"{prefix}_{os.getpid()}_{self._n}"
        self.psql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        """Fast shutdown (SIGINT), then kill after 10 s; idempotent."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:  # the whole group: runuser does not pass the signal on to postgres
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


NGINX_CONF = """\
worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
daemon off;
events {{ worker_connections 4096; }}
http {{
    access_log {root}/access.log;
    client_body_temp_path {root}/body;
    proxy_temp_path {root}/proxy;
    fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi;
    scgi_temp_path {root}/scgi;
    upstream bots {{
{servers}
        keepalive 32;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://bots;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_next_upstream error timeout http_502 http_503 non_idempotent;
            proxy_connect_timeout 1s;
            proxy_read_timeout 30s;
        }}
    }}
}}
"""




def wait_ready(url: str, proc: subprocess.Popen, timeout: float, said: Callable[[], str]) -> None:
    """Wait until the server at ``url`` answers ``GET /readyz`` with 200 (the expert server, ``serve``).

    Raises:
        AssertionError: ``proc`` ended or ``timeout`` seconds passed first; the message ends with
            ``said()`` (the server's log, read then).
    """
    import httpx2

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx2.get(f"{url}/readyz", timeout=1).status_code == 200:
                return
        except httpx2.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} did not get ready:\n{said()[-3000:]}")


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User plus system CPU seconds process ``pid`` has used, all its threads (Linux
    ``/proc/PID/stat``), or its thread ``thread`` alone (``/proc/PID/task/TID/stat``; a process's
    main thread has its PID as TID)."""
    stat = Path(f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat")
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def terminate(proc: subprocess.Popen | None) -> None:
    """Stop a server process quickly (SIGTERM, SIGKILL after 10 s); nothing when it is gone."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class NginxServer:
    """nginx on 127.0.0.1 balancing over ``upstreams`` (``"127.0.0.1:PORT"`` each, round robin;
    a replica that refuses connections or answers 502/503 is skipped, as in production configs).

    Args:
        root: an empty directory for its configuration, logs and temp files.
        upstreams: the replicas' addresses.

    Attributes:
        port: the port nginx listens on; url: ``http://127.0.0.1:port``.
    """

    def __init__(self, root: Path, upstreams: list[str]) -> None:
        exe = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
        if exe is None:
            raise Missing("nginx is not installed (apt-get install nginx).")
        self.exe, self.root, self.upstreams = exe, Path(root), upstreams
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> NginxServer:
        """Write the configuration and start nginx; returns ``self`` once it listens."""
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        servers = "\n".join(f"        server {u} max_fails=1 fail_timeout=2s;" for u in self.upstreams)
        conf = self.root / "nginx.conf"
        conf.write_text(NGINX_CONF.format(root=self.root, servers=servers, port=self.port))
        log = self.root / "error.log"
        self.proc = subprocess.Popen([self.exe, "-p", str(self.root), "-c", str(conf)], stdout=subprocess.DEVNULL,
                                     stderr=open(self.root / "stderr.log", "wb"), start_new_session=True)  # noqa: SIM115
        _wait_port(self.port, self.proc, 10.0, "nginx", log if log.exists() else self.root / "stderr.log")
        return self

    def stop(self) -> None:
        """Quick shutdown (SIGTERM); idempotent."""
        proc, self.proc = self.proc, None
        terminate(proc)

    def __enter__(self) -> NginxServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class PrometheusServer:
    """Prometheus on 127.0.0.1 scraping ``targets`` every ``interval``, with the jobs of the
    shipped ``deploy/prometheus.yml`` (each job named in ``targets`` keeps its settings but scrapes
    the given addresses; the others are left out).

    Args:
        root: an empty directory for its configuration and database.
        targets: job name (as in deploy/prometheus.yml) → ``"127.0.0.1:PORT"`` addresses.
        interval: the scrape interval (a Prometheus duration, ``"1s"``).

    Attributes:
        port: the port it listens on; url: ``http://127.0.0.1:port``.
    """

    def __init__(self, root: Path, targets: dict[str, list[str]], interval: str = "1s") -> None:
        exe = shutil.which("prometheus") or ("/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)
        if exe is None:
            raise Missing("prometheus is not installed (apt-get install prometheus).")
        self.exe, self.root, self.targets, self.interval = exe, Path(root), targets, interval
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def config(self) -> dict:
        """deploy/prometheus.yml with this server's interval and targets."""
        import yaml

        shipped = yaml.safe_load((Path(__file__).resolve().parents[2] / "deploy" / "prometheus.yml").read_text())
        shipped["global"] = {"scrape_interval": self.interval, "evaluation_interval": self.interval}
        jobs = []
        for job in shipped["scrape_configs"]:
            if job["job_name"] in self.targets:
                job.pop("dns_sd_configs", None)
                job["static_configs"] = [{"targets": self.targets[job["job_name"]]}]
                jobs.append(job)
        missing = set(self.targets) - {j["job_name"] for j in jobs}
        assert not missing, f"deploy/prometheus.yml has no job {missing}"
        shipped["scrape_configs"] = jobs
        return shipped

    def start(self) -> PrometheusServer:
        """Write the configuration and start Prometheus; returns ``self`` once it listens."""
        import yaml

        self.root.mkdir(parents=True, exist_ok=True)
        conf = self.root / "prometheus.yml"
        conf.write_text(yaml.safe_dump(self.config()))
        log = self.root / "prometheus.log"
        self.proc = subprocess.Popen(
            [self.exe, f"--config.file={conf}", f"--storage.tsdb.path={self.root / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=open(log, "wb"), start_new_session=True)  # noqa: SIM115
        _wait_port(self.port, self.proc, 20.0, "prometheus", log)
        return self

    def query(self, expr: str) -> list[dict]:
        """The result vector of the PromQL ``expr`` now (``/api/v1/query``): ``{"metric", "value"}`` each."""
        import json
        import urllib.parse
        import urllib.request

        with urllib.request.urlopen(f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}",
                                    timeout=10) as r:
            doc = json.loads(r.read())
        assert doc["status"] == "success", doc
        return doc["data"]["result"]

    def value(self, expr: str) -> float | None:
        """The single value of ``expr`` now (``None`` when the vector is empty)."""
        result = self.query(expr)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def wait_value(self, expr: str, want: float, timeout: float = 20.0) -> float | None:
        """Poll :meth:`value` until it equals ``want`` (or ``timeout`` seconds pass); the last value."""
        deadline = time.monotonic() + timeout
        got = self.value(expr)
        while got != want and time.monotonic() < deadline:
            time.sleep(0.25)
            got = self.value(expr)
        return got

    def stop(self) -> None:
        """Quick shutdown (SIGTERM); idempotent."""
        proc, self.proc = self.proc, None
        terminate(proc)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
