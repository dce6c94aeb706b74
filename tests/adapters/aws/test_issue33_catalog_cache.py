"""Issue 33 item 21: idle passes (every 10 minutes) do not re-read the instance catalogue: it is kept an
hour, so an idle pass costs no DescribeInstanceTypes parse; and it is read again at once when the NodePools'
needs change (another family, a type it lacks), without a new container."""

from __future__ import annotations

from typing import Any

import boto3

from autoscaler.adapters.aws.cloud import AwsCloud
from autoscaler.adapters.clock import ManualClock
from autoscaler.adapters.kube.cluster import KubeCluster
from autoscaler.app.cluster_state import read_cluster
from autoscaler.domain.catalogue_needs import catalogue_needs
from autoscaler.domain.nodepool import NodePool, parse_node_pools
from simulator.kube_api import KubeApiServer, client_for
from tests.adapters.aws.helpers import CLUSTER, REGION, Network


def test_item21_the_catalogue_is_kept_across_idle_passes_and_refreshed_hourly(ec2: Any, ssm: Any, iam: Any) -> None:
    clock = ManualClock()
    cloud = AwsCloud(ec2=ec2, ssm=ssm, iam=iam, pricing=boto3.client("pricing", region_name=REGION),
                     region=REGION, cluster=CLUSTER, clock=clock)
    cloud.instance_types()
    first = cloud.catalog.calls.get("describe_instance_types", 0)
    assert first >= 1
    # Given the safety pass every 10 minutes for the rest of the hour
    for _ in range(5):
        clock.advance(600)
        cloud.instance_types()
        cloud.catalog.offered()
    # Then the catalogue was read once
    assert cloud.catalog.calls.get("describe_instance_types", 0) == first
    # And an hour after it was read, the next pass reads it again (new types, retired ones)
    clock.advance(600)
    cloud.instance_types()
    assert cloud.catalog.calls.get("describe_instance_types", 0) == 2 * first


def _pools(*requirements: dict[str, Any]) -> list[NodePool]:
    return parse_node_pools([{"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "general"},
                              "spec": {"template": {"spec": {
                                  "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                                   "name": "default"},
                                  "requirements": list(requirements)}}}}])


def _reads(cloud: AwsCloud) -> int:
    return cloud.catalog.calls.get("describe_instance_types", 0)


def test_item21_the_catalogue_is_read_again_when_the_node_pools_needs_change(
        ec2: Any, ssm: Any, iam: Any, network: Network, kube_api: KubeApiServer) -> None:
    clock = ManualClock()
    cloud = AwsCloud(ec2=ec2, ssm=ssm, iam=iam, pricing=boto3.client("pricing", region_name=REGION),
                     region=REGION, cluster=CLUSTER, clock=clock)
    nodes = KubeCluster(client_for(kube_api.url))  # an empty cluster on the emulator
    c5 = _pools({"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["c5"]})
    # Given a pass that read the catalogue for a c5 NodePool, and idle passes after it
    read_cluster(cluster=nodes, cloud=cloud, node_pools=c5, node_classes={})
    first = _reads(cloud)
    assert first >= 1
    clock.advance(600)
    read_cluster(cluster=nodes, cloud=cloud, node_pools=c5, node_classes={})
    assert _reads(cloud) == first  # unchanged needs: the warm catalogue serves
    # When the NodePool now allows another family (a change of the NodePools, no new container)
    clock.advance(60)
    both = _pools({"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["c5", "m7i"]})
    read = read_cluster(cluster=nodes, cloud=cloud, node_pools=both, node_classes={})
    # Then that pass reads the catalogue again, well within its hour, and the next one does not
    assert _reads(cloud) == 2 * first
    assert any(it.name.startswith("m7i.") for it in read.instance_types)
    read_cluster(cluster=nodes, cloud=cloud, node_pools=both, node_classes={})
    assert _reads(cloud) == 2 * first


def test_item21_a_name_the_catalogue_lacks_is_read_for_once_not_every_pass(
        ec2: Any, ssm: Any, iam: Any, moto_catalog: Any) -> None:
    clock = ManualClock()
    cloud = AwsCloud(ec2=ec2, ssm=ssm, iam=iam, pricing=boto3.client("pricing", region_name=REGION),
                     region=REGION, cluster=CLUSTER, clock=clock)
    infos, offerings = moto_catalog
    # Given a warm catalogue read before m7i existed (primed without it), checked for a c5 NodePool
    cloud.catalog.load([i for i in infos if not i["InstanceType"].startswith("m7i.")],
                       [o for o in offerings if not o["InstanceType"].startswith("m7i.")])
    c5 = catalogue_needs(_pools({"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["c5"]}))
    assert cloud.catalog.expect(c5) is False
    # When the needs name m7i, which the cached catalogue lacks
    m7i = catalogue_needs(_pools({"key": "node.kubernetes.io/instance-type", "operator": "In",
                                  "values": ["m7i.large", "c5.nolarge"]}))
    # Then it is read again at once (m7i is found; the typo stays missing) ...
    assert cloud.catalog.expect(m7i) is True
    assert "m7i.large" in cloud.instance_types() and "c5.nolarge" not in cloud.instance_types()
    # ... and the typo does not make every later pass read it again
    assert cloud.catalog.expect(m7i) is False and cloud.catalog.expect(m7i) is False
    assert _reads(cloud) == cloud.catalog.calls.get("describe_instance_types", 0) >= 1
