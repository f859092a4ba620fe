"""Every third-party package the product imports is declared, and no module reaches into a
library's private modules (a leading underscore: they change without notice, as
``openai._streaming`` did).

``deptry`` reads the imports of the product packages and compares them with ``pyproject.toml``
(its settings are there, under ``[tool.deptry]``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("bot", "pipeline", "adapters", "prompts", "expert_server", "sandbox")


def test_every_imported_package_is_declared():
    deptry = Path(sys.executable).with_name("deptry")
    p = subprocess.run([str(deptry), "."], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr


ALLOWED_PRIVATE = {
    # huggingface_hub has no public view of its provider helpers: which providers and tasks the
    # installed client can call (PROVIDERS) and its cached, synchronous Hub look-up of a model's
    # provider mapping (get_provider_helper), which pipeline/experts/providers.py runs in a thread
    # so that it does not block the event loop inside the async call. Remove when it has one.
    ("pipeline/experts/providers.py", "huggingface_hub.inference._providers"),
}


def _private(name: str) -> bool:
    return any(p.startswith("_") and not p.startswith("__") for p in name.split(".")[1:])


def private_imports(root: Path = ROOT) -> list[str]:
    """``file:line module`` for each import of a third-party module path with a private part."""
    found = []
    for pkg in PRODUCT:
        for path in sorted((root / pkg).rglob("*.py")) if (root / pkg).is_dir() else []:
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = []
                if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    names = [node.module] if _private(node.module) else [f"{node.module}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                for name in names:
                    parts = name.split(".")
                    if parts[0] in PRODUCT or parts[0] == "__future__":
                        continue
                    if _private(name) and (str(path.relative_to(root)), name) not in ALLOWED_PRIVATE:
                        found.append(f"{path.relative_to(root)}:{node.lineno} {name}")
    return found


def test_no_private_modules_of_libraries_are_imported():
    assert private_imports() == []


def test_the_private_import_reader_sees_them(tmp_path):
    def scan(source: str) -> list[str]:
        (tmp_path / "bot").mkdir(exist_ok=True)
        (tmp_path / "bot" / "m.py").write_text(source, encoding="utf-8")
        return private_imports(tmp_path)

    assert scan("from openai._streaming import SSEDecoder\n") == ["bot/m.py:1 openai._streaming"]
    assert scan("from huggingface_hub.utils import _http\n") == ["bot/m.py:1 huggingface_hub.utils._http"]
    assert scan("from pipeline._x import y\nimport json\nfrom __future__ import annotations\n") == []
