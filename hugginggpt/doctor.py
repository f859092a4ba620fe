"""``hugginggpt doctor [--json] [--timeout S] [--min-free-mb MIB]``: is this installation ready?

One line per check, each ``ok``, ``warn``, ``FAIL`` or ``skip`` with one sentence and, when
something is wrong, what to do:

* ``settings``: the config file and environment load (which file, which data dir);
* ``controller``: the OpenAI-compatible server at ``[llm] base_url`` answers ``GET /models`` with
  the key and lists ``[llm] model`` (a server without the listing gets one chat request of one
  token instead);
* ``hub``: the Hugging Face Hub answers ``whoami`` for ``HF_TOKEN``, the token may call Inference
  Providers, and whether the account can pay beyond the free monthly credits;
* ``store``: the conversation store opens (the SQLite file in the data dir, or the PostgreSQL
  database); nothing is migrated or written;
* ``providers``: every provider the settings name (``[inference] provider``, each
  ``[inference.providers]`` override and ``model:provider`` pin) is one Hugging Face still routes
  to (not removed, known to the installed client or live on the Hub; a pin's model live there);
* ``experts``: every ``[inference] experts_url``, and every server ``hugginggpt experts launch``
  registered in the store, answers ``GET /models``;
* ``mcp``: every ``[mcp] servers`` entry starts (a stdio program) or answers (a URL) and lists
  its tools;
* ``ffmpeg``: the ``ffmpeg`` program runs (the sound of videos, media for Discord, the sandbox);
* ``disk``: free space where the data dir lives.

Checks run at once, each within ``--timeout`` seconds of its own: the libraries a check needs
are imported first, all in one thread (within :data:`IMPORT_SECONDS`), and the checks' deadlines
start when they are there, so a machine slow to import a library does not fail a check. No secret is
printed: keys and tokens are never shown, URLs lose their user and password. Exit status 0 when
nothing failed (warnings allowed), 1 when a check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import json
import logging
import os
import shutil
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO
from urllib.parse import urlsplit, urlunsplit

from bot.errors import ConfigError, StorageError

from .common import command_hint

if TYPE_CHECKING:
    from bot.settings import InferenceSettings, LLMSettings, Settings, StorageSettings
    from pipeline.config import McpServerConfig

Status = Literal["ok", "warn", "FAIL", "skip"]
INFERENCE_PERMISSION = "inference.serverless.write"
"""The fine-grained token permission "Make calls to Inference Providers" (``whoami-v2``)."""
TOKENS_PAGE = "https://huggingface.co/settings/tokens"
IMPORT_SECONDS = 60.0
"""Seconds the checks' libraries may take to import before every check counts as failed (a loaded
machine takes seconds; a hung file system is reported after this). Each check's ``--timeout``
starts after."""
MCP_STOP_SECONDS = 10.0
"""Seconds beyond ``--timeout`` the ``mcp`` check may take: stopping a tool server that did not
start (the ``mcp`` SDK's stdio client closes its stdin, waits 2 s, then terminates and kills it:
about 7 s). Cut short, the stop would leave the program running until it ends on its own."""
CHECKS = ("controller", "hub", "providers", "store", "experts", "mcp", "ffmpeg", "disk")
"""The checks after ``settings``, in the order they are printed."""


@dataclass(frozen=True)
class Check:
    """The verdict of one check: ``name``, ``status``, one sentence ``message`` and ``fix`` (what
    to do; empty when nothing is wrong)."""

    name: str
    status: Status
    message: str
    fix: str = ""

    def line(self) -> str:
        """``ok    name        message`` (plus `` → fix``)."""
        fix = f" → {self.fix}" if self.fix else ""
        return f"{self.status:<5} {self.name:<11} {self.message}{fix}"


def add_parser(subparsers: Any) -> None:
    """Add ``doctor`` to the command line's subparsers."""
    p = subparsers.add_parser(
        "doctor", help="check the settings, controller, Hub, store, expert servers, MCP tool servers, ffmpeg and disk space")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of lines")
    p.add_argument("--timeout", type=_positive, default=5.0, metavar="SECONDS", help="seconds per check (default 5)")
    p.add_argument("--min-free-mb", type=_positive, default=1024.0, metavar="MIB",
                   help="free space the data dir needs, in MiB (default 1024)")
    p.set_defaults(handler=main, loads_settings=True)


