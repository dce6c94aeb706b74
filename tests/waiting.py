"""One way for a test to wait on something asynchronous (the real control plane's controllers and scheduler,
a provisioner pass): poll a condition until it holds, bounded by a generous timeout. A busy machine makes the
wait longer, never the test wrong: nothing here asserts a duration."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(check: Callable[[], Any], *, timeout: float = 90.0, what: str = "condition",
             step: Callable[[], None] | None = None, interval: float = 0.1) -> Any:
    """Call ``step`` (if given, e.g. a provisioner pass) then ``check`` until ``check`` returns something truthy,
    and return that; raise AssertionError naming ``what`` once ``timeout`` seconds have passed."""
    end = time.monotonic() + timeout
    while True:
        if step is not None:
            step()
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)
