"""The code base's shape (docs/architecture.md), checked from the source itself.

* ``pipeline/`` imports nothing of ``bot/`` or ``adapters/``;
* no import runs back up: ``bot/`` imports neither ``adapters/`` nor the program (``hugginggpt/``),
  which is the only package that imports all the others;
* the stand-in backends of ``--sandbox`` (``sandbox/``) are imported only by the command line
  (``hugginggpt/``), never by ``pipeline/`` or ``expert_server/``, and import neither ``bot/`` nor
  ``adapters/`` nor the program (``hugginggpt/``): tests and benchmarks share them;
* ``expert_server/`` (a separate deployable) imports nothing of ``bot/``, ``adapters/`` or
  ``pipeline/``, and nothing outside ``hugginggpt/`` imports it;
* no module imports another in a cycle;
* no product module is over 800 lines (a module holds one concept, however long it is up to that);
* one conversation store: a single class implements the conversations protocol, database drivers
  are imported only by the store's package (``bot/store/sql``) and dialect-specific SQLAlchemy
  only by its dialect module;
* the command line (``hugginggpt/``) imports no platform SDK: platforms are the adapters' own;
* the front ends (``adapters/``) never touch the store: they import nothing of ``bot.store`` and
  read no ``service.store`` (nor ``service.conversations``, which returns it); what they need of
  it is a service method;
* no mixins that rely on their host's attributes: a class of ours used as a base reads no
  ``self.x`` that it (or a base of ours) does not define;
* no product function is over 60 lines (the Alembic revision files, frozen once released, aside);
* no private name (a leading underscore) is imported from another module of ours;
* no "issue N" in comments or strings: the code says why, the tracker is not its documentation.

Imports are read with :mod:`ast` (also those inside functions), so a lazy import counts too.
"""

from __future__ import annotations

import ast
import graphlib
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("hugginggpt", "pipeline", "bot", "adapters", "prompts", "expert_server", "sandbox")
MAX_LINES = 800
MAX_FUNCTION_LINES = 60
NEW_CONCEPTS: tuple[str, ...] = (
    "pipeline.mcp_tasks",
    "pipeline.wire",  # the HTTP wire (aiohttp under httpx2) of the controller and the experts
    "adapters.mcp.tasks",
    "adapters.http.responses",
    "adapters.discord.upload",
    "hugginggpt.jobs",
    "sandbox.hf_jobs",
    "bot.metrics",
    "expert_server.metrics",
    "bot.approval",
    "adapters.discord.approval",
    "pipeline.cost",
    "bot.budgets",
    "bot.store.sql.spend",
    "bot.store.sql.experts",
    "hugginggpt.usage",
    "pipeline.tracing",
    "expert_server.tracing",
)
"""Modules added since the bound below was set, each for a concept the product did not have (cost,
telemetry, ...): a module is added by naming it here, never to cut an existing concept to a size."""
MAX_MODULES = 218 + len(NEW_CONCEPTS)
"""Product modules besides the schema's revisions (one file per released migration, which only
grows): rooms are cut by concept, and the count does not grow back (225 with the 7 revisions when
this bound was set, 244 before that shape step)."""
SMALL_LINES, MAX_SMALL_MODULES = 40, 12
"""Modules under 40 lines that define something: no more than 12 (a small concept is fine; a
concept cut into slivers is not)."""
PLATFORM_SDKS = ("slack_bolt", "slack_sdk", "discord", "aiohttp.web")


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
    assert "bot.settings" in g["hugginggpt.common"]
    assert "adapters.terminal.lines" in g["hugginggpt.run"]
    assert "sandbox" in g["hugginggpt.common"]  # a lazy import inside a function


def test_pipeline_imports_neither_bot_nor_adapters() -> None:
    bad = {m: sorted(t for t in ts if t.split(".")[0] in ("bot", "adapters"))
           for m, ts in graph().items() if m.startswith("pipeline")}
    assert {m: ts for m, ts in bad.items() if ts} == {}


def test_no_import_runs_back_up() -> None:
    """The program (``hugginggpt/``) imports the others; ``adapters/`` imports ``bot/``; ``bot/``
    imports ``pipeline/``: never the other way."""
    above = {"bot": ("adapters", "hugginggpt"), "adapters": ("hugginggpt",), "pipeline": ("hugginggpt",)}
    bad = {m: sorted(t for t in ts if top(t) in above[top(m)]) for m, ts in graph().items() if top(m) in above}
    assert {m: ts for m, ts in bad.items() if ts} == {}


def test_the_expert_server_stands_alone() -> None:
    g = graph()
    bad = {m: sorted(t for t in ts if t.split(".")[0] in ("bot", "adapters", "pipeline"))
           for m, ts in g.items() if m.startswith("expert_server")}
    assert {m: ts for m, ts in bad.items() if ts} == {}
    users = {m for m, ts in g.items() if any(t.startswith("expert_server") for t in ts)
             and not m.startswith(("expert_server", "hugginggpt"))}
    assert users == set()
    assert "expert_server.__main__" in g["hugginggpt.experts"]  # a lazy import the reader sees


