"""The shipped package reaches the simulator in one place only: ``autoscaler simulate`` imports
``simulator.simulate`` by name when it runs (import-linter cannot see a lazy import by name, so this test
does), and the simulator never imports the CLI back (``.importlinter``)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "functions" / "autoscaler"
DEV_ONLY = ("simulator", "benchmarks")


def _names_reached(path: Path) -> list[str]:
    """Module names a file imports statically or names to ``importlib.import_module`` / ``__import__``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append(node.module)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append(node.args[0].value)
    return found


def test_the_shipped_package_names_the_simulator_only_in_the_simulate_command() -> None:
    reached = {(str(path.relative_to(PACKAGE)), name) for path in PACKAGE.rglob("*.py")
               for name in _names_reached(path) if name.split(".")[0] in DEV_ONLY}
    assert reached == {("cli.py", "simulator.simulate")}


def test_the_check_sees_a_lazy_import(tmp_path: Path) -> None:
    planted = tmp_path / "x.py"
    planted.write_text("import importlib\nimportlib.import_module('benchmarks.cost')\n")
    assert _names_reached(planted) == ["importlib", "benchmarks.cost"]
