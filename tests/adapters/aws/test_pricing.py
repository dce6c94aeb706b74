"""Prices: on-demand from pricing:GetProducts (stubbed with botocore's Stubber, fed from the shared price
data), spot from moto's DescribeSpotPriceHistory; caching and the stale-prices fallback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from autoscaler.adapters.aws.pricing import PriceBook, parse_price_list_item
from autoscaler.adapters.clock import ManualClock
from simulator.local import on_demand_prices
from tests.adapters.aws.helpers import REGION, price_list_item

PAGE = 100
FILTERS = [
    {"Type": "TERM_MATCH", "Field": "regionCode", "Value": REGION},
    {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
    {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
    {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
    {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
    {"Type": "TERM_MATCH", "Field": "licenseModel", "Value": "No License required"},
]


@pytest.fixture
def pricing() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
    with Stubber(client) as stub:
        yield client, stub


def _queue_price_list(stub: Stubber, prices: dict[str, float]) -> int:
    """Queue GetProducts pages holding ``prices``, as the real API pages them; returns the page count."""
    items = [price_list_item(name, usd) for name, usd in sorted(prices.items())]
    pages = [items[i:i + PAGE] for i in range(0, len(items), PAGE)]
    for n, page in enumerate(pages):
        expected: dict[str, Any] = {"ServiceCode": "AmazonEC2", "Filters": FILTERS, "FormatVersion": "aws_v1"}
        if n:
            expected["NextToken"] = f"page-{n}"
        response: dict[str, Any] = {"FormatVersion": "aws_v1", "PriceList": page}
        if n + 1 < len(pages):
            response["NextToken"] = f"page-{n + 1}"
        stub.add_response("get_products", response, expected)
    return len(pages)


def test_on_demand_prices_from_the_price_list_and_cached_12h(ec2: Any, pricing: tuple[Any, Stubber]) -> None:
    client, stub = pricing
    shared = on_demand_prices()
    pages = _queue_price_list(stub, shared)
    clock = ManualClock()
    book = PriceBook(pricing=client, ec2=ec2, region=REGION, clock=clock)

    prices = book.on_demand()
    assert prices == shared
    assert prices["m5.large"] == pytest.approx(0.096)
    assert book.calls["get_products"] == pages and not book.stale
    stub.assert_no_pending_responses()

    clock.advance(11 * 3600)
    assert book.on_demand() is prices  # cached: no request queued, none made
    assert book.calls["get_products"] == pages


def test_pricing_failure_keeps_last_known_prices_and_flags_stale(ec2: Any, pricing: tuple[Any, Stubber]) -> None:
    client, stub = pricing
    _queue_price_list(stub, {"m5.large": 0.096, "c5.large": 0.085})
    clock = ManualClock()
    # Without the bundled table, so the API's own answers are what is seen (tests/adapters/aws/test_issue33_*)
    book = PriceBook(pricing=client, ec2=ec2, region=REGION, clock=clock, fallback=None)
    assert book.on_demand() == {"m5.large": 0.096, "c5.large": 0.085}

    clock.advance(12 * 3600)
    stub.add_client_error("get_products", service_error_code="ThrottlingException", http_status_code=400)
    assert book.on_demand() == {"m5.large": 0.096, "c5.large": 0.085}
    assert book.stale and book.on_demand_stale

    # A stale price list is retried on the spot cadence (5 min), not after another 12 h.
    clock.advance(301)
    _queue_price_list(stub, {"m5.large": 0.1})
    assert book.on_demand() == {"m5.large": 0.1}
    assert not book.stale


def test_first_pricing_failure_is_empty_and_stale_not_a_crash(ec2: Any, pricing: tuple[Any, Stubber]) -> None:
    client, stub = pricing
    stub.add_client_error("get_products", service_error_code="AccessDeniedException", http_status_code=403)
    book = PriceBook(pricing=client, ec2=ec2, region=REGION, clock=ManualClock(), fallback=None)
    assert book.on_demand() == {}
    assert book.stale


def test_spot_prices_latest_per_type_and_zone(ec2: Any, pricing: tuple[Any, Stubber]) -> None:
    client, _ = pricing
    clock = ManualClock()
    book = PriceBook(pricing=client, ec2=ec2, region=REGION, clock=clock)
    spot = book.spot(["m5.large", "c5.large"])
    assert {t for t, _ in spot} == {"m5.large", "c5.large"}
    assert {z for _, z in spot} >= {"us-east-1a", "us-east-1b"}
    assert all(p > 0 for p in spot.values())
    calls = book.calls["describe_spot_price_history"]
    clock.advance(299)
    book.spot()
    assert book.calls["describe_spot_price_history"] == calls
    clock.advance(2)
    book.spot()
    assert book.calls["describe_spot_price_history"] > calls


def test_spot_takes_the_latest_record(pricing: tuple[Any, Stubber]) -> None:
    """Two records for one type and zone: the newer wins (EC2 may return the previous price too)."""
    client, _ = pricing
    ec2 = boto3.client("ec2", region_name=REGION, aws_access_key_id="t", aws_secret_access_key="t")
    with Stubber(ec2) as stub:
        stub.add_response("describe_spot_price_history", {"SpotPriceHistory": [
            {"InstanceType": "m5.large", "AvailabilityZone": "us-east-1a", "SpotPrice": "0.040",
             "Timestamp": "2024-05-01T10:00:00Z", "ProductDescription": "Linux/UNIX"},
            {"InstanceType": "m5.large", "AvailabilityZone": "us-east-1a", "SpotPrice": "0.035",
             "Timestamp": "2024-05-01T12:00:00Z", "ProductDescription": "Linux/UNIX"},
        ]})
        book = PriceBook(pricing=client, ec2=ec2, region=REGION, clock=ManualClock())
        assert book.spot() == {("m5.large", "us-east-1a"): 0.035}


@pytest.mark.parametrize(
    ("item", "want"),
    [
        (price_list_item("m5.large", 0.096), ("m5.large", 0.096)),
        (price_list_item("m5.large", 0.0), None),  # $0 placeholder rows (e.g. reservations) are skipped
        ('{"product": {"attributes": {}}, "terms": {}}', None),
    ],
)
def test_parse_price_list_item(item: str, want: tuple[str, float] | None) -> None:
    assert parse_price_list_item(item) == want
