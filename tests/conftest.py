"""Shared fixtures: real media files, a media store, a resource sink and the inference stand-in."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "0")
# A test that sets no data dir uses the per-user default (platformdirs): keep it out of the real one.
if "XDG_DATA_HOME" not in os.environ or not os.environ["XDG_DATA_HOME"].startswith(tempfile.gettempdir()):
    os.environ["XDG_DATA_HOME"] = tempfile.mkdtemp(prefix="hugginggpt-tests-xdg-")

from sandbox import Sandbox  # noqa: E402
from sandbox.inference import InferenceStandIn  # noqa: E402
from bot.incoming import IncomingFile  # noqa: E402
from bot.store import LocalResourceSink, MediaStore  # noqa: E402

MEDIA_DIR = Path(__file__).parent / "fixtures" / "media"


@pytest.fixture
def media_dir() -> Path:
    """Directory of the real test media (photos, speech, video)."""
    return MEDIA_DIR


@pytest.fixture
def store(tmp_path: Path) -> MediaStore:
    """An empty media store in a temporary data directory."""
    return MediaStore(tmp_path / "data")


@pytest.fixture
def sink(store: MediaStore) -> LocalResourceSink:
    """A resource sink over ``store`` with no resources yet."""
    return LocalResourceSink(store)


@pytest.fixture
async def standin():
    """A started Hugging Face inference stand-in (empty ``task_of``; tests fill it)."""
    async with InferenceStandIn() as s:
        yield s


def media_file(name: str) -> IncomingFile:
    """A real fixture file as a user would attach it."""
    return IncomingFile((MEDIA_DIR / name).read_bytes(), name=name)


@pytest.fixture
async def sandbox():
    """Both sandbox stand-ins (controller and inference), started on 127.0.0.1."""
    async with Sandbox() as sb:
        yield sb


def upload_limits(**limits: int) -> dict[str, int]:
    """``inspect_upload``'s pixel and text-file limits as the service passes them: the settings
    model's defaults, with ``limits`` (``max_pixels``, ``max_text_bytes``) instead where given."""
    from bot.settings import Settings

    settings = Settings()
    return {"max_pixels": settings.inference.max_image_pixels,
            "max_text_bytes": settings.storage.max_text_file_bytes, **limits}


def mcp_server(name: str, **kw: object):
    """An MCP server's :class:`pipeline.config.McpServerConfig`, with the settings model's
    ``connect_timeout``, ``protocol`` and ``[mcp] max_log_bytes`` where ``kw`` gives none."""
    from bot.settings import McpServerSettings, McpSettings
    from pipeline.config import McpServerConfig

    limits = {"connect_timeout": McpServerSettings(url="http://127.0.0.1/").connect_timeout,
              "max_log_bytes": McpSettings().max_log_bytes,
              "protocol": McpServerSettings(url="http://127.0.0.1/").protocol}
    return McpServerConfig(name, **{**limits, **kw})


@pytest.fixture
async def decoder():
    """Decoding worker processes with the settings model's pixel limit (closed after the test)."""
    from bot.settings import Settings
    from pipeline.decoding import Decoder

    async with Decoder(max_pixels=Settings().inference.max_image_pixels) as d:
        yield d


async def stored_upload(sink, data: bytes, name: str | None, declared_mime: str | None, max_bytes: int = 25 << 20):
    """Check a user's file as the service does (``inspect_upload``) and store it through ``sink``."""
    from bot.uploads import inspect_upload

    info = await inspect_upload(data, name, declared_mime, max_bytes=max_bytes, **upload_limits())
    return await sink.add(data, kind=info.kind, mime=info.mime, origin="user", description=info.description, name=name)


def start_caption_in_chat(proc, photo, timeout: float = 60.0) -> tuple[str, str | None]:
    """Send ``/file photo`` and a caption request to a ``hugginggpt chat`` process (pipes, text
    mode) and read its output until a task is running.

    Returns:
        ``(output so far, the conversation id it printed or None)``.
    """
    import time

    proc.stdin.write(f"/file {photo}\nCaption this picture\n")
    proc.stdin.flush()
    seen, conv = "", None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and "running on" not in seen:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
        if line.startswith("Conversation "):
            conv = line.split()[1]
    return seen, conv


@pytest.fixture
async def slack():
    """The stand-in Slack (sandbox/slack_api.py), started on 127.0.0.1."""
    from sandbox.slack_api import SlackStandIn

    async with SlackStandIn() as s:
        yield s


def _real_part(make):
    """Start a real server from benchmarks.harness.realparts; skip when it is not installed, unless
    HUGGINGGPT_REQUIRE_REAL_PARTS=1 (set by .ci/run), where a missing server fails."""
    from benchmarks.harness.realparts import Missing

    try:
        return make()
    except Missing as e:
        if os.environ.get("HUGGINGGPT_REQUIRE_REAL_PARTS") == "1":
            raise
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory):
    """A throwaway PostgreSQL server for the whole session (benchmarks.harness.realparts.PostgresServer)."""
    from benchmarks.harness.realparts import PostgresServer

    server = _real_part(lambda: PostgresServer(tmp_path_factory.mktemp("postgres")).start())
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """The URL of a fresh, empty database on the session's PostgreSQL server."""
    return postgres_server.create_database()


@pytest.fixture(params=["sqlite", "postgres"])
def new_store(request, tmp_path):
    """Makes a store of each backend: SQLite in ``tmp_path/data``, or PostgreSQL (a fresh database
    per test on the session's throwaway server) with its media in ``tmp_path/data``; the shared
    contract tests run on both."""
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None

    def make(data: Path | None = None, *, busy_timeout: float = 5.0, **kw):
        from bot.store.sql.database import DB_NAME, Database
        from bot.store.sql.store import SQLStore

        data = data or tmp_path / "data"
        db = Database(url=url) if url else Database(path=Path(data).resolve() / DB_NAME, busy_timeout=busy_timeout)
        return SQLStore(db, data, MediaStore(data), **kw)

    make.backend = request.param
    return make
