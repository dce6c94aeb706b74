"""Issue 33 item 8: a bundled on-demand price table, with its date, used (and logged) when the Price List
API has no answer: no permission, an outage, or a type it lacks."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from autoscaler.adapters.aws.pricing import BUNDLED_PRICE_TABLE, PriceBook, bundled_on_demand_prices
from autoscaler.adapters.clock import ManualClock
from simulator.local import on_demand_prices
from tests.adapters.aws.helpers import REGION, price_list_item

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def pricing() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
    with Stubber(client) as stub:
        yield client, stub


def test_item8_without_pricing_permission_the_bundled_table_prices_on_demand(
        ec2: Any, pricing: tuple[Any, Stubber], caplog: pytest.LogCaptureFixture) -> None:
    # Given a role without pricing:GetProducts
    client, stub = pricing
    stub.add_client_error("get_products", service_error_code="AccessDeniedException", http_status_code=400)
    book = PriceBook(pricing=client, ec2=ec2, region=REGION, clock=ManualClock())
    # When the offerings are priced
    with caplog.at_level(logging.WARNING, logger="autoscaler.adapters.aws.pricing"):
        prices = book.on_demand()
    # Then every type has its bundled price, and the log says the table and its date were used
    table = bundled_on_demand_prices(REGION)
    assert prices["m5.large"] == pytest.approx(0.096) and len(prices) == len(table.prices) > 1000
    assert any("bundled on-demand price table" in r.getMessage() and table.date in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_item8_a_type_the_price_list_lacks_is_priced_from_the_table(
        ec2: Any, pricing: tuple[Any, Stubber], caplog: pytest.LogCaptureFixture) -> None:
    client, stub = pricing
    stub.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": [price_list_item("m5.large", 0.1)]})
    book = PriceBook(pricing=client, ec2=ec2, region=REGION, clock=ManualClock())
    with caplog.at_level(logging.INFO, logger="autoscaler.adapters.aws.pricing"):
        prices = book.on_demand()
    assert prices["m5.large"] == pytest.approx(0.1)  # the API's answer wins
    assert prices["c5.large"] == pytest.approx(0.085)  # the table fills what it lacks
    assert any("from the bundled on-demand price table" in r.getMessage() for r in caplog.records)


def test_item8_the_table_is_generated_by_the_script_from_the_shared_price_data(tmp_path: Path) -> None:
    out = tmp_path / "table.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "price_table.py"), "--output", str(out)], check=True,
                   cwd=ROOT, env={**os.environ, "PYTHONPATH": f"{ROOT / 'functions'}:{ROOT}"})
    generated = json.loads(out.read_text())
    shipped = json.loads(BUNDLED_PRICE_TABLE.read_text())
    assert generated == shipped  # the shipped table is what the script makes
    assert generated["regions"][REGION] == on_demand_prices(REGION)
    assert generated["date"] == "2026-07-20"
