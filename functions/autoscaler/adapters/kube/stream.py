"""Helpers for reading the Kubernetes API's large answers: a pause of the cyclic GC while a list is
parsed, and the newline-delimited JSON events of a watch stream."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def gc_paused() -> Iterator[None]:
    """Parsing a large list allocates millions of objects that all stay alive, so every cyclic-GC
    pass is wasted work (measured: 5.6 s -> 2.3 s for 50,000 pods). Pause it for the list only."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def watch_events(raw: Any) -> Iterator[dict[str, Any]]:
    """Newline-delimited JSON events from a streaming urllib3 response."""
    buf = b""
    for chunk in raw.stream(65536, decode_content=True):
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                yield json.loads(line)
    if buf.strip():
        yield json.loads(buf)
