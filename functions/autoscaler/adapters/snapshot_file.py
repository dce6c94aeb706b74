"""Read a snapshot file (YAML or JSON) from disk for ``autoscaler plan``; the document itself is parsed
by the pure ``domain.snapshot``."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from autoscaler.domain.errors import ConfigError
from autoscaler.domain.plan import PlanInput
from autoscaler.domain.snapshot import parse_snapshot


def load_snapshot(path: str | Path) -> PlanInput:
    """Read a YAML or JSON snapshot file; ConfigError names the file and what is wrong."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"snapshot {p}: cannot read: {exc.strerror}") from exc
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"snapshot {p}: not valid {'JSON' if p.suffix == '.json' else 'YAML'}: {exc}") from exc
    return parse_snapshot(data)
