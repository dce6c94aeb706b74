"""Sample events checked in from the AWS documentation, loaded by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


def load_event(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HERE / f"{name}.json").read_text())
    return data


def event_names() -> list[str]:
    return sorted(p.stem for p in HERE.glob("*.json"))
