"""Read everything the planner needs from the cluster and the cloud, through the ports, into a
``PlanInput``. Shared by the provisioner and the disruption service (which plans replacements)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

from autoscaler.app.ports import CloudError, CloudPort, ClusterPort
from autoscaler.domain.errors import ConfigError
from autoscaler.domain.fleet import CloudInstance, in_flight_node
from autoscaler.domain.models import (
    DaemonSet,
    Node,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    StorageClass,
)
from autoscaler.domain.nodeclass import NodeClass
from autoscaler.domain.nodepool import NodePool
from autoscaler.domain.plan import InFlightNode, PlanInput
from autoscaler.domain.reservations import CapacityReservation

log = logging.getLogger(__name__)


def as_pending(pod: Pod) -> Pod:
    """A pod that must be placed again (its node is going away): unbound and pending."""
    return replace(pod, node_name=None, phase="Pending", ready=False)


# (instances EC2 lists as in flight, every Node, pending pod keys) -> in-flight capacity from the durable
# launch record (which wins over EC2's view of the same instance), and the pods each registering node
# (by instance id) was launched for.
Claimed = Callable[[Sequence[CloudInstance], Sequence[Node], Collection[str]],
                   tuple[Sequence[InFlightNode], Mapping[str, tuple[str, ...]]]]


def gather_plan_input(*, cluster: ClusterPort, cloud: CloudPort, node_pools: list[NodePool],
                      node_classes: Mapping[str, NodeClass], region: str = "",
                      leaving_nodes: Collection[str] = (), claimed: Claimed | None = None,
                      owned_from: Callable[[], Sequence[CloudInstance]] | None = None) -> PlanInput:
    """Pods, nodes, DaemonSets, volumes, in-flight instances, instance types and priced offerings.

    Pods on ``leaving_nodes`` (being interrupted, expired, consolidated) are returned as pending and
    those nodes are left out, so the plan makes room for them elsewhere. DaemonSet, mirror and
    finished pods on them are dropped: they do not move. ``owned_from``: the pass's one listing of our
    live instances. It and the DaemonSet and volume lists are read on worker threads while the pods and
    nodes are read here: their waits overlap (the ports' clients are thread-safe).
    """
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="gather") as workers:
        listing = workers.submit(owned_from) if owned_from is not None else None
        extras = workers.submit(_cluster_extras, cluster)
        return _gather(cluster=cluster, cloud=cloud, node_pools=node_pools, node_classes=node_classes,
                       region=region, leaving_nodes=leaving_nodes, claimed=claimed, listing=listing, extras=extras)


_Extras = tuple[list[DaemonSet], list[PersistentVolumeClaim], list[PersistentVolume], list[StorageClass]]


def _cluster_extras(cluster: ClusterPort) -> _Extras:
    return cluster.daemonsets(), cluster.pvcs(), cluster.pvs(), cluster.storage_classes()


def _gather(*, cluster: ClusterPort, cloud: CloudPort, node_pools: list[NodePool],
            node_classes: Mapping[str, NodeClass], region: str, leaving_nodes: Collection[str],
            claimed: Claimed | None, listing: Future[Sequence[CloudInstance]] | None,
            extras: Future[_Extras]) -> PlanInput:
    leaving = set(leaving_nodes)
    pods: list[Pod] = []
    for pod in cluster.pods():
        if pod.node_name in leaving:
            if pod.is_daemonset_pod or pod.is_mirror or pod.is_finished or pod.deleting:
                continue
            pods.append(as_pending(pod))
        else:
            pods.append(pod)
    all_nodes = cluster.nodes()
    nodes = [n for n in all_nodes if n.name not in leaving]
    # A leaving node's instance is still registered: it must not come back as in-flight capacity
    # (its pod tags would pin the pods onto the very instance that is going away).
    registered = {n.instance_id for n in all_nodes if n.instance_id}
    # ``listing``: the pass's one listing of our live instances (DescribeInstances is the costliest read).
    listed = ([i for i in listing.result() if i.instance_id not in registered] if listing is not None
              else cloud.in_flight(registered))
    in_flight = [f for f in (in_flight_node(i) for i in listed) if f is not None]
    launched_for: Mapping[str, tuple[str, ...]] = {}
    if claimed is not None:
        pending = {p.key for p in pods if p.node_name is None and p.is_pending}
        flying, launched_for = claimed(listed, all_nodes, pending)
        from_claims = [f for f in flying if f.instance_id not in registered]
        ids = {f.instance_id for f in from_claims}
        in_flight = [f for f in in_flight if f.instance_id not in ids] + from_claims
    daemonsets, pvcs, pvs, storage_classes = extras.result()
    # Namespaces are read only for a namespaceSelector (a pending or bound pod's pod affinity).
    selecting = any(term.namespace_selector is not None for pod in pods
                    for term in (*pod.pod_affinity, *pod.pod_anti_affinity,
                                 *(weighted for _, weighted in pod.preferred_pod_affinity),
                                 *(weighted for _, weighted in pod.preferred_pod_anti_affinity)))
    return PlanInput(
        node_pools=node_pools, node_classes=node_classes, pods=pods, nodes=nodes,
        daemonsets=daemonsets, pvcs=pvcs, pvs=pvs,
        storage_classes=storage_classes, instance_types=list(cloud.instance_types().values()),
        offerings=cloud.offerings(), in_flight=in_flight, region=region, launched_for=launched_for,
        node_class_zones=_subnet_zones(cloud, node_pools, node_classes),
        reservations=_reservations(cloud, node_pools, node_classes),
        namespaces=cluster.namespaces() if selecting else {},
    )


def _subnet_zones(cloud: CloudPort, node_pools: list[NodePool],
                  node_classes: Mapping[str, NodeClass]) -> dict[str, frozenset[str]]:
    """Where each node class in use can launch. A node class whose subnets cannot be resolved is left
    out (no restriction): its launch then reports the reason."""
    out: dict[str, frozenset[str]] = {}
    for name in sorted({p.node_class_ref for p in node_pools}):
        nc = node_classes.get(name)
        if nc is None:
            continue
        try:
            out[name] = cloud.subnet_zones(nc)
        except (ConfigError, CloudError) as exc:
            log.warning("subnets of EC2NodeClass %s not resolved: %s", name, exc)
    return out


def _reservations(cloud: CloudPort, node_pools: list[NodePool],
                  node_classes: Mapping[str, NodeClass]) -> dict[str, tuple[CapacityReservation, ...]]:
    """The usable reservations of each node class a NodePool allowing ``reserved`` uses. One that cannot
    be described is left out this pass (its pools launch on-demand / spot as they allow)."""
    out: dict[str, tuple[CapacityReservation, ...]] = {}
    for name in sorted({p.node_class_ref for p in node_pools if p.allows_reserved and not p.is_static}):
        nc = node_classes.get(name)
        if nc is None or not nc.capacity_reservation_selector_terms:
            continue
        try:
            out[name] = tuple(cloud.capacity_reservations(nc))
        except CloudError as exc:
            log.warning("capacity reservations of EC2NodeClass %s not described: %s", name, exc)
    return out
