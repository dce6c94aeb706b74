"""Disruption's node prices from one pass over the offerings (domain/disruption/model.node_prices) are
exactly ``node_price`` of each node: the cheapest offering of its instance type and capacity type in its
zone (any zone when it has no zone label), None when nothing matches."""

from __future__ import annotations

import pytest

from autoscaler.domain.disruption.model import node_price, node_prices
from autoscaler.domain.models import Node, Offering

OFFERINGS = [
    Offering(instance_type="m5.large", zone="us-east-1a", capacity_type="on-demand", price=0.096),
    Offering(instance_type="m5.large", zone="us-east-1a", capacity_type="spot", price=0.04),
    Offering(instance_type="m5.large", zone="us-east-1b", capacity_type="spot", price=0.03),
    Offering(instance_type="m5.large", zone="us-east-1b", capacity_type="spot", price=0.035),
    Offering(instance_type="c5.xlarge", zone="us-east-1c", capacity_type="on-demand", price=0.17),
]


def _node(name: str, **labels: str) -> Node:
    return Node(name=name, labels=labels)


# (node labels, price)
CASES: list[tuple[dict[str, str], float | None]] = [
    ({"node.kubernetes.io/instance-type": "m5.large", "karpenter.sh/capacity-type": "spot",
      "topology.kubernetes.io/zone": "us-east-1a"}, 0.04),
    ({"node.kubernetes.io/instance-type": "m5.large", "karpenter.sh/capacity-type": "spot",
      "topology.kubernetes.io/zone": "us-east-1b"}, 0.03),  # the cheaper of two offerings in the zone
    ({"node.kubernetes.io/instance-type": "m5.large", "karpenter.sh/capacity-type": "spot"}, 0.03),  # no zone
    ({"node.kubernetes.io/instance-type": "m5.large", "topology.kubernetes.io/zone": "us-east-1a"}, 0.096),
    ({"node.kubernetes.io/instance-type": "m5.large", "karpenter.sh/capacity-type": "spot",
      "topology.kubernetes.io/zone": "us-east-1c"}, None),  # not offered there
    ({"node.kubernetes.io/instance-type": "r5.large"}, None),
    ({}, None),  # no instance type label
]


@pytest.mark.parametrize(("labels", "price"), CASES)
def test_node_prices_are_each_nodes_node_price(labels: dict[str, str], price: float | None) -> None:
    # Given a node with these labels / When its price is read from the index
    node = _node("n", **labels)
    # Then it is node_price's answer, and the expected one
    assert node_prices([node], OFFERINGS) == {"n": node_price(node, OFFERINGS)} == {"n": price}
