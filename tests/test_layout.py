"""The code base's shape (ARCHITECTURE.md, "Where things live"), checked from the source itself.

* ``pipeline/`` imports nothing of ``bot/`` or ``adapters/``;
* ``bot/`` imports ``adapters/`` only from ``bot/cli/``;
* nothing but the command line imports the sandbox;
* ``expert_server/`` (a separate deployable) imports nothing of ``bot/``, ``adapters/`` or
  ``pipeline/``, and nothing outside ``bot/cli/`` imports it;
* no module imports another in a cycle;
* no product module is over 450 lines.

Imports are read with :mod:`ast` (also those inside functions), so a lazy import counts too.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pipeline", "bot", "adapters", "prompts", "expert_server")
MAX_LINES = 450


def modules() -> dict[str, Path]:
    """Dotted module name → file, for every product module."""
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Product modules that ``name`` imports (absolute and relative, at any depth of the file)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_pkg = path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    found: set[str] = set()

    def add(target: str) -> None:
        # the module itself, or the closest enclosing package that is a product module
        parts = target.split(".")
        while parts:
            candidate = ".".join(parts)
            if candidate in known:
                found.add(candidate)
                return
            parts.pop()

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                prefix = ".".join(anchor + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            for alias in node.names:
                add(f"{prefix}.{alias.name}" if prefix else alias.name)
    found.discard(name)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def test_the_reader_sees_imports_at_every_depth() -> None:
    g = graph()
    assert "bot.settings" in g["bot.cli.common"]
    assert "adapters.terminal" in g["bot.cli.run"]
    assert "bot.sandbox" in g["bot.cli.common"]  # a lazy import inside a function


def test_pipeline_imports_neither_bot_nor_adapters() -> None:
    bad = {m: sorted(t for t in ts if t.split(".")[0] in ("bot", "adapters"))
           for m, ts in graph().items() if m.startswith("pipeline")}
    assert {m: ts for m, ts in bad.items() if ts} == {}


def test_bot_imports_adapters_only_from_the_command_line() -> None:
    bad = {m: sorted(t for t in ts if t.startswith("adapters"))
           for m, ts in graph().items() if m.startswith("bot") and not m.startswith("bot.cli")}
    assert {m: ts for m, ts in bad.items() if ts} == {}


def test_the_expert_server_stands_alone() -> None:
    g = graph()
    bad = {m: sorted(t for t in ts if t.split(".")[0] in ("bot", "adapters", "pipeline"))
           for m, ts in g.items() if m.startswith("expert_server")}
    assert {m: ts for m, ts in bad.items() if ts} == {}
    users = {m for m, ts in g.items() if any(t.startswith("expert_server") for t in ts)
             and not m.startswith(("expert_server", "bot.cli"))}
    assert users == set()
    assert "expert_server.__main__" in g["bot.cli.experts"]  # a lazy import the reader sees


def test_only_the_command_line_starts_the_sandbox() -> None:
    users = {m for m, ts in graph().items()
             if any(t.startswith("bot.sandbox") for t in ts) and not m.startswith(("bot.sandbox", "bot.cli"))}
    assert users == set()


def test_no_import_cycles() -> None:
    g = graph()
    # a package's __init__ re-exporting its own modules is not a cycle of logic: leave out
    # edges from a package to its own submodules
    edges = {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in g.items()}
    try:
        tuple(graphlib.TopologicalSorter(edges).static_order())
    except graphlib.CycleError as e:
        raise AssertionError(f"import cycle: {' -> '.join(e.args[1])}") from None


def test_no_product_module_over_the_size_limit() -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines()) for p in modules().values()}
    assert {f: n for f, n in sizes.items() if n > MAX_LINES} == {}
