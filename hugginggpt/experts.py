"""``hugginggpt experts``: the local expert server (docs/experts.md).

    hugginggpt experts serve [--host H] [--port N] [--device auto|cpu|cuda|cuda:N] [--memory-budget SIZE] [--config FILE]
    hugginggpt experts download MODEL... | --preset minimal|standard|full
    hugginggpt experts launch --image IMAGE --flavor FLAVOUR [--port N] [--idle-minutes M] [--max-minutes M]
                              [--no-register]

Only parses options: the server is the separate package ``expert_server`` (its libraries are the
``experts`` extra), imported when a subcommand runs. ``--config`` here is the expert server's own
TOML file, not the bot's. ``launch`` rents a GPU for the server on Hugging Face Jobs
(:mod:`hugginggpt.jobs`) and needs neither.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from bot.errors import ConfigError
from pipeline.errors import HubError

from .common import PARTIAL, port_number


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``experts serve``, ``download`` and ``launch`` to the CLI; returns the ``experts`` parser."""
    p = subparsers.add_parser("experts", help="run models on this machine (the local expert server)")
    sub = p.add_subparsers(dest="experts_command", metavar="SUBCOMMAND", required=True)
    s = sub.add_parser("serve", help="serve the cached Hugging Face models in the HF inference wire format")
    s.add_argument("--host", default=None, help="address to bind (default 127.0.0.1)")
    s.add_argument("--port", type=port_number, default=None, help="port (default 8081)")
    s.add_argument("--device", default=None, help="auto | cpu | cuda | cuda:N (default auto)")
    s.add_argument("--memory-budget", default=None, metavar="SIZE",
                   help="RAM (CPU) or VRAM (GPU) the loaded models may take, e.g. 8GB")
    s.add_argument("--config", dest="experts_config", default=None, metavar="FILE",
                   help="the expert server's TOML settings (docs/experts.md)")
    # asyncio's own event loop, as ``python -m expert_server``: its bound on memory under a flood was
    # measured there (benchmarks.bench_experts --flood: 91-105 % of the budget; on uvloop 105-118 %)
    s.set_defaults(event_loop="asyncio")
    d = sub.add_parser("download", help="download models (or a preset) into the Hugging Face cache")
    d.add_argument("models", nargs="*", metavar="MODEL", help="Hub ids, e.g. google/vit-base-patch16-224")
    d.add_argument("--preset", choices=("minimal", "standard", "full"), help="a shipped set for every paper task")
    _add_launch(sub)
    p.set_defaults(handler=main)
    return p


def _add_launch(sub: Any) -> None:
    """``experts launch``: the options of :class:`hugginggpt.jobs.LaunchSpec`."""
    la = sub.add_parser("launch", help="run the expert server on a rented GPU as a Hugging Face Job, registered "
                                       "with the bot, stopped when idle or at a deadline")
    la.add_argument("--image", required=True, help="Docker image (or hf.co/spaces/...) with the bot and its experts "
                                                   "extra installed")
    la.add_argument("--flavor", required=True, help="Jobs hardware flavour, e.g. a10g-small, l4x1, a100-large")
    la.add_argument("--port", type=port_number, default=8081, help="the server's port, exposed (default 8081)")
    la.add_argument("--idle-minutes", type=float, default=15.0, help="stop after this long without a model request "
                                                                      "(default 15)")
    la.add_argument("--max-minutes", type=float, default=60.0, help="stop after this long whatever happens; also the "
                                                                     "job's own timeout (default 60)")
    la.add_argument("--poll", type=float, default=5.0, help="seconds between looks at the job (default 5)")
    la.add_argument("--preset", choices=("none", "minimal", "standard", "full"), default="minimal",
                    help="models the job downloads before serving (none: the image holds its cache; default minimal)")
    la.add_argument("--namespace", default=None, help="user or organisation billed (default: the token's owner)")
    la.add_argument("--no-register", action="store_true", help="record nothing in the bot's store: print the two "
                                                               "settings to give the bot by hand instead")


def _download(args: argparse.Namespace) -> int:
    from expert_server.download import HubUnreachable, download, preset_models

    models = list(args.models) + (preset_models(args.preset) if args.preset else [])
    if not models:
        raise ConfigError("Name models to download, or a --preset (minimal, standard, full).")
    try:
        done, failed = download(models)
    except HubUnreachable as e:
        for model in e.done:
            print(f"ok      {model}")
        raise HubError(str(e)) from None
    for model in done:
        print(f"ok      {model}")
    for model, why in failed:
        print(f"failed  {model}: {why}", file=sys.stderr)
    return 0 if not failed else PARTIAL  # some models failed: a backend, as a failed task


async def main(args: argparse.Namespace, settings: Any) -> int:
    """Serve (on this event loop), download (in a thread) or launch on HF Jobs. Returns the exit status.

    Raises:
        ConfigError: the experts extra is not installed, or nothing to download.
    """
    if args.experts_command == "launch":
        from .jobs import main as launch

        return await launch(args, settings)
    try:
        import expert_server  # noqa: F401
        if args.experts_command == "serve":
            import torch  # noqa: F401
    except ImportError as e:
        raise ConfigError(f"The expert server needs the experts extra: pip install 'hugginggpt-bot[experts]' ({e.name} "
                          "is missing).") from None
    if args.experts_command == "serve":
        from expert_server.__main__ import run

        return await run(args)
    return await asyncio.to_thread(_download, args)
