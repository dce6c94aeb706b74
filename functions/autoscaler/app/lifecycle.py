"""Node lifecycle, run at the end of every provisioner pass (Karpenter's NodeClaim lifecycle and
garbage collection, without NodeClaim objects: the instance tags and the Node objects are the state).

- An instance that has not registered as a node within the registration timeout (15 min) is
  terminated and its offering marked unavailable: something about it (capacity, AMI, subnet) is bad.
- A registered node loses the ``karpenter.sh/unregistered`` taint once its labels are reconciled:
  the NodePool's template labels and the well-known labels of its instance type, zone and capacity
  type (kubelet sets only some of them; pods select on all of them). Once registered, Ready and without
  startup taints it is labelled ``karpenter.sh/initialized`` (in the same sweep when it is Ready already).
- A Node object with our NodePool label and an ``aws://`` provider id whose instance is terminated or
  gone is deleted (its pods then get rescheduled by their controllers).
- Launch templates of ours that no launch in this container used within ``template_ttl`` and that
  are older than it are deleted; a later launch with the same content simply creates it again.

Every step is idempotent and best effort: one failure is reported and the rest still run.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from autoscaler.app.ports import CloudError, CloudPort, ClusterError, ClusterPort
from autoscaler.domain.fleet import GOING_AWAY_STATES, CloudInstance
from autoscaler.domain.initialization import is_initialized, ready_to_initialize
from autoscaler.domain.keys import CAPACITY_TYPE_LABEL, INITIALIZED_LABEL, NODEPOOL_LABEL
from autoscaler.domain.labels import node_labels
from autoscaler.domain.models import UNREGISTERED_TAINT, InstanceType, Node
from autoscaler.domain.nodepool import NodePool
from autoscaler.domain.ownership import OwnershipError

log = logging.getLogger(__name__)

REGISTRATION_TIMEOUT_SECONDS = 15 * 60
TEMPLATE_TTL_SECONDS = 3600
GONE_STATES = frozenset({"terminated"})


@dataclass
class LifecycleResult:
    timed_out: list[str] = field(default_factory=list)  # instance ids terminated
    untainted: list[str] = field(default_factory=list)  # node names
    relabeled: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> labels set
    deleted_nodes: list[str] = field(default_factory=list)
    deleted_templates: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.timed_out or self.untainted or self.relabeled or self.deleted_nodes
                    or self.deleted_templates)

    def summary(self) -> str:
        parts = []
        if self.timed_out:
            parts.append(f"terminated {len(self.timed_out)} never-registered instance(s) {self.timed_out}")
        if self.untainted:
            parts.append(f"registered {len(self.untainted)} node(s) {self.untainted}")
        relabeled_only = sorted(set(self.relabeled) - set(self.untainted))
        if relabeled_only:
            parts.append(f"relabeled {relabeled_only}")
        if self.deleted_nodes:
            parts.append(f"deleted {len(self.deleted_nodes)} node(s) whose instance is gone {self.deleted_nodes}")
        if self.deleted_templates:
            parts.append(f"deleted {len(self.deleted_templates)} unused launch template(s)")
        if self.errors:
            parts.append(f"{len(self.errors)} error(s): {'; '.join(self.errors)}")
        return ", ".join(parts) or "nothing to do"


def wanted_labels(node: Node, instance: CloudInstance | None, *, node_pools: Mapping[str, NodePool],
                  instance_types: Mapping[str, InstanceType]) -> dict[str, str]:
    """The labels a registered node of ours must carry: its NodePool's template labels and the
    well-known labels of its instance type, zone and capacity type (from the instance when known)."""
    pool_name = node.labels.get(NODEPOOL_LABEL) or (instance.node_pool if instance else "")
    pool = node_pools.get(pool_name)
    want: dict[str, str] = dict(pool.labels) if pool else {}
    type_name = instance.instance_type if instance else node.labels.get("node.kubernetes.io/instance-type", "")
    zone = instance.zone if instance else (node.zone or "")
    ct = instance.capacity_type if instance else node.labels.get(CAPACITY_TYPE_LABEL, "")
    it = instance_types.get(type_name)
    if it is not None and zone and ct and pool_name:
        want.update(node_labels(it, zone=zone, capacity_type=ct, node_pool=pool_name))
    elif pool_name:
        want[NODEPOOL_LABEL] = pool_name
    return want


def _ours(node: Node, owned_ids: set[str]) -> bool:
    return bool(node.instance_id) and (node.instance_id in owned_ids or NODEPOOL_LABEL in node.labels)


def reconcile(*, cluster: ClusterPort, cloud: CloudPort, nodes: Sequence[Node], owned: Sequence[CloudInstance],
              node_pools: Mapping[str, NodePool], now: float,
              registration_timeout: float = REGISTRATION_TIMEOUT_SECONDS,
              template_ttl: float = TEMPLATE_TTL_SECONDS, dry_run: bool = False,
              release_finalizers: Collection[str] = (), collect_templates: bool = True) -> LifecycleResult:
    """One lifecycle sweep. ``owned`` are this cluster's pending/running instances (by tag), ``nodes``
    every Node object, ``now`` epoch seconds. ``dry_run`` reports what it would do and changes nothing.
    ``release_finalizers``: removed from the Nodes it deletes (Karpenter's, once its nodes are adopted).
    ``collect_templates=False`` leaves unused launch templates to a later sweep (a pass that launched:
    listing them is a call on a burst's critical path, and the templates just used are not due anyway)."""
    result = LifecycleResult()
    by_id = {i.instance_id: i for i in owned}
    registered = {n.instance_id for n in nodes if n.instance_id}
    _time_out(cloud, owned, registered, now=now, timeout=registration_timeout, result=result, dry_run=dry_run)
    types = cloud.instance_types()
    for node in nodes:
        if not _ours(node, set(by_id)) or node.deleting:
            continue
        _register(cluster, node, by_id.get(node.instance_id or ""), node_pools=node_pools, types=types,
                  result=result, dry_run=dry_run)
    _delete_orphans(cluster, cloud, [n for n in nodes if _ours(n, set(by_id)) and n.instance_id not in by_id],
                    result=result, dry_run=dry_run, release_finalizers=release_finalizers)
    if collect_templates:
        _delete_templates(cloud, now=now, ttl=template_ttl, result=result, dry_run=dry_run)
    return result


def register_claimed(*, cluster: ClusterPort, cloud: CloudPort, nodes: Sequence[Node],
                     claimed: Sequence[CloudInstance], node_pools: Mapping[str, NodePool],
                     dry_run: bool = False) -> LifecycleResult:
    """A woken pass's sweep: registration and initialisation of the nodes of claimed instances (the ones
    launched recently: a claim ends once its node is initialised), with only those instances described.
    Our other uninitialised nodes (a claim that ended at its time-to-live, or was lost) are few: their
    instances are described too, so the watcher's wake-up for them is served by this pass as well.
    Time-outs, orphans and launch templates need every owned instance listed: the safety pass's sweep."""
    result = LifecycleResult()
    by_id = {i.instance_id: i for i in claimed if i.state not in GOING_AWAY_STATES}
    unclaimed = {n.instance_id for n in nodes if n.instance_id and n.instance_id not in by_id and not n.deleting
                 and NODEPOOL_LABEL in n.labels and not is_initialized(n)}
    if unclaimed:
        try:
            by_id.update((i.instance_id, i) for i in cloud.describe_instances(unclaimed)
                         if i.state not in GOING_AWAY_STATES)
        except CloudError as exc:  # best effort: the safety pass's sweep serves them
            result.errors.append(f"describe instances of uninitialised nodes: {exc}")
    fresh = [n for n in nodes if n.instance_id in by_id and not n.deleting]
    types = cloud.instance_types() if fresh else {}
    for node in fresh:
        _register(cluster, node, by_id[node.instance_id or ""], node_pools=node_pools, types=types, result=result,
                  dry_run=dry_run)
    return result


def _time_out(cloud: CloudPort, owned: Sequence[CloudInstance], registered: set[str], *, now: float,
              timeout: float, result: LifecycleResult, dry_run: bool) -> None:
    late = [i for i in owned if i.instance_id not in registered and i.launch_time
            and now - i.launch_time >= timeout]
    if not late:
        return
    for inst in late:
        log.warning("instance %s (%s %s %s, claim %s) did not register within %.0f s: terminating",
                    inst.instance_id, inst.instance_type, inst.capacity_type, inst.zone, inst.claim_id, timeout)
        if not dry_run:
            cloud.mark_unavailable(inst.instance_type, inst.zone, inst.capacity_type)
    if dry_run:
        result.timed_out.extend(i.instance_id for i in late)
        return
    for inst in late:
        # One at a time: a refusal (termination protection, a changed tag) must not keep the others,
        # nor abort the provisioner pass that runs this sweep; it is retried on the next sweep.
        try:
            result.timed_out.extend(cloud.terminate([inst.instance_id]))
        except (OwnershipError, CloudError) as exc:
            log.warning("could not terminate unregistered instance %s: %s", inst.instance_id, exc)
            result.errors.append(f"instance {inst.instance_id}: {exc}")


def _register(cluster: ClusterPort, node: Node, inst: CloudInstance | None, *, node_pools: Mapping[str, NodePool],
              types: Mapping[str, InstanceType], result: LifecycleResult, dry_run: bool) -> None:
    want = wanted_labels(node, inst, node_pools=node_pools, instance_types=types)
    pool = node_pools.get(want.get(NODEPOOL_LABEL, ""))
    if pool is not None and ready_to_initialize(node, pool):
        # From now on the planner counts the node with its real taints (domain/initialization.py).
        want[INITIALIZED_LABEL] = "true"
    missing = {k: v for k, v in want.items() if node.labels.get(k) != v}
    has_taint = any(t.key == UNREGISTERED_TAINT.key for t in node.taints)
    try:
        if missing:
            if not dry_run:
                cluster.label_node(node.name, missing)
            result.relabeled[node.name] = missing
        # Labels first: the taint is what keeps pods off a node whose labels are not final yet.
        if has_taint:
            if not dry_run:
                cluster.remove_taint(node.name, key=UNREGISTERED_TAINT.key)
            result.untainted.append(node.name)
            # Registered now: a Ready node is initialised in the same sweep (Karpenter's initialisation
            # reconciles on the registration's update at once; the watcher does not wake twice for it).
            registered = replace(node, taints=tuple(t for t in node.taints if t.key != UNREGISTERED_TAINT.key))
            if pool is not None and INITIALIZED_LABEL not in want and ready_to_initialize(registered, pool):
                if not dry_run:
                    cluster.label_node(node.name, {INITIALIZED_LABEL: "true"})
                result.relabeled.setdefault(node.name, {})[INITIALIZED_LABEL] = "true"
    except ClusterError as exc:
        result.errors.append(f"node {node.name}: {exc}")


def _delete_orphans(cluster: ClusterPort, cloud: CloudPort, candidates: Sequence[Node], *,
                    result: LifecycleResult, dry_run: bool, release_finalizers: Collection[str]) -> None:
    """Nodes of ours whose instance is not pending/running: delete those whose instance is gone."""
    if not candidates:
        return
    ids = {n.instance_id for n in candidates if n.instance_id}
    try:
        found = {i.instance_id: i for i in cloud.describe_instances(ids)}
    except CloudError as exc:  # best effort, reported in the pass's lifecycle errors: the next pass retries
        result.errors.append(f"describe instances of nodes: {exc}")
        return
    for node in candidates:
        inst = found.get(node.instance_id or "")
        if inst is not None and inst.state not in GONE_STATES:
            continue  # stopping/shutting-down: not gone yet
        log.info("node %s: instance %s is %s; deleting the Node object", node.name, node.instance_id,
                 inst.state if inst else "not found")
        if dry_run:
            result.deleted_nodes.append(node.name)
            continue
        try:
            cluster.delete_node(node.name, release_finalizers=release_finalizers)
            result.deleted_nodes.append(node.name)
        except ClusterError as exc:
            result.errors.append(f"delete node {node.name}: {exc}")


def _delete_templates(cloud: CloudPort, *, now: float, ttl: float, result: LifecycleResult, dry_run: bool) -> None:
    try:
        templates = cloud.launch_templates()
    except CloudError as exc:  # best effort, reported in the pass's lifecycle errors: the next pass retries
        result.errors.append(f"list launch templates: {exc}")
        return
    for lt in templates:
        used = cloud.launch_template_last_used(lt.name)
        if now - lt.created_at < ttl or (used is not None and now - used < ttl):
            continue
        if not dry_run:
            try:
                cloud.delete_launch_template(lt.template_id)
            except CloudError as exc:  # best effort, reported as above
                result.errors.append(f"delete launch template {lt.name}: {exc}")
                continue
        result.deleted_templates.append(lt.name)
