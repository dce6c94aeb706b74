"""Shared set-up for the benchmarks that run the real handlers on moto in-process: fake credentials,
no endpoint override, and no warnings on stdout (which carries only the JSON result)."""

from __future__ import annotations

import os
import warnings


def offline_aws_env() -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ[key] = "testing"
    os.environ.pop("AWS_ENDPOINT_URL", None)
    warnings.simplefilter("ignore")
