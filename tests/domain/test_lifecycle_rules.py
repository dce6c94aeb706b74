"""The pure lifecycle rules: which NodePool / EC2NodeClass fields drift a node (Karpenter's hash fields),
each drift check, the repair policies and the 20 % safeguard, and a static pool's count."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.domain.disruption.drift import drifted
from autoscaler.domain.disruption.repair import repair_due, unhealthy_pools
from autoscaler.domain.fleet import CloudInstance, ResolvedNodeClass
from autoscaler.domain.keys import NODECLASS_HASH_TAG, NODEPOOL_HASH_TAG
from autoscaler.domain.models import Node, NodeCondition
from autoscaler.domain.node_state import Owner, read_state
from autoscaler.domain.nodepool import parse_node_pool
from autoscaler.domain.plan import InFlightNode, PlanInput
from autoscaler.domain.spec_hash import node_class_hash, node_pool_hash
from autoscaler.domain.static_pools import count, static_launches
from tests.adapters.aws.helpers import node_class
from tests.domain.scheduling_world import NODE_CLASS, TYPES, offerings


def v1_pool(**template: Any) -> Any:
    meta = template.pop("metadata", {})
    spec = {"nodeClassRef": {"name": "default"}, **template}
    return parse_node_pool({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
                            "spec": {"template": {"metadata": meta, "spec": spec}}})


BASE = v1_pool()


@pytest.mark.parametrize(("changed", "drifts"), [
    (v1_pool(metadata={"labels": {"team": "a"}}), True),
    (v1_pool(metadata={"annotations": {"note": "x"}}), True),
    (v1_pool(taints=[{"key": "k", "effect": "NoSchedule"}]), True),
    (v1_pool(startupTaints=[{"key": "k", "effect": "NoSchedule"}]), True),
    (v1_pool(expireAfter="24h"), True),
    (v1_pool(terminationGracePeriod="1h"), True),
    (v1_pool(nodeClassRef={"name": "other"}), True),
    # requirements are not hashed: a node drifts by them only when its labels stop satisfying them
    (v1_pool(requirements=[{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]}]), False),
])
def test_which_nodepool_fields_change_its_hash(changed: Any, drifts: bool) -> None:
    # GIVEN a NodePool and a changed copy WHEN hashed THEN the hash changes exactly for template fields
    assert (node_pool_hash(changed) != node_pool_hash(BASE)) is drifts


@pytest.mark.parametrize(("spec", "drifts"), [
    ({"tags": {"cost-center": "1"}}, True),
    ({"userData": "echo hi"}, True),
    ({"detailedMonitoring": True}, True),
    ({"kubelet": {"maxPods": 20}}, True),
    ({"blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Gi"}}]}, True),
    # selector terms are not hashed: what they resolve to is compared instead
    ({"subnetSelectorTerms": [{"id": "subnet-1"}]}, False),
    ({"securityGroupSelectorTerms": [{"id": "sg-1"}]}, False),
    ({"amiSelectorTerms": [{"alias": "al2023@v20240807"}]}, False),
])
def test_which_ec2nodeclass_fields_change_its_hash(spec: dict[str, Any], drifts: bool) -> None:
    assert (node_class_hash(node_class(**spec)) != node_class_hash(node_class())) is drifts


def instance(**raw: Any) -> CloudInstance:
    tags = raw.pop("tags", {NODEPOOL_HASH_TAG: node_pool_hash(BASE), NODECLASS_HASH_TAG: node_class_hash(node_class())})
    base = {"ImageId": "ami-1", "SubnetId": "subnet-1", "SecurityGroups": [{"GroupId": "sg-1"}], **raw}
    return CloudInstance("i-1", "m5.large", "us-east-1a", "running", "on-demand", 0.0, tags, raw=base)


RESOLVED = ResolvedNodeClass(amis=frozenset({"ami-1", "ami-arm"}), subnets=frozenset({"subnet-1", "subnet-2"}),
                             security_groups=frozenset({"sg-1"}))
NODE = Node("n1", labels={"karpenter.sh/nodepool": "default", "karpenter.sh/capacity-type": "on-demand"})


@pytest.mark.parametrize(("inst", "resolved", "node", "why"), [
    (instance(), RESOLVED, NODE, None),
    (instance(tags={NODEPOOL_HASH_TAG: "1"}), RESOLVED, NODE, "nodepool-hash"),
    (instance(tags={NODECLASS_HASH_TAG: "1"}), RESOLVED, NODE, "ec2nodeclass-hash"),
    (instance(tags={}), RESOLVED, NODE, None),  # launched before hashes were written
    (instance(ImageId="ami-old"), RESOLVED, NODE, "AMI ami-old"),
    (instance(SubnetId="subnet-9"), RESOLVED, NODE, "subnet subnet-9"),
    (instance(SecurityGroups=[{"GroupId": "sg-1"}, {"GroupId": "sg-2"}]), RESOLVED, NODE, "security groups"),
    (instance(SecurityGroups=[]), RESOLVED, NODE, None),  # not reported: not judged
    (instance(ImageId="ami-old"), None, NODE, None),  # node class not resolved this pass
    (instance(), RESOLVED, Node("n1", labels={"karpenter.sh/capacity-type": "spot"}), "karpenter.sh/capacity-type"),
])
def test_drift_checks(inst: CloudInstance, resolved: ResolvedNodeClass | None, node: Node, why: str | None) -> None:
    # GIVEN a node, its instance and what the node class selects now WHEN judged THEN drift names the cause
    found = drifted(node, BASE, node_class=node_class(), instance=inst, resolved=resolved)
    assert (found is None) if why is None else (found is not None and why in found)


NOW = 10_000.0


def sick(name: str, kind: str = "Ready", status: str = "False", minutes: float = 31, pool: str = "p") -> Node:
    conds = (NodeCondition(kind, status, NOW - minutes * 60),)
    return Node(name, labels={"karpenter.sh/nodepool": pool}, conditions=conds)


def test_repair_due_follows_the_tolerations() -> None:
    assert repair_due(sick("a"), now=NOW) is not None
    assert repair_due(sick("a", minutes=29), now=NOW) is None
    assert repair_due(sick("a", "AcceleratedHardwareReady", minutes=11), now=NOW) is not None
    assert repair_due(sick("a", "KernelReady", "Unknown", minutes=60), now=NOW) is None  # only False counts
    assert repair_due(sick("a", "Ready", "True", minutes=600), now=NOW) is None


def test_the_safeguard_counts_any_matching_condition_per_pool() -> None:
    healthy = [Node(f"h{i}", labels={"karpenter.sh/nodepool": "p"}) for i in range(3)]
    # two of five unhealthy (one only recently): more than 20 %, repair paused for p only
    nodes = [*healthy, sick("a"), sick("b", minutes=1), sick("c", pool="q")]
    assert set(unhealthy_pools(nodes)) == {"p"}


def test_a_repair_record_belongs_to_the_disruption_function() -> None:
    state = read_state({"autoscaler.eks.aws/drain-reason": "unhealthy", "autoscaler.eks.aws/drain-started": "5"})
    assert state.owner is Owner.DISRUPTION and state.in_progress


def static_snap(nodes: list[Node], in_flight: list[InFlightNode] | None = None) -> PlanInput:
    return PlanInput(node_pools=[], node_classes={"default": NODE_CLASS}, pods=[], nodes=nodes,
                     instance_types=TYPES, offerings=offerings(), in_flight=in_flight or [])


def test_a_static_pool_counts_staying_nodes_and_in_flight_launches() -> None:
    pool = parse_node_pool({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "fixed"},
                            "spec": {"replicas": 4, "limits": {"nodes": 5},
                                     "template": {"spec": {"nodeClassRef": {"name": "default"}}}}})
    label = {"karpenter.sh/nodepool": "fixed"}
    nodes = [Node("a", labels=label, provider_id="aws:///us-east-1a/i-a"),
             Node("b", labels=label, deleting=True),
             Node("c", labels=label, annotations={"autoscaler.eks.aws/drain-started": "1"})]
    flying = [InFlightNode("i-f", "fixed", "m5.large", "us-east-1a", "on-demand")]
    counted = count(pool, static_snap(nodes, flying))
    # a and the in-flight one stay; c is leaving; b (deleting) is not counted at all
    assert (counted.staying, counted.total) == (2, 3)
    # replicas 4 wants 2 more, limits.nodes 5 leaves room for 2
    launches, problems = static_launches(static_snap(nodes, flying), [pool])
    assert len(launches) == 2 and not problems
    assert launches[0].pods == () and launches[0].labels["karpenter.sh/nodepool"] == "fixed"
    assert launches[0].capacity_type == "on-demand" and launches[0].instance_types[0] == "c5.large"
