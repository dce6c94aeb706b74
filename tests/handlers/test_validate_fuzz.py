"""Whatever a file holds, validation and planning answer with findings, never a traceback: seeded random
mutations (values of the wrong type, deleted keys) of the demo cluster file and the minimal snapshot."""

from __future__ import annotations

import contextlib
import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.adapters.snapshot_file import load_snapshot
from autoscaler.domain.errors import ConfigError
from autoscaler.domain.scheduling import plan
from autoscaler.validate import validate_file

ROOT = Path(__file__).resolve().parents[2]
VALUES: list[Any] = [None, 5, -3, "x", [], {}, [1], {"a": 1}, True, 1.5, "-1", [None], [{"key": None}], "1h", [[]]]


def _paths(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*path, i))
    return out


def _mutants(source: Path, *, seed: int, count: int) -> list[Any]:
    rng = random.Random(seed)
    base = yaml.safe_load(source.read_text())
    out = []
    for _ in range(count):
        doc = json.loads(json.dumps(base))
        for _ in range(rng.randint(1, 4)):
            path = rng.choice([p for p in _paths(doc) if p])
            target: Any = doc
            try:
                for key in path[:-1]:
                    target = target[key]
                if rng.random() < 0.2 and isinstance(target, dict):
                    del target[path[-1]]
                else:
                    target[path[-1]] = rng.choice(VALUES)
            except (KeyError, IndexError, TypeError):
                continue
        out.append(doc)
    return out


@pytest.mark.parametrize("source", ["clusters/demo.yaml", "examples/snapshot-minimal.yaml"])
def test_validate_never_crashes(tmp_path: Path, source: str) -> None:
    # Given 200 mutated copies of a valid file
    for i, doc in enumerate(_mutants(ROOT / source, seed=1, count=200)):
        path = tmp_path / f"m{i}.yaml"
        path.write_text(yaml.safe_dump(doc))
        # When validated, then it returns a report (an exception here fails the test)
        validate_file(path)


def test_plan_never_crashes(tmp_path: Path) -> None:
    for i, doc in enumerate(_mutants(ROOT / "examples" / "snapshot-minimal.yaml", seed=3, count=150)):
        path = tmp_path / f"s{i}.yaml"
        path.write_text(yaml.safe_dump(doc))
        with contextlib.suppress(ConfigError):  # a finding, named: what the CLI prints
            plan(load_snapshot(path))
