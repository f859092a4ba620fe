"""The code base's shape (ARCHITECTURE.md, "Where things live"), checked from the source itself.

* ``pipeline/`` imports nothing of ``bot/`` or ``adapters/``;
* ``bot/`` imports ``adapters/`` only from ``bot/cli/``;
* nothing but the command line imports the sandbox;
* no module imports another in a cycle;
* no product module is over 450 lines;
* one conversation store: a single class implements the conversations protocol, database drivers
  are imported only by the store's package (``bot/store/sql``) and dialect-specific SQLAlchemy
  only by its dialect module; no function of the store is over 60 lines (the Alembic revision
  files, frozen once released, aside).

Imports are read with :mod:`ast` (also those inside functions), so a lazy import counts too.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pipeline", "bot", "adapters", "prompts")
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


# -- one conversation store -------------------------------------------------------------------------

STORE_PACKAGE = "bot.store.sql"
DRIVERS = ("sqlite3", "aiosqlite", "asyncpg", "psycopg", "sqlalchemy")
CONVERSATION_METHODS = {"get_or_create", "begin_turn", "finish_turn", "add_resource", "context", "turns"}
MAX_FUNCTION_LINES = 60


def imported_names(path: Path) -> set[str]:
    """Every module name ``path`` imports absolutely (``import a.b`` and ``from a.b import c``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_one_conversation_store_implementation() -> None:
    implementations = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef) or any(ast.unparse(b).endswith("Protocol") for b in node.bases):
                continue
            defined = {f.name for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
            if len(defined & CONVERSATION_METHODS) >= 3:
                implementations.append(f"{name}.{node.name}")
    assert implementations == ["bot.store.sql.store.SQLStore"]


def test_database_drivers_only_in_the_store_package() -> None:
    outside = {name: sorted(m for m in imported_names(path) if m.split(".")[0] in DRIVERS)
               for name, path in modules().items() if not name.startswith(STORE_PACKAGE)}
    assert {n: m for n, m in outside.items() if m} == {}
    dialects = {name for name, path in modules().items()
                if any(m.startswith("sqlalchemy.dialects") for m in imported_names(path))}
    assert dialects == {"bot.store.sql.dialect"}  # SQLite and PostgreSQL differ in its named functions only


def test_no_store_function_over_the_length_limit() -> None:
    long = []
    for name, path in modules().items():
        if not name.startswith("bot.store") or ".alembic.versions." in name:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {lines} lines")
    assert long == []