def _positive(text: str) -> float:
    """A finite number above 0 (``--timeout`` seconds, ``--min-free-mb`` MiB)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, not {text!r}") from None
    if not 0 < v < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number above 0, not {text}")
    return v


def safe_url(url: str) -> str:
    """``url`` without user, password, query and fragment (fit to print)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def check_settings(config: str | None) -> tuple[Check, Settings | None]:
    """Load the settings as every command does; the check names the file and the data dir."""
    from bot.settings import config_path, load_settings  # pydantic loads when doctor runs, not for --help

    try:
        settings = load_settings(config)
    except ConfigError as e:
        problems = "; ".join(e.user_message.splitlines())
        return Check("settings", "FAIL", f"The settings do not load: {problems}",
                     "fix the key or variable named (see `hugginggpt --help` and docs/configuration.md)"), None
    file = config_path(config)
    where = f"Config file {file.resolve()}" if file else "No config file (defaults and environment)"
    return Check("settings", "ok", f"{where}; data dir {settings.storage.data_dir}."), settings


async def check_controller(llm: LLMSettings, timeout: float) -> Check:
    """``GET {base_url}/models`` with the key; the model must be listed (see the module docstring)."""
    import openai

    where = safe_url(llm.base_url or "https://api.openai.com/v1")
    if llm.api_key is None and llm.base_url is None:
        return Check("controller", "FAIL", "No API key for api.openai.com.",
                     "set OPENAI_API_KEY (or [llm] api_key), or [llm] base_url for your own server")
    key = llm.api_key.get_secret_value() if llm.api_key else "none"
    client = openai.AsyncOpenAI(base_url=llm.base_url, api_key=key, timeout=timeout, max_retries=0)
    try:
        try:
            listed = [m.id async for m in client.models.list()]
        except openai.NotFoundError:  # a server without the listing: one tiny request instead
            await client.chat.completions.create(model=llm.model, max_tokens=1,
                                                 messages=[{"role": "user", "content": "Reply with OK."}])
            return Check("controller", "ok", f"{where} answers a chat request with {llm.model} (it has no GET /models).")
    except openai.APIError as e:
        return _controller_error(e, where, llm.model, timeout)
    finally:
        await client.close()
    if llm.model not in listed:
        some = ", ".join(sorted(listed)[:5]) + (" ..." if len(listed) > 5 else "")
        return Check("controller", "FAIL", f"{where} answers but does not list the model {llm.model!r} "
                     f"(it lists {len(listed)}: {some or 'none'}).", "set [llm] model to one it lists")
    return Check("controller", "ok", f"{where} answers and lists {llm.model}.")


def _controller_error(e: Exception, where: str, model: str, timeout: float) -> Check:
    import openai

    fix = "start the server or correct [llm] base_url (OPENAI_BASE_URL)"
    if isinstance(e, openai.APITimeoutError):
        return Check("controller", "FAIL", f"{where} did not answer within {timeout:g} s.", fix)
    if isinstance(e, openai.APIConnectionError):
        return Check("controller", "FAIL", f"{where} cannot be reached (connection failed).", fix)
    if isinstance(e, openai.AuthenticationError | openai.PermissionDeniedError):
        return Check("controller", "FAIL", f"{where} refused the API key (HTTP {e.status_code}).",
                     "set the right key in OPENAI_API_KEY or [llm] api_key")
    if isinstance(e, openai.NotFoundError):
        return Check("controller", "FAIL", f"{where} does not know the model {model!r}.", "set [llm] model to one it serves")
    status = getattr(e, "status_code", None)
    return Check("controller", "FAIL", f"{where} answered with an error{f' (HTTP {status})' if status else ''}.",
                 "look at the server's log; the bot cannot plan until it answers")


