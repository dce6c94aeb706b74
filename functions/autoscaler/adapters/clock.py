"""Clocks (the ``Clock`` port): the real one for Lambda, and a settable one for tests and the simulation."""

from __future__ import annotations

import time
from dataclasses import dataclass


class SystemClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


@dataclass
class ManualClock:
    """A clock that only moves when told to: ``advance(seconds)``."""

    current: float = 1_700_000_000.0
    mono: float = 0.0

    def now(self) -> float:
        return self.current

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.current += seconds
        self.mono += seconds

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))
