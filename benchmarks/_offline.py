"""Shared set-up for the benchmarks that run the real handlers: fake credentials, no endpoint override,
no warnings, and stdout kept for the one JSON result."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator


def offline_aws_env() -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ[key] = "testing"
    os.environ.pop("AWS_ENDPOINT_URL", None)
    warnings.simplefilter("ignore")


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send everything written to stdout meanwhile to stderr, at the file-descriptor level: the handlers'
    log lines and EMF metrics go to stdout as on Lambda (through handlers bound to it at import), and a
    benchmark's stdout must carry its JSON result only."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
