"""Hourly prices: on-demand from the AWS Price List (pricing:GetProducts) and spot from
DescribeSpotPriceHistory. Failures never crash a launch: the last known prices are kept and
``stale`` says so (the handler turns it into a metric)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from autoscaler.adapters.aws._calls import Caller
from autoscaler.app.ports import Clock, CloudError

log = logging.getLogger(__name__)

# The Price List filters for a plain Linux node: shared tenancy, no pre-installed software (SQL etc.),
# and "Used" capacity (not reservations or capacity blocks).
_PRICE_FILTERS = {
    "operatingSystem": "Linux",
    "tenancy": "Shared",
    "preInstalledSw": "NA",
    "capacitystatus": "Used",
    "licenseModel": "No License required",
}
_SPOT_PRODUCTS = ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"]


def parse_price_list_item(item: str | dict[str, Any]) -> tuple[str, float] | None:
    """(instance type, USD per hour) from one GetProducts PriceList entry (a JSON string), or None
    when it has no usable hourly on-demand price."""
    doc = json.loads(item) if isinstance(item, str) else item
    name = ((doc.get("product") or {}).get("attributes") or {}).get("instanceType")
    if not name:
        return None
    for term in ((doc.get("terms") or {}).get("OnDemand") or {}).values():
        for dim in (term.get("priceDimensions") or {}).values():
            usd = (dim.get("pricePerUnit") or {}).get("USD")
            if usd is None:
                continue
            price = float(usd)
            if price > 0:
                return str(name), price
    return None


class PriceBook:
    """On-demand prices (cached ``on_demand_ttl``, default 12 h) and spot prices per type and zone
    (cached ``spot_ttl``, default 5 min) for one region."""

    def __init__(
        self, *, pricing: Any, ec2: Any, region: str, clock: Clock,
        on_demand_ttl: float = 12 * 3600.0, spot_ttl: float = 300.0,
    ) -> None:
        self._pricing = Caller(pricing)
        self._ec2 = Caller(ec2)
        self._region = region
        self._clock = clock
        self._od_ttl = on_demand_ttl
        self._spot_ttl = spot_ttl
        self._od: dict[str, float] = {}
        self._od_at: float | None = None
        self._spot: dict[tuple[str, str], float] = {}
        self._spot_at: float | None = None
        self.on_demand_stale = False
        self.spot_stale = False

    @property
    def stale(self) -> bool:
        return self.on_demand_stale or self.spot_stale

    @property
    def calls(self) -> dict[str, int]:
        return dict(self._pricing.calls + self._ec2.calls)

    def _expired(self, at: float | None, ttl: float) -> bool:
        return at is None or self._clock.monotonic() - at >= ttl

    def on_demand(self) -> dict[str, float]:
        """Instance type -> on-demand USD/hour in the region."""
        if self._expired(self._od_at, self._od_ttl):
            try:
                self._od = self._fetch_on_demand()
                self.on_demand_stale = False
            except (CloudError, ValueError) as exc:
                log.warning("on-demand prices unavailable, keeping %d last known: %s", len(self._od), exc)
                self.on_demand_stale = True
            # Retry a failed refresh on the spot cadence rather than hammering or waiting 12 h.
            self._od_at = self._clock.monotonic() - (self._od_ttl - self._spot_ttl if self.on_demand_stale else 0)
        return self._od

    def _fetch_on_demand(self) -> dict[str, float]:
        filters = [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": self._region}]
        filters += [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in _PRICE_FILTERS.items()]
        prices: dict[str, float] = {}
        for page in self._pricing.pages("get_products", ServiceCode="AmazonEC2", Filters=filters,
                                        FormatVersion="aws_v1"):
            for item in page.get("PriceList", ()):
                parsed = parse_price_list_item(item)
                if parsed is not None:
                    prices[parsed[0]] = parsed[1]
        if not prices:
            raise ValueError(f"pricing:GetProducts returned no Linux on-demand prices for {self._region}")
        return prices

    def spot(self, instance_types: Iterable[str] | None = None) -> dict[tuple[str, str], float]:
        """(instance type, zone) -> latest spot USD/hour. ``instance_types`` narrows the first fetch."""
        if self._expired(self._spot_at, self._spot_ttl):
            try:
                self._spot = self._fetch_spot(sorted(instance_types) if instance_types else None)
                self.spot_stale = False
            except CloudError as exc:
                log.warning("spot prices unavailable, keeping %d last known: %s", len(self._spot), exc)
                self.spot_stale = True
            self._spot_at = self._clock.monotonic()
        return self._spot

    def _fetch_spot(self, instance_types: list[str] | None) -> dict[tuple[str, str], float]:
        params: dict[str, Any] = {
            "ProductDescriptions": _SPOT_PRODUCTS,
            # StartTime = now asks for the price in effect now, one record per type and zone.
            "StartTime": datetime.fromtimestamp(self._clock.now(), tz=UTC),
        }
        if instance_types:
            params["InstanceTypes"] = instance_types
        latest: dict[tuple[str, str], tuple[datetime | str, float]] = {}
        for page in self._ec2.pages("describe_spot_price_history", **params):
            for rec in page.get("SpotPriceHistory", ()):
                key = (str(rec["InstanceType"]), str(rec["AvailabilityZone"]))
                stamp = rec.get("Timestamp") or ""
                if key not in latest or str(stamp) > str(latest[key][0]):
                    latest[key] = (stamp, float(rec["SpotPrice"]))
        return {k: v[1] for k, v in latest.items()}
