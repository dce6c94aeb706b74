"""Real EC2 catalog data for benchmarks and examples: moto's instance types and offerings (real
DescribeInstanceTypes / DescribeInstanceTypeOfferings output it ships) and the on-demand prices in
``../shared/data``. Spot prices are SYNTHESISED deterministically: on-demand times a fixed per-family
discount between 55% and 75% (hash of the family name), plus 1% per zone letter, so runs repeat.
"""

from __future__ import annotations

import gzip
import json
import zlib
from functools import cache
from pathlib import Path
from typing import Any

import moto

from simulator import local


def _moto_resource(*parts: str) -> Any:
    path = Path(moto.__file__).parent / "ec2" / "resources" / Path(*parts)
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


@cache
def instance_types() -> dict[str, dict[str, Any]]:
    data: dict[str, dict[str, Any]] = _moto_resource("instance_types.json.gz")
    return data


@cache
def offerings(region: str = "us-east-1") -> list[dict[str, str]]:
    data: list[dict[str, str]] = _moto_resource("instance_type_offerings", "availability-zone", f"{region}.json.gz")
    return data


@cache
def on_demand_prices(region: str = "us-east-1") -> dict[str, float]:
    return local.on_demand_prices(region)


def spot_price(name: str, zone: str, on_demand: float) -> float:
    family = name.split(".", 1)[0]
    discount = 0.55 + 0.20 * (zlib.crc32(family.encode()) % 1000) / 1000
    zone_factor = 1 + 0.01 * (ord(zone[-1]) - ord("a"))
    return round(on_demand * (1 - discount) * zone_factor, 5)


def catalog(region: str = "us-east-1", *, families: set[str] | None = None,
            zones: set[str] | None = None) -> dict[str, Any]:
    """The snapshot keys instanceTypes, offerings and prices for ``region`` (optionally a subset)."""
    od = on_demand_prices(region)
    offers = [o for o in offerings(region) if o["InstanceType"] in od
              and (zones is None or o["Location"] in zones)
              and (families is None or o["InstanceType"].split(".")[0] in families)]
    names = sorted({o["InstanceType"] for o in offers})
    types = [instance_types()[n] for n in names if n in instance_types()]
    spot: dict[str, dict[str, float]] = {}
    for o in offers:
        info = instance_types().get(o["InstanceType"], {})
        if "spot" in info.get("SupportedUsageClasses", ()):
            spot.setdefault(o["Location"], {})[o["InstanceType"]] = spot_price(o["InstanceType"], o["Location"],
                                                                               od[o["InstanceType"]])
    return {"instanceTypes": types, "offerings": offers,
            "prices": {"onDemand": {n: od[n] for n in names}, "spot": spot}}
