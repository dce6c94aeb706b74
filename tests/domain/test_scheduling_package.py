"""The scheduler package's shape (issue 29): composed objects, public names inside the package, words for
names. Checked on the source so that it stays so."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "functions" / "autoscaler" / "domain" / "scheduling"
MODULES = sorted(PACKAGE.glob("*.py"))
SHORT = 2  # a name this short or shorter is a letter, not a word


def _loop_targets(tree: ast.AST) -> set[int]:
    """Ids of the Name nodes bound as a loop index: the counter of ``range(...)`` or of ``enumerate(...)``."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.For, ast.comprehension)) or not isinstance(node.iter, ast.Call):
            continue
        called = node.iter.func.id if isinstance(node.iter.func, ast.Name) else ""
        if called == "range" and isinstance(node.target, ast.Name):
            out.add(id(node.target))
        elif called == "enumerate" and isinstance(node.target, ast.Tuple) and node.target.elts:
            out.add(id(node.target.elts[0]))
    return out


def _class_fields(tree: ast.AST) -> set[int]:
    """Ids of the Name nodes declared as fields in a class body (attributes, not locals)."""
    return {id(statement.target) for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
            for statement in node.body if isinstance(statement, ast.AnnAssign)}


def test_no_parameter_or_local_of_one_or_two_letters() -> None:
    found = []
    for path in MODULES:
        tree = ast.parse(path.read_text())
        loops = _loop_targets(tree) | _class_fields(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.arg) and len(node.arg) <= SHORT:
                found.append(f"{path.name}:{node.lineno} parameter {node.arg}")
            elif (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and len(node.id) <= SHORT
                  and id(node) not in loops and node.id != "_"):
                found.append(f"{path.name}:{node.lineno} local {node.id}")
    assert not found, found


def test_no_private_name_imported_across_modules() -> None:
    found = []
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("autoscaler."):
                found += [f"{path.name}: {node.module}.{alias.name}" for alias in node.names
                          if alias.name.startswith("_")]
    assert not found, found


def test_no_inheritance_across_modules() -> None:
    """Composition: a class of the package derives from nothing the package defines elsewhere."""
    defined = {path.stem: {node.name for node in ast.walk(ast.parse(path.read_text()))
                           if isinstance(node, ast.ClassDef)} for path in MODULES}
    found = []
    for path in MODULES:
        others = set().union(*(names for stem, names in defined.items() if stem != path.stem))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                found += [f"{path.name}: {node.name}({base.id})" for base in node.bases
                          if isinstance(base, ast.Name) and base.id in others]
    assert not found, found


def test_untolerated_taints_is_named_for_what_it_returns() -> None:
    from autoscaler.domain.models import Taint, Toleration, untolerated_taints

    taint = Taint("dedicated", "gpu", "NoSchedule")
    assert untolerated_taints((), (taint,)) == [taint]
    assert untolerated_taints((Toleration(key="dedicated", operator="Exists"),), (taint,)) == []
