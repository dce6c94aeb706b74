"""Read a snapshot file (YAML or JSON) from disk for ``autoscaler plan``; the document itself is parsed
by the pure ``domain.snapshot``. Every error names the file. Large YAML goes through libyaml's C loader,
so a 20 MB YAML snapshot loads in seconds like the same data as JSON (benchmarks/snapshot_load.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from autoscaler.domain.errors import ConfigError
from autoscaler.domain.plan import PlanInput
from autoscaler.domain.snapshot import parse_snapshot
from autoscaler.source_file import MAX_SNAPSHOT_BYTES, load_fast, read_text


def read_snapshot_data(path: str | Path) -> Any:
    """The parsed document of a snapshot file; ConfigError names the file when it cannot be read."""
    text, problems = read_text(path, max_bytes=MAX_SNAPSHOT_BYTES)
    if text is None:
        raise ConfigError.from_problems(problems, source=str(path))
    try:
        return load_fast(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"{where}: not valid YAML or JSON: {getattr(exc, 'problem', None) or exc}") from exc


def load_snapshot(path: str | Path) -> PlanInput:
    """Read a YAML or JSON snapshot file; ConfigError names the file and every problem in it."""
    data = read_snapshot_data(path)
    try:
        return parse_snapshot(data)
    except ConfigError as exc:
        lines = [f"{path}: {line}" for line in str(exc).splitlines()]
        raise ConfigError("\n".join(lines), source=str(path), problems=exc.problems) from exc
