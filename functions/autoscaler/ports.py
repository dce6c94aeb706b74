"""Protocols the domain needs from the outside world. Adapters in ``aws/`` and ``kube/`` implement
them; tests use the real adapters against moto and the Kubernetes API emulator.

Each method's docstring states its contract. Later issues add the cloud and cluster ports here.
"""

from __future__ import annotations

from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (wall clock), as time.time() returns."""
        ...

    def monotonic(self) -> float:
        """A monotonic reading for measuring intervals and deadlines."""
        ...
