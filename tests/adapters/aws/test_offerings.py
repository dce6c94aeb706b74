"""Priced offerings on moto: a warm container's unchanged inputs give the very same Offering objects (the
planner then sees at once that its NodePool table holds); any change of catalogue, prices or unavailable
offerings gives offerings built again."""

from __future__ import annotations

from autoscaler.adapters.aws.cloud import AwsCloud
from autoscaler.domain.models import Offering


def _by_key(cloud: AwsCloud) -> dict[tuple[str, str, str], Offering]:
    return {(o.instance_type, o.zone, o.capacity_type): o for o in cloud.offerings()}


def test_unchanged_inputs_give_the_same_offerings(cloud: AwsCloud) -> None:
    # Given the offerings of one pass
    first = cloud.offerings()
    # When the next pass asks again with nothing changed
    second = cloud.offerings()
    # Then it gets a list of its own holding the same objects
    assert first and second is not first
    assert all(a is b for a, b in zip(first, second, strict=True))


def test_offerings_follow_unavailable_offerings_and_prices(cloud: AwsCloud) -> None:
    # Given a spot offering
    before = _by_key(cloud)
    key = next(k for k in before if k[2] == "spot")
    name, zone, _ = key
    assert before[key].available
    # When it fails with a capacity error
    cloud.mark_unavailable(name, zone, "spot")
    # Then the offerings say so
    assert _by_key(cloud)[key].available is False
    # And when its price changes, even by an update of the price table in place, the new price is offered
    cloud.prices.spot()[(name, zone)] = 9.99
    assert _by_key(cloud)[key].price == 9.99