async def check_hub(inference: InferenceSettings, timeout: float) -> Check:
    """``whoami`` for the token on the Hub (``HF_ENDPOINT`` or huggingface.co), its permission to
    call Inference Providers and whether the account can pay (``canPay``, PRO)."""
    if inference.mode == "local":
        return Check("hub", "skip", "[inference] mode is local: only the expert servers are used.")
    if inference.base_url:
        return Check("hub", "skip", f"expert calls go to the gateway {safe_url(inference.base_url)}, not to the Hub.")
    if inference.token is None:
        fix = f"create a token with 'Make calls to Inference Providers' at {TOKENS_PAGE} and set HF_TOKEN"
        if inference.mode == "hybrid" and inference.experts_url:
            return Check("hub", "warn", "No Hugging Face token: only the expert servers' models can run.", fix)
        return Check("hub", "FAIL", "No Hugging Face token: Inference Providers refuse calls without one.", fix)
    import httpx2
    from huggingface_hub import constants
    from huggingface_hub.utils import build_hf_headers

    endpoint = constants.ENDPOINT.rstrip("/")
    headers = build_hf_headers(token=inference.token.get_secret_value())
    try:
        async with httpx2.AsyncClient(timeout=timeout, follow_redirects=False) as http:
            r = await http.get(f"{endpoint}/api/whoami-v2", headers=headers)
    except httpx2.TimeoutException:
        return Check("hub", "FAIL", f"The Hub at {safe_url(endpoint)} did not answer within {timeout:g} s.",
                     "check the network, the proxy and HF_ENDPOINT")
    except httpx2.HTTPError as e:
        return Check("hub", "FAIL", f"The Hub at {safe_url(endpoint)} cannot be reached ({e.__class__.__name__}).",
                     "check the network, the proxy and HF_ENDPOINT")
    if r.status_code == 401:
        return Check("hub", "FAIL", "The Hub refused the token (invalid, expired or revoked).",
                     f"create a new token at {TOKENS_PAGE} and set HF_TOKEN")
    if r.status_code != 200:
        return Check("hub", "FAIL", f"The Hub answered whoami with HTTP {r.status_code}.", "try again later")
    return _hub_account(r.json(), inference.provider)


def _hub_account(body: dict[str, Any], provider: str | None) -> Check:
    name = body.get("name", "?")
    token = (body.get("auth") or {}).get("accessToken") or {}
    role = token.get("role", "?")
    granted = ((token.get("fineGrained") or {}).get("global")) or []
    if role == "fineGrained" and INFERENCE_PERMISSION not in granted:
        return Check("hub", "FAIL", f"The token of {name} may not call Inference Providers.",
                     f"tick 'Make calls to Inference Providers' for the token at {TOKENS_PAGE}")
    said = f"token of {name} ({role}); provider {provider or 'none'}"
    if body.get("isPro") or body.get("canPay"):
        return Check("hub", "ok", f"{said}; billing: {'PRO' if body.get('isPro') else 'payment method on file'}.")
    return Check("hub", "warn", f"{said}; billing: free monthly credits only (calls fail with HTTP 402 once spent).",
                 "add a payment method or PRO at https://huggingface.co/settings/billing")


async def check_providers(inference: InferenceSettings, timeout: float) -> Check:
    """The provider settings against the live provider list (the installed client's table, and
    the Hub's ``inferenceProviderMapping`` of pinned models):
    :meth:`pipeline.experts.providers.ProviderPolicy.problems`, one sentence each."""
    if inference.mode == "local":
        return Check("providers", "skip", "[inference] mode is local: no provider is used.")
    if inference.base_url:
        return Check("providers", "skip", f"expert calls go to the gateway {safe_url(inference.base_url)}.")
    from pipeline.catalog.availability import Availability
    from pipeline.experts.providers import ENABLED_PAGE, ProviderPolicy

    policy = ProviderPolicy(inference.provider, dict(inference.providers))
    token = inference.token.get_secret_value() if inference.token else None
    hub = Availability(provider=inference.provider, base_url=None, endpoints={}, token=token, timeout=timeout,
                       policy=policy)
    problems = await policy.problems(hub.live_of)
    if problems:
        return Check("providers", "FAIL", " ".join(problems), f"see the providers your account enables at {ENABLED_PAGE}")
    named = sorted({p for _, _, p, _ in policy.configured()})
    if not named:
        return Check("providers", "skip", "No provider is configured ([inference] provider is none).")
    return Check("providers", "ok", f"The provider settings ({', '.join(named)}) name providers Hugging Face "
                                    "routes to today.")


async def check_store(storage: StorageSettings, timeout: float) -> Check:
    """Open the store read-only: PostgreSQL connects (and is migrated), or the SQLite file in the
    data dir opens (or the data dir can be created and written)."""
    if storage.database_url is not None:
        return await _check_postgres(storage, timeout)
    from bot.store.sql.probes import DB_NAME, count_conversations

    data = storage.data_dir
    problem = _unwritable(data)
    if problem:
        return Check("store", "FAIL", problem, "set [storage] data_dir to a directory this user can write, or fix its permissions")
    db = data / DB_NAME
    if not db.exists():
        return Check("store", "ok", f"{db} will be created at the first start.")
    try:
        count = await count_conversations(db, timeout)
    except Exception as e:  # noqa: BLE001 - every driver error is one verdict
        return Check("store", "FAIL", f"{db} cannot be read as a conversation database ({e.__class__.__name__}).",
                     "move the file aside (the bot starts a new one) or restore a backup")
    return Check("store", "ok", f"{db} opens ({count} conversations).")