def top(module: str) -> str:
    """The top-level package of a dotted module name."""
    return module.split(".")[0]


def test_only_the_command_line_starts_the_sandbox() -> None:
    g = graph()
    users = {m for m, ts in g.items() if any(top(t) == "sandbox" for t in ts) and top(m) != "sandbox"}
    assert users and all(m.startswith("hugginggpt.") for m in users), sorted(users)
    # the engine and the expert server run against real backends only
    assert {m for m in users if top(m) in ("pipeline", "expert_server")} == set()


def test_the_sandbox_stands_outside_the_bot() -> None:
    """The stand-in backends speak the wire formats the product's clients speak; they import
    none of the front ends they stand in for (``bot/``, ``adapters/``) nor the program."""
    bad = {m: sorted(t for t in ts if top(t) in ("bot", "adapters", "hugginggpt"))
           for m, ts in graph().items() if top(m) == "sandbox"}
    assert {m: ts for m, ts in bad.items() if ts} == {}


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


def test_the_product_does_not_grow_in_modules() -> None:
    found = {name: path for name, path in modules().items() if ".alembic.versions." not in name}
    assert len(found) <= MAX_MODULES, f"{len(found)} product modules: merge by concept before adding one"
    assert set(NEW_CONCEPTS) <= set(found), set(NEW_CONCEPTS) - set(found)
    small = {}
    for name, path in found.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defines = any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign))
                      for n in tree.body)
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if defines and lines < SMALL_LINES:
            small[name] = lines
    assert len(small) <= MAX_SMALL_MODULES, small


def trees() -> dict[str, tuple[Path, ast.Module]]:
    """Dotted module name → (file, syntax tree), for every product module."""
    return {name: (path, ast.parse(path.read_text(encoding="utf-8"))) for name, path in modules().items()}


def external_imports(tree: ast.Module) -> set[str]:
    """Absolute module names a tree imports (``from a import b`` counts as ``a`` and ``a.b``)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_command_line_imports_no_platform_sdk() -> None:
    def platform(name: str) -> bool:
        return any(name == sdk or name.startswith(sdk + ".") for sdk in PLATFORM_SDKS)

    bad = {m: sorted(n for n in external_imports(tree) if platform(n))
           for m, (_, tree) in trees().items() if m.startswith("hugginggpt")}
    assert {m: ns for m, ns in bad.items() if ns} == {}


def test_the_sdk_rule_sees_a_lazy_platform_import() -> None:
    tree = ast.parse("def main():\n    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler\n")
    assert "slack_bolt.adapter.socket_mode.async_handler" in external_imports(tree)


def _base_names(cls: ast.ClassDef) -> list[str]:
    return [b.id if isinstance(b, ast.Name) else b.attr for b in cls.bases if isinstance(b, (ast.Name, ast.Attribute))]


def _defined(cls: ast.ClassDef) -> set[str]:
    """Names a class defines for ``self``: methods, class attributes with a value, and attributes
    it assigns (``self.x = ...`` anywhere in its body). A bare annotation defines nothing."""
    names: set[str] = set()
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    for node in ast.walk(cls):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(e.attr for e in ast.walk(target)
                             if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self")
    return names


def host_attributes(sources: dict[str, ast.Module]) -> dict[str, list[str]]:
    """For each class of ours that another class of ours derives from: the ``self`` attributes it
    reads but neither it nor a base of ours defines (what it expects from its host)."""
    classes: dict[str, list[tuple[str, ast.ClassDef]]] = {}
    for module, tree in sources.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, []).append((module, node))
    used_as_base = {b for found in classes.values() for _, c in found for b in _base_names(c) if b in classes}
    out: dict[str, list[str]] = {}
    for name in used_as_base:
        for module, cls in classes[name]:
            defined, todo = _defined(cls), [b for b in _base_names(cls) if b in classes]
            while todo:
                for _, base in classes[todo.pop()]:
                    defined |= _defined(base)
                    todo += [b for b in _base_names(base) if b in classes]
            read = {n.attr for n in ast.walk(cls)
                    if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"}
            if read - defined:
                out[f"{module}.{name}"] = sorted(read - defined)
    return out


def test_no_mixin_relies_on_its_host() -> None:
    found = host_attributes({m: tree for m, (_, tree) in trees().items()})
    assert found == {}


def test_the_mixin_rule_finds_a_host_attribute() -> None:
    src = ast.parse(
        "class Mixin:\n    client: object\n    def ping(self):\n        return self.client, self._say\n"
        "class Host(Mixin):\n    def __init__(self):\n        self.client = 1\n"
        "class Own:\n    def __init__(self):\n        self.x = 1\n    def get(self):\n        return self.x\n"
        "class Sub(Own):\n    pass\n"
    )
    assert host_attributes({"m": src}) == {"m.Mixin": ["_say", "client"]}


def long_functions(module: str, tree: ast.Module) -> dict[str, int]:
    """Qualified name → lines, for each function of ``tree`` over :data:`MAX_FUNCTION_LINES`
    (decorators not counted; nested functions counted in their parent and on their own)."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (child.end_lineno or child.lineno) - child.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    out[f"{prefix}{child.name}"] = lines
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(tree, module + ".")
    return out


