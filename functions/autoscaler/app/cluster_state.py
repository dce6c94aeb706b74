"""Read everything the planner needs from the cluster and the cloud, through the ports, into values: a
``ClusterRead``, from which a ``PlanInput`` is built. Shared by the provisioner and the disruption service
(which plans replacements)."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from enum import StrEnum

from autoscaler.app.ports import ClaimStore, CloudError, CloudPort, ClusterPort
from autoscaler.domain.catalogue_needs import catalogue_needs
from autoscaler.domain.claims import Claim
from autoscaler.domain.errors import ConfigError
from autoscaler.domain.fleet import CloudInstance, in_flight_node
from autoscaler.domain.models import (
    DaemonSet,
    InstanceType,
    Node,
    Offering,
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


class Listing(StrEnum):
    """Which of our instances a read describes (DescribeInstances is a pass's costliest read)."""

    IN_FLIGHT = "inFlight"  # the pending/running instances not yet registered (disruption)
    OWNED = "owned"  # every live instance of ours, shared by the in-flight view and the lifecycle sweep
    # In-flight capacity from the stored node claims alone (Karpenter's NodeClaims): EC2 is asked only about
    # the claims whose outcome is uncertain (still ``launching``: their CreateFleet answer was lost), by their
    # claim tags. Every provisioner pass but the sweep's (app/provisioner.py, ``SWEEP_SECONDS``).
    CLAIMED = "claimed"


@dataclass
class ClusterRead:
    """One read of the cluster and the cloud for a pass, as values: what ``plan_input`` builds a
    ``PlanInput`` from, with the pods of whichever nodes are leaving made pending again."""

    pods: list[Pod]  # every pod, as listed
    nodes: list[Node]  # every Node, leaving ones too
    daemonsets: list[DaemonSet]
    pvcs: list[PersistentVolumeClaim]
    pvs: list[PersistentVolume]
    storage_classes: list[StorageClass]
    instance_types: list[InstanceType]
    offerings: list[Offering]
    node_class_zones: dict[str, frozenset[str]]
    reservations: dict[str, tuple[CapacityReservation, ...]]
    # Our live instances EC2 lists that are not registered nodes (in-flight capacity by EC2's view).
    unregistered: list[CloudInstance]
    owned: list[CloudInstance] | None = None  # ``Listing.OWNED``: every live instance of ours
    claimed: list[CloudInstance] | None = None  # ``Listing.CLAIMED``: the instances found for uncertain claims
    stored: list[Claim] | None = None  # ``Listing.CLAIMED``: the claims read
    # Namespace name -> its labels, read only when a pod's (anti-)affinity has a namespaceSelector.
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def registered(self) -> set[str]:
        return {n.instance_id for n in self.nodes if n.instance_id}

    def pending(self, leaving: Collection[str]) -> set[str]:
        """Keys of the pods waiting for a node once ``leaving`` nodes' pods are made pending."""
        return {p.key for p in self.pods_with(leaving) if p.node_name is None and p.is_pending}

    def pods_with(self, leaving: Collection[str]) -> list[Pod]:
        """Pods on ``leaving`` nodes (being interrupted, expired, consolidated) as pending, so the plan makes
        room for them elsewhere; their DaemonSet, mirror, finished and deleting pods are dropped (they do
        not move)."""
        gone = set(leaving)
        if not gone:
            return list(self.pods)
        pods: list[Pod] = []
        for pod in self.pods:
            if pod.node_name in gone:
                if pod.is_daemonset_pod or pod.is_mirror or pod.is_finished or pod.deleting:
                    continue
                pods.append(as_pending(pod))
            else:
                pods.append(pod)
        return pods

    def plan_input(self, *, node_pools: list[NodePool], node_classes: Mapping[str, NodeClass], region: str = "",
                   leaving: Collection[str] = (), from_claims: Sequence[InFlightNode] = (),
                   launched_for: Mapping[str, tuple[str, ...]] | None = None) -> PlanInput:
        """The planner's input with ``leaving`` nodes left out and their pods pending. ``from_claims``: the
        in-flight capacity of the durable launch record, which wins over EC2's view of the same instance;
        ``launched_for``: the pods each registering node (by instance id) was launched for."""
        gone = set(leaving)
        registered = self.registered
        in_flight = [f for f in (in_flight_node(i) for i in self.unregistered) if f is not None]
        # A leaving node's instance is still registered: it must not come back as in-flight capacity
        # (its pod tags would pin the pods onto the very instance that is going away).
        claimed = [f for f in from_claims if f.instance_id not in registered]
        ids = {f.instance_id for f in claimed}
        in_flight = [f for f in in_flight if f.instance_id not in ids] + claimed
        return PlanInput(
            node_pools=node_pools, node_classes=node_classes, pods=self.pods_with(gone),
            nodes=[n for n in self.nodes if n.name not in gone],
            daemonsets=self.daemonsets, pvcs=self.pvcs, pvs=self.pvs, storage_classes=self.storage_classes,
            instance_types=self.instance_types, offerings=self.offerings, in_flight=in_flight, region=region,
            launched_for=launched_for or {}, node_class_zones=self.node_class_zones,
            reservations=self.reservations, namespaces=self.namespaces,
        )


def read_cluster(*, cluster: ClusterPort, cloud: CloudPort, node_pools: list[NodePool],
                 node_classes: Mapping[str, NodeClass], listing: Listing = Listing.IN_FLIGHT,
                 claims: ClaimStore | None = None) -> ClusterRead:
    """Pods, nodes, DaemonSets, volumes, our instances (as ``listing`` says), instance types, priced
    offerings, subnet zones and reservations. The instance listing and the DaemonSet and volume lists are
    read on worker threads while the pods and nodes are read here: their waits overlap (the ports' clients
    are thread-safe). ``Listing.CLAIMED`` reads the claims from ``claims``; when they cannot be read, every
    owned instance is listed instead."""
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="gather") as workers:
        instances = workers.submit(_instances, cloud, listing, claims) if listing is not Listing.IN_FLIGHT else None
        extras = workers.submit(_cluster_extras, cluster)
        pods = cluster.pods()
        nodes = cluster.nodes()
        registered = {n.instance_id for n in nodes if n.instance_id}
        owned: list[CloudInstance] | None = None
        claimed: list[CloudInstance] | None = None
        stored: list[Claim] | None = None
        if instances is None:
            unregistered = cloud.in_flight(registered)
        else:
            owned, claimed, stored = instances.result()
            listed = owned if owned is not None else claimed or []
            unregistered = [i for i in listed if i.instance_id not in registered]
        daemonsets, pvcs, pvs, storage_classes = extras.result()
    # Namespaces are read only for a namespaceSelector (a pending or bound pod's pod affinity).
    selecting = any(term.namespace_selector is not None for pod in pods
                    for term in (*pod.pod_affinity, *pod.pod_anti_affinity,
                                 *(weighted for _, weighted in pod.preferred_pod_affinity),
                                 *(weighted for _, weighted in pod.preferred_pod_anti_affinity)))
    return ClusterRead(
        pods=pods, nodes=nodes, daemonsets=daemonsets, pvcs=pvcs, pvs=pvs, storage_classes=storage_classes,
        instance_types=_instance_types(cloud, node_pools), offerings=cloud.offerings(),
        node_class_zones=_subnet_zones(cloud, node_pools, node_classes),
        reservations=_reservations(cloud, node_pools, node_classes),
        unregistered=unregistered, owned=owned, claimed=claimed, stored=stored,
        namespaces=cluster.namespaces() if selecting else {})