def _unwritable(data: Path) -> str | None:
    """Why the data dir cannot be used, or ``None``; nothing is created."""
    if data.exists() and not data.is_dir():
        return f"The data dir {data} is a file, not a directory."
    existing = next(p for p in (data, *data.parents) if p.exists())
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"The data dir {data} cannot be {'written' if existing == data else 'created'} by this user."
    return None


async def _check_postgres(storage: StorageSettings, timeout: float) -> Check:
    from bot.store.sql.database import Database

    assert storage.database_url is not None
    db = Database(url=storage.database_url.get_secret_value(), connect_timeout=timeout, pool_size=1)
    try:
        await db.open(upgrade=False)
    except StorageError as e:
        if "needs migrating" in e.user_message and storage.auto_migrate:
            return Check("store", "warn", e.user_message.split(";")[0] + ".",
                         "nothing to do: the next start migrates it ([storage] auto_migrate)")
        return Check("store", "FAIL", e.user_message, "check [storage] database_url and that the server is up")
    finally:
        await db.close()
    return Check("store", "ok", f"The database {db.name} connects and is up to date.")


async def check_experts(inference: InferenceSettings, timeout: float, storage: StorageSettings | None = None) -> Check:
    """``GET {url}/models`` on every expert server (``[inference] experts_url``, then those
    ``hugginggpt experts launch`` registered in the store of ``storage``)."""
    keys = {url: key.get_secret_value() for url, key in inference.experts_api_keys.items()}
    urls = list(inference.experts_url)
    for record in await _registered(storage) if inference.mode != "providers" else []:
        urls, keys = urls + [record.url], {record.url: record.key, **keys}
    if not urls:
        return Check("experts", "skip", "No expert servers configured ([inference] experts_url is empty) or "
                                        "registered (`hugginggpt experts launch`).")
    if inference.mode == "providers":
        return Check("experts", "skip", "[inference] mode is providers: the expert servers are not used.")
    import httpx2

    from pipeline.catalog.servers import parse_listing

    async def ask(url: str) -> str:
        try:
            async with httpx2.AsyncClient(timeout=timeout, follow_redirects=False) as http:
                key = keys.get(url)
                auth = {"authorization": f"Bearer {key}"} if key else {}
                r = await http.get(f"{url.rstrip('/')}/models", headers={"accept": "application/json", **auth})
            if r.status_code == 401:
                return f"{safe_url(url)} answered HTTP 401 (its key goes in [inference] experts_api_keys)"
            if r.status_code != 200:
                return f"{safe_url(url)} answered HTTP {r.status_code}"
            return f"{len(parse_listing(url, r.json()).models)} models at {safe_url(url)}"
        except httpx2.HTTPError as e:
            return f"{safe_url(url)} cannot be reached ({e.__class__.__name__})"
        except ValueError:
            return f"{safe_url(url)} answered something that is not a model listing"

    said = await asyncio.gather(*(ask(u) for u in urls))
    bad = [s for s in said if not s[0].isdigit()]
    if bad:
        return Check("experts", "FAIL", "; ".join(bad) + ".",
                     "start `hugginggpt experts serve` there or remove the URL from [inference] experts_url")
    return Check("experts", "ok", "; ".join(said) + ".")


async def _registered(storage: StorageSettings | None) -> list[Any]:
    """The live registered expert servers; ``[]`` when the store cannot be read (the store check
    says why)."""
    if storage is None:
        return []
    from bot.store.sql.experts import read_registered

    try:
        return await read_registered(storage)
    except StorageError as e:
        logging.getLogger(__name__).info("doctor: the registered expert servers could not be read: %s", e)
        return []