def test_no_product_function_over_the_size_limit() -> None:
    found: dict[str, int] = {}
    for module, (path, tree) in trees().items():
        if "alembic" in path.parts and "versions" in path.parts:
            continue  # a migration revision is one generated script of statements, read top to bottom
        found.update(long_functions(module, tree))
    assert found == {}


def test_no_private_name_imported_across_modules() -> None:
    known = set(modules())
    bad = []
    for module, (_, tree) in trees().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                ours = node.level > 0 or (node.module or "").split(".")[0] in PACKAGES
                if private and ours:
                    bad.append(f"{module}: from {'.' * node.level}{node.module or ''} import {', '.join(private)}")
    assert bad == [] and known


ISSUE = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)


def issue_mentions(source: str) -> list[str]:
    """Comments and strings of ``source`` that name an issue ("issue 11", "issues 4 and 10")."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [t.string.strip()[:80] for t in tokens if t.type in (tokenize.COMMENT, tokenize.STRING) and ISSUE.search(t.string)]


def test_no_issue_numbers_in_comments() -> None:
    found = {str(p.relative_to(ROOT)): issue_mentions(p.read_text(encoding="utf-8")) for p in modules().values()}
    assert {f: m for f, m in found.items() if m} == {}
    assert issue_mentions('x = 1  # see issue 11\n"""Sharding (issues 4 and 10)."""\n') != []


# -- one conversation store -------------------------------------------------------------------------

STORE_PACKAGE = "bot.store.sql"
DRIVERS = ("sqlite3", "aiosqlite", "asyncpg", "psycopg", "sqlalchemy")
CONVERSATION_METHODS = {"get_or_create", "begin_turn", "finish_turn", "add_resource", "context", "turns"}


def test_one_conversation_store_implementation() -> None:
    implementations = []
    for name, (_, tree) in trees().items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef) or any(ast.unparse(b).endswith("Protocol") for b in node.bases):
                continue
            defined = {f.name for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
            if len(defined & CONVERSATION_METHODS) >= 3:
                implementations.append(f"{name}.{node.name}")
    assert implementations == ["bot.store.sql.store.SQLStore"]


def test_database_drivers_only_in_the_store_package() -> None:
    outside = {name: sorted(m for m in external_imports(tree) if m.split(".")[0] in DRIVERS)
               for name, (_, tree) in trees().items() if not name.startswith(STORE_PACKAGE)}
    assert {n: m for n, m in outside.items() if m} == {}
    dialects = {name for name, (_, tree) in trees().items()
                if any(m.startswith("sqlalchemy.dialects") for m in external_imports(tree))}
    assert dialects == {"bot.store.sql.dialect"}  # SQLite and PostgreSQL differ in its named functions only


# -- the front ends reach the store through the service only ---------------------------------------

STORE_ATTRIBUTES = {"store", "conversations"}
"""The service's attributes that are its conversation store (``Service.conversations`` returns it)."""

def service_store_uses(tree: ast.Module) -> list[str]:
    """``service.store``, ``self.service.store``, ``st.service.conversations``...: the store or
    ``conversations`` attribute read on anything named ``service``, as source text."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in STORE_ATTRIBUTES:
            owner = node.value
            name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
            if name == "service":
                found.append(ast.unparse(node))
    return found


def test_adapters_import_nothing_of_the_store() -> None:
    bad = {m: sorted(t for t in ts if t == "bot.store" or t.startswith("bot.store."))
           for m, ts in graph().items() if top(m) == "adapters"}
    assert {m: ts for m, ts in bad.items() if ts} == {}


def test_adapters_read_no_store_off_the_service() -> None:
    uses = {(m, use) for m, (_, tree) in trees().items() if top(m) == "adapters" for use in service_store_uses(tree)}
    assert uses == set()


def test_the_store_rules_see_a_use(tmp_path: Path) -> None:
    source = ("async def f(st, service):\n    from bot import store\n    from bot.store.sql import store as sql\n"
              "    await st.service.store.find('x')\n    return service.conversations\n")
    (tmp_path / "x.py").write_text(source, encoding="utf-8")
    assert imports_of("adapters.x", tmp_path / "x.py", {"bot", "bot.store", "bot.store.sql.store"}) == {
        "bot.store", "bot.store.sql.store"}
    assert sorted(service_store_uses(ast.parse(source))) == ["service.conversations", "st.service.store"]
    assert service_store_uses(ast.parse("def f(self):\n    return self.store, self.service.events\n")) == []