def _instance_types(cloud: CloudPort, node_pools: list[NodePool]) -> list[InstanceType]:
    """The catalogue, read again first if the NodePools need what the warm one was not read for."""
    cloud.expect_catalogue(catalogue_needs(node_pools))
    return list(cloud.instance_types().values())


_Instances = tuple[list[CloudInstance] | None, list[CloudInstance] | None, list[Claim] | None]


def _instances(cloud: CloudPort, listing: Listing, claims: ClaimStore | None) -> _Instances:
    """(every owned instance, or None), (the instances found for uncertain claims, or None), (the claims read,
    or None)."""
    if listing is Listing.CLAIMED and claims is not None:
        try:
            stored = claims.claims()
            # A launched claim knows its instance, type, zone and capacity type: nothing to ask EC2. A launching
            # one may have got instances nobody recorded: those carry its claim (or group) tag.
            uncertain = {cid for c in stored if c.state == "launching" for cid in (c.claim_id, c.group)}
            return None, cloud.claimed_instances(uncertain) if uncertain else [], stored
        except CloudError as exc:
            log.warning("claimed instances not described (listing every owned instance): %s", exc)
    return cloud.owned_instances(), None, None


def gather_plan_input(*, cluster: ClusterPort, cloud: CloudPort, node_pools: list[NodePool],
                      node_classes: Mapping[str, NodeClass], region: str = "",
                      leaving_nodes: Collection[str] = ()) -> PlanInput:
    """Everything the planner reads, with ``leaving_nodes`` left out and their pods pending
    (``ClusterRead.plan_input``); in-flight capacity is EC2's view of our unregistered instances."""
    read = read_cluster(cluster=cluster, cloud=cloud, node_pools=node_pools, node_classes=node_classes)
    return read.plan_input(node_pools=node_pools, node_classes=node_classes, region=region, leaving=leaving_nodes)


_Extras = tuple[list[DaemonSet], list[PersistentVolumeClaim], list[PersistentVolume], list[StorageClass]]


def _cluster_extras(cluster: ClusterPort) -> _Extras:
    return cluster.daemonsets(), cluster.pvcs(), cluster.pvs(), cluster.storage_classes()


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
