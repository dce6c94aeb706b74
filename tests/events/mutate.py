"""Deterministic mutations of the sample events, for the interruption parser's fuzz tests and the fuzz
benchmark: fields removed, values of the wrong type, odd times, truncated or deeply nested JSON."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from typing import Any

from tests.events import event_names, load_event

_ODD_VALUES: tuple[Any, ...] = (
    None, 0, -1, 1e308, 10**400, "", "x", "i-", [], {}, [1, 2], {"a": 1}, True, "0000-00-00T00:00:00Z",
    "9999-12-31T23:59:59+14:00", "-999999999-01-01", "Mon, 99 Foo 2023 99:99:99 GMT", "2024-02-30T00:00:00Z",
    "\u0000", "i-" + "0" * 5000, [{"entityValue": None}], [{"entityValue": 5}], "NaN",
)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


def _set(obj: Any, path: tuple[Any, ...], value: Any, *, delete: bool = False) -> None:
    for p in path[:-1]:
        obj = obj[p]
    if delete:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value


def mutate(event: dict[str, Any], rng: random.Random) -> str:
    """One mutated message body (a string, as SQS delivers it)."""
    ev = copy.deepcopy(event)
    choice = rng.random()
    if choice < 0.05:
        depth = rng.choice((500, 5000, 100_000))
        return "[" * depth + "]" * depth if rng.random() < 0.5 else '{"a":' * depth + "1" + "}" * depth
    if choice < 0.10:
        text = json.dumps(ev)
        return text[: rng.randrange(len(text))]
    for _ in range(rng.randint(1, 4)):
        paths = _paths(ev)
        if not paths:
            break
        path = rng.choice(paths)
        try:
            if rng.random() < 0.4:
                _set(ev, path, None, delete=True)
            else:
                _set(ev, path, rng.choice(_ODD_VALUES))
        except (KeyError, IndexError, TypeError):
            continue
    if rng.random() < 0.05:
        return json.dumps([ev])
    return json.dumps(ev)


def mutated_events(count: int, *, seed: int = 18) -> Iterator[str]:
    """``count`` mutated bodies, round-robin over every sample event, reproducible from ``seed``."""
    rng = random.Random(seed)
    samples = [load_event(n) for n in event_names()]
    for i in range(count):
        yield mutate(samples[i % len(samples)], rng)
