"""``python -m expert_server [--host H] [--port N] [--device D] [--memory-budget SIZE] [--config FILE]``:
the expert server on its own (the same as ``hugginggpt experts serve``)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from .config import load_config, parse_size


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The server's options (shared with ``hugginggpt experts serve``)."""
    p.add_argument("--host", default=None, help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default 8081)")
    p.add_argument("--device", default=None, help="auto | cpu | cuda | cuda:N (default auto)")
    p.add_argument("--memory-budget", default=None, metavar="SIZE",
                   help="RAM (CPU) or VRAM (GPU) the models may take, e.g. 8GB (default: 80%% of free RAM / 90%% of VRAM)")
    p.add_argument("--config", dest="experts_config", default=None, metavar="FILE", help="the server's TOML settings")


async def run(args: argparse.Namespace) -> int:
    """Serve with the parsed options until SIGINT/SIGTERM; returns an exit status (2: unusable
    settings)."""
    from pydantic import ValidationError

    from .server import serve

    try:
        budget = parse_size(args.memory_budget) if args.memory_budget else None
        config = load_config(args.experts_config, host=args.host, port=args.port, device=args.device,
                             memory_budget=budget)
        await serve(config)
    except (ValueError, OSError, ValidationError) as e:
        print(f"Error: {str(e).splitlines()[0] if not isinstance(e, ValidationError) else _first(e)}", file=sys.stderr)
        return 2
    return 0


def _first(e: Exception) -> str:
    err = e.errors()[0]  # type: ignore[attr-defined]
    return f"setting {'.'.join(str(x) for x in err['loc'])}: {err['msg']}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m expert_server", description="HuggingGPT's local expert server")
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
