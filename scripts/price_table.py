"""Generate the on-demand price table bundled with the functions
(``functions/autoscaler/adapters/aws/data/on-demand-prices.json``): the fallback when the Price List API
has no answer (no ``pricing:GetProducts`` permission, an outage, a type it lacks), as Karpenter ships one.

Without arguments it is built from the price data the tests and the simulator use
(``simulator/data/ec2-on-demand-prices.json``), keeping that data's date. ``--from-api REGION ...`` asks
the Price List API instead (AWS credentials needed; ``make prices`` does this when they exist) and dates
the table today. Run as ``PYTHONPATH=functions:. python scripts/price_table.py``. Prints one JSON line:
what was written.
"""

from __future__ import annotations

import argparse
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3

from autoscaler.adapters.aws.pricing import PriceBook
from autoscaler.adapters.clock import SystemClock

ROOT = Path(__file__).resolve().parents[1]

SHARED = ROOT / "simulator" / "data" / "ec2-on-demand-prices.json"
OUTPUT = ROOT / "functions" / "autoscaler" / "adapters" / "aws" / "data" / "on-demand-prices.json"


def from_shared(path: Path = SHARED) -> dict[str, Any]:
    data = json.loads(path.read_text())
    date = re.search(r"\d{4}-\d{2}-\d{2}", str(data.get("source", "")))
    if date is None:
        raise SystemExit(f"{path}: 'source' names no date (YYYY-MM-DD) to date the table with")
    return {"date": date[0], "source": "simulator/data/ec2-on-demand-prices.json (the EC2 price list)",
            "regions": {r: dict(sorted(p.items())) for r, p in sorted(data["regions"].items())}}


def from_api(regions: list[str]) -> dict[str, Any]:
    client = boto3.client("pricing", region_name="us-east-1")  # the Price List API's own endpoint
    out: dict[str, dict[str, float]] = {}
    for region in regions:
        book = PriceBook(pricing=client, ec2=None, region=region, clock=SystemClock(), fallback=None)
        out[region] = dict(sorted(book.fetch_on_demand().items()))
    return {"date": datetime.now(UTC).strftime("%Y-%m-%d"), "source": "pricing:GetProducts (AmazonEC2)",
            "regions": out}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from-api", nargs="+", metavar="REGION", help="ask the Price List API for these regions")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    table = from_api(args.from_api) if args.from_api else from_shared()
    args.output.write_text(json.dumps(table, indent=0, sort_keys=True) + "\n")
    print(json.dumps({"output": str(args.output), "date": table["date"], "source": table["source"],
                      "regions": {r: len(p) for r, p in table["regions"].items()}}))


if __name__ == "__main__":
    main()
