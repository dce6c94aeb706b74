"""Hourly prices: on-demand from the AWS Price List (pricing:GetProducts) and spot from
DescribeSpotPriceHistory. Failures never crash a launch: the last known prices are kept and
``stale`` says so (the handler turns it into a metric).

On-demand prices the API does not give (no ``pricing:GetProducts`` permission, an outage before any
answer, a type missing from its answer) come from the table bundled with the functions
(``data/on-demand-prices.json``, dated; ``scripts/price_table.py`` makes it), as Karpenter ships one:
without it an on-demand NodePool would launch nothing. Each use is logged with the table's date."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
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
BUNDLED_PRICE_TABLE = Path(__file__).with_name("data") / "on-demand-prices.json"
# A region the table lacks is priced from this one: absolute prices differ by region, the order between
# types (what the planner compares) hardly does.
_TABLE_DEFAULT_REGION = "us-east-1"


@dataclass(frozen=True)
class PriceTable:
    """The bundled on-demand prices of one region and the date they were taken."""

    date: str
    region: str  # the table's region these prices are from (may differ from the one asked for)
    prices: dict[str, float] = field(default_factory=dict)


@cache
def _table() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(BUNDLED_PRICE_TABLE.read_text(encoding="utf-8"))
    return data


def bundled_on_demand_prices(region: str) -> PriceTable:
    """The bundled table's prices for ``region`` (else us-east-1's), or an empty table if none is shipped."""
    try:
        data = _table()
    except (OSError, ValueError) as exc:
        log.warning("no bundled on-demand price table (%s): types the Price List does not price are skipped", exc)
        return PriceTable(date="", region=region)
    regions = data.get("regions") or {}
    chosen = region if region in regions else _TABLE_DEFAULT_REGION
    return PriceTable(date=str(data.get("date", "")), region=chosen,
                      prices={k: float(v) for k, v in (regions.get(chosen) or {}).items()})


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
        fallback: PriceTable | bool | None = True,
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
        # True: the bundled table for the region; None/False: no fallback (the table's generator).
        self._fallback = bundled_on_demand_prices(region) if fallback is True else (fallback or None)

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
                self._od = self._with_table(self.fetch_on_demand())
                self.on_demand_stale = False
            except (CloudError, ValueError) as exc:
                if self._od:
                    log.warning("on-demand prices unavailable, keeping %d last known: %s", len(self._od), exc)
                else:
                    self._od = self._with_table({}, why=str(exc))
                self.on_demand_stale = True
            # Retry a failed refresh on the spot cadence rather than hammering or waiting 12 h.
            self._od_at = self._clock.monotonic() - (self._od_ttl - self._spot_ttl if self.on_demand_stale else 0)
        return self._od

    def _with_table(self, prices: dict[str, float], *, why: str = "") -> dict[str, float]:
        """``prices`` completed from the bundled table (the API's answer wins where both have a type)."""
        table = self._fallback
        if table is None or not table.prices:
            return prices
        missing = {k: v for k, v in table.prices.items() if k not in prices}
        if not missing:
            return prices
        where = table.region if table.region == self._region else f"{table.region}, standing in for {self._region}"
        if not prices:
            log.warning("on-demand prices from the bundled on-demand price table of %s (%s; %d types): the Price "
                        "List API has no answer: %s", table.date, where, len(missing), why)
        else:
            log.info("%d instance types the Price List API did not price are priced from the bundled on-demand "
                     "price table of %s (%s), e.g. %s", len(missing), table.date, where, ", ".join(sorted(missing)[:5]))
        return {**missing, **prices}

    def fetch_on_demand(self) -> dict[str, float]:
        """Every Linux on-demand price of the region from the Price List API (raises on no answer)."""
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
