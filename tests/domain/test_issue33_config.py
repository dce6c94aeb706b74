"""Issue 33: configurations a new user writes that were accepted silently (items 4, 13, 22)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from autoscaler.config import ProvisionerConfig


@pytest.mark.parametrize("value", ["30s", "59s", "0s"])
def test_item13_registration_timeout_under_the_claim_settle_window_is_refused(value: str) -> None:
    # Given a registrationTimeout shorter than the 60 s a launch's claim settles for
    # Then the file is refused, naming the minimum (a shorter timeout would terminate an instance its
    # claim still counts as in-flight capacity, and the next pass would launch it again)
    with pytest.raises(ValidationError, match=re.escape("must be at least 60s")):
        ProvisionerConfig.model_validate({"registrationTimeout": value})


@pytest.mark.parametrize("value", ["60s", "1m", "15m"])
def test_item13_registration_timeout_of_a_minute_or_more_is_accepted(value: str) -> None:
    given: dict[str, Any] = {"registrationTimeout": value}
    assert ProvisionerConfig.model_validate(given).registration_timeout == value