async def check_mcp(settings: Settings, timeout: float) -> Check:
    """Every ``[mcp] servers`` entry starts (stdio: its program exists and runs) or answers
    (streamable HTTP), and lists its tools, within ``timeout`` seconds each; with the official
    ``mcp`` client as the pipeline uses it (:class:`pipeline.mcp_tools.ToolServer`). A stdio
    server's stderr is discarded here (``-v`` logs why a server failed)."""
    from bot.backends import mcp_servers

    if not settings.mcp.servers:
        return Check("mcp", "skip", "No MCP tool servers configured ([mcp] servers is empty).")
    said = await asyncio.gather(*(_mcp_server(c, timeout) for c in mcp_servers(settings)))
    bad = "; ".join(s for ok, s in said if not ok)
    if bad:
        return Check("mcp", "FAIL", bad[:1].upper() + bad[1:] + ".",
                     "correct or remove the server in [mcp.servers.NAME] (docs/mcp.md); with -v, doctor logs why")
    return Check("mcp", "ok", "; ".join(s for _, s in said) + ".")


async def _mcp_server(config: McpServerConfig, timeout: float) -> tuple[bool, str]:
    """``(started, what to say)`` of one MCP server."""
    from pipeline.mcp_tools import ToolServer

    name = config.name
    if config.command and shutil.which(config.command) is None:
        return False, f"the MCP server {name} cannot start: its program {config.command} does not exist or cannot be run"
    where = f"its program {os.path.basename(config.command)}" if config.command else safe_url(config.url or "")
    server = ToolServer(dataclasses.replace(config, connect_timeout=timeout, errlog=Path(os.devnull)))
    try:
        if not await server.connect():
            return False, f"the MCP server {name} ({where}) did not start and list its tools within {timeout:g} s"
        return True, f"{name}: {len(server.tools)} tools ({where})"
    finally:
        await server.aclose()


async def check_ffmpeg(timeout: float) -> Check:
    """``ffmpeg -version`` runs."""
    exe = shutil.which("ffmpeg")
    fix = "install ffmpeg (apt-get install ffmpeg, brew install ffmpeg) and put it on PATH"
    if exe is None:
        return Check("ffmpeg", "FAIL", "ffmpeg is not on PATH: the sound of videos and Discord's media need it.", fix)
    try:
        proc = await asyncio.create_subprocess_exec(exe, "-version", stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.DEVNULL)
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except (OSError, TimeoutError):
        return Check("ffmpeg", "FAIL", f"{exe} does not run.", fix)
    first = out.decode(errors="replace").splitlines()[0] if out else ""
    version = first.split()[2] if first.startswith("ffmpeg version") and len(first.split()) > 2 else "unknown version"
    return Check("ffmpeg", "ok", f"ffmpeg {version} at {exe}.")


def check_disk(data: Path, min_free_mb: float, prune: str = "hugginggpt store prune") -> Check:
    """Free space on the file system of the data dir (or of its nearest existing parent); ``prune``
    is the command that prunes, as the user runs the program (:func:`hugginggpt.common.command_hint`)."""
    existing = next(p for p in (data, *data.parents) if p.exists())
    free_mib = shutil.disk_usage(existing).free / 2**20
    said = f"{free_mib / 1024:.1f} GiB free for {data}"
    if free_mib < min_free_mb:
        return Check("disk", "FAIL", f"Only {said}, below {min_free_mb:g} MiB.",
                     f"free space, or set [storage] max_media_bytes and run `{prune}`")
    return Check("disk", "ok", said + ".")


@dataclass(frozen=True)
class Step:
    """One check to run: its ``name``, the ``modules`` it imports (loaded first, off the event
    loop), ``run``, which makes the check's coroutine, and ``grace``, seconds it may take beyond
    ``--timeout`` (to give up on what did not answer)."""

    name: str
    modules: tuple[str, ...]
    run: Callable[[], Awaitable[Check]]
    grace: float = 1.0


def _load(steps: list[Step], loop: asyncio.AbstractEventLoop) -> asyncio.Future[dict[str, BaseException | None]]:
    """Import each step's modules in one thread, in order; the future holds, once all are there,
    each step's import error (or ``None``). No check starts while the thread imports: the checks
    import more (the HTTP clients' transports, ``openai.resources``) on the loop's thread, and two
    threads importing the same packages at once can see a module half initialised (Python hands one
    over to break a circular import: an ``AttributeError`` in a check, seldom). A daemon thread: an
    import that hangs (a hung file system) does not keep the process from exiting."""
    loaded: asyncio.Future[dict[str, BaseException | None]] = loop.create_future()

    def settle(errors: dict[str, BaseException | None]) -> None:
        if not loaded.done():
            loaded.set_result(errors)

    def work() -> None:
        errors: dict[str, BaseException | None] = {}
        for step in steps:
            errors[step.name] = None
            try:
                for module in step.modules:
                    importlib.import_module(module)
            except Exception as e:  # noqa: BLE001 - a library that does not load is that check's verdict
                errors[step.name] = e
        loop.call_soon_threadsafe(settle, errors)

    threading.Thread(target=work, name="doctor-imports", daemon=True).start()
    return loaded


async def _bounded(step: Step, error: BaseException | None, timeout: float) -> Check:
    """``step`` once its libraries are loaded (``error``: their import's, or ``None``), within
    ``timeout`` (plus its ``grace``) from its own start; an unexpected error is a verdict too."""
    name = step.name
    if error is not None:
        return Check(name, "FAIL", f"Its libraries do not load ({error.__class__.__name__}: {str(error)[:120]}).",
                     "reinstall the program (pip install --force-reinstall hugginggpt-bot)")
    try:
        return await asyncio.wait_for(step.run(), timeout + step.grace)
    except TimeoutError:
        return Check(name, "FAIL", f"The check took longer than {timeout:g} s.", "see the other lines; try --timeout")
    except Exception as e:  # noqa: BLE001 - one line per check, never a traceback
        logging.getLogger(__name__).warning("doctor: the %s check failed unexpectedly", name, exc_info=True)
        return Check(name, "FAIL", f"The check failed unexpectedly ({e.__class__.__name__}).", "run with -v for details")


async def run_checks(settings: Settings, timeout: float, min_free_mb: float,
                     prune: str = "hugginggpt store prune") -> list[Check]:
    """Every check after the settings, concurrently, in the order of :data:`CHECKS` (``prune``: as
    :func:`check_disk`)."""
    steps = [
        Step("controller", ("openai",), lambda: check_controller(settings.llm, timeout)),
        Step("hub", ("httpx2", "huggingface_hub"), lambda: check_hub(settings.inference, timeout)),
        Step("providers", ("huggingface_hub", "pipeline.catalog.availability"),
             lambda: check_providers(settings.inference, timeout)),
        Step("store", ("bot.store.sql.probes", "bot.store.sql.database"), lambda: check_store(settings.storage, timeout)),
        Step("experts", ("httpx2", "pipeline.catalog.servers", "bot.store.sql.experts"),
             lambda: check_experts(settings.inference, timeout, settings.storage)),
        Step("mcp", ("mcp", "pipeline.mcp_tools", "bot.backends"), lambda: check_mcp(settings, timeout), 1.0 + MCP_STOP_SECONDS),
        Step("ffmpeg", (), lambda: check_ffmpeg(timeout)),
    ]
    disk = check_disk(settings.storage.data_dir, min_free_mb, prune)
    try:
        errors = await asyncio.wait_for(_load(steps, asyncio.get_running_loop()), IMPORT_SECONDS)
    except TimeoutError:
        return [*(Check(s.name, "FAIL", f"The checks' libraries did not load within {IMPORT_SECONDS:g} s.",
                        "the machine or its disk is overloaded; try again") for s in steps), disk]
    done = await asyncio.gather(*(_bounded(s, errors[s.name], timeout) for s in steps))
    return [*done, disk]


def _quiet_logs(verbose: int) -> None:
    """The checks' own log lines (a server that failed, and why) on stderr with ``-v``; else
    nowhere: the verdicts are the output (doctor writes no file)."""
    from bot.logs import setup_logging

    if verbose:
        setup_logging(verbose=verbose)
    elif not logging.getLogger().handlers:
        logging.getLogger().addHandler(logging.NullHandler())


async def main(args: argparse.Namespace, settings: Settings | None = None, out: TextIO = sys.stdout) -> int:
    """``hugginggpt doctor``: print the checks (lines or ``--json``); 0 when none failed, else 1.
    Loads the settings itself (a settings problem is a check, not an error)."""
    _quiet_logs(getattr(args, "verbose", 0))
    first, loaded = check_settings(args.config)
    checks = [first]
    if loaded is None:
        checks += [Check(n, "skip", "Not checked: the settings did not load.") for n in CHECKS]
    else:
        checks += await run_checks(loaded, args.timeout, args.min_free_mb, command_hint(args, "store", "prune"))
    failed = any(c.status == "FAIL" for c in checks)
    if args.json:
        print(json.dumps({"ok": not failed, "checks": [asdict(c) for c in checks]}, indent=2, ensure_ascii=False), file=out)
    else:
        for c in checks:
            print(c.line(), file=out)
        print("All checks passed." if not failed else "Some checks failed: see the lines marked FAIL.", file=out)
    return 1 if failed else 0
