"""Carrying out disruption decisions, step by step and resumable: replacement capacity first (requested of
the provisioner, or launched here), then taint, cordon and the node-state record, the drain through the
Eviction API, and the instance's termination; a repair (``Unhealthy``) terminates at once, deleting the
pods without waiting on PDBs, as Karpenter does when it expires the node's termination grace period.
``DisruptionService`` (``app/disruption.py``) decides and calls these."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from autoscaler.app.drain import drain
from autoscaler.app.launcher import fleet_request_for
from autoscaler.app.node_state import NodeStates, NotOwnedError
from autoscaler.app.ports import (
    Clock,
    CloudError,
    CloudPort,
    ClusterError,
    ClusterPort,
    NotFoundError,
    ReplacementRequester,
)
from autoscaler.domain.disruption import (
    DRAIN_REASONS,
    REASON_OF_DRAIN,
    Blocked,
    Candidate,
    Reason,
    Settings,
    moves,
    simulate,
)
from autoscaler.domain.models import DISRUPTED_TAINT, Node
from autoscaler.domain.node_state import NodeState, Owner, abandon, start_drain, with_empty_since
from autoscaler.domain.nodeclass import NodeClass
from autoscaler.domain.nodepool import NodePool
from autoscaler.domain.ownership import OwnershipError, is_owned
from autoscaler.domain.plan import PlanInput
from autoscaler.domain.static_pools import leaving
from autoscaler.metrics_catalog import (
    DISRUPTION_BLOCKED,
    DRAIN_SECONDS,
    EVICTIONS_BLOCKED_BY_PDB,
    EVICTIONS_THROTTLED,
    GUARD,
    NODES_DISRUPTED,
    NODES_TERMINATED,
    PODS_EVICTED,
    REASON,
    MetricsSink,
)

log = logging.getLogger("autoscaler.disruption")


@dataclass(frozen=True, slots=True)
class Options:
    dry_run: bool = False
    settings: Settings = field(default_factory=Settings)
    blocked_drain_timeout: float = 1800.0
    replacement_timeout: float = 1200.0
    drain_seconds_per_pass: float = 60.0
    adopt_karpenter: bool = False  # migration.adoptKarpenterNodes


@dataclass
class PassReport:
    """What one pass did (or, in dry-run, would do)."""

    dry_run: bool
    decided: list[Candidate] = field(default_factory=list)
    blocked: list[Blocked] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    draining: list[str] = field(default_factory=list)  # drains still going at the end of the pass
    replacing: list[str] = field(default_factory=list)  # waiting for replacement capacity
    released: list[str] = field(default_factory=list)  # given back after being blocked too long
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "dryRun": self.dry_run,
            "decisions": [{"reason": c.reason, "action": c.action, "nodes": list(c.nodes), "pods": len(c.pods),
                           "priceBefore": round(c.price_before, 6), "priceAfter": round(c.price_after, 6),
                           "savingPerHour": round(c.saving, 6),
                           "replacements": [list(r.instance_types[:5]) for r in c.replacements]}
                          for c in self.decided],
            "blocked": [{"node": b.node, "reason": b.reason, "guard": b.guard, "message": b.message}
                        for b in self.blocked],
            "removed": self.removed, "draining": self.draining, "replacing": self.replacing,
            "released": self.released, "notes": self.notes,
        }


class DisruptionActions:
    """The steps of a disruption; ``DisruptionService`` sets these attributes up."""

    cluster: ClusterPort
    cloud: CloudPort
    clock: Clock
    sink: MetricsSink
    pools: dict[str, NodePool]
    node_classes: Mapping[str, NodeClass]
    cluster_name: str
    options: Options
    replacements: ReplacementRequester | None
    states: NodeStates
    sleep: Callable[[float], None]
    release_finalizers: tuple[str, ...]

    def _snapshot(self) -> PlanInput:
        raise NotImplementedError

    def _start_drains(self, nodes: list[Node], reason: Reason, *, owned: set[str], deadline: float,
                      report: PassReport) -> None:
        started = self.clock.now()
        marked = []
        for seen in nodes:
            # The record decides who owns the node: read it from the API server, not from the pass's (cached)
            # view, so a node the interruption function took since that view was taken is left to it.
            try:
                n = self.cluster.get_node(seen.name)
            except ClusterError as exc:
                log.warning("could not start draining %s: %s", seen.name, exc)
                continue
            if n is None:
                continue
            state = self.states.read(n)
            draining = with_empty_since(start_drain(state, owner=Owner.DISRUPTION, reason=DRAIN_REASONS[reason],
                                                    at=started), None)
            try:
                # The record first: if the write fails nothing is cordoned, and if the function dies after the
                # cordon the next pass finds the record and continues the drain (never a cordon without one).
                self._write(n, state, draining, missing_ok=False)
            except (ClusterError, NotOwnedError) as exc:
                log.warning("could not start draining %s: %s", n.name, exc)
                continue
            try:
                self.cluster.add_taint(n.name, DISRUPTED_TAINT)
                self.cluster.cordon(n.name)
            except ClusterError as exc:
                log.warning("could not cordon %s (the next pass continues): %s", n.name, exc)
                report.draining.append(n.name)
                continue
            marked.append(n)
        for n in marked:
            fresh = self.cluster.get_node(n.name)
            if fresh is not None:
                self._drain(fresh, owned=owned, deadline=deadline, report=report)

    def _drain(self, node: Node, *, owned: set[str], deadline: float, report: PassReport) -> None:
        state = self.states.read(node)
        started = state.drain_started or self.clock.now()
        reason: Reason = REASON_OF_DRAIN.get(state.reason, "Underutilized")
        stop = min(deadline, self.clock.monotonic() + self.options.drain_seconds_per_pass)
        try:
            # Idempotent: a pass that wrote the record but died (or failed) before cordoning cordons here.
            self.cluster.add_taint(node.name, DISRUPTED_TAINT)
            self.cluster.cordon(node.name)
        except NotFoundError:
            return
        except ClusterError as exc:
            log.warning("could not cordon %s (the next pass continues): %s", node.name, exc)
            report.draining.append(node.name)
            return
        result = drain(node.name, cluster=self.cluster, clock=self.clock, deadline=stop, sleep=self.sleep)
        if result.evicted:
            self.sink.emit(PODS_EVICTED, len(result.evicted))
        by_pdb = [p for p in result.not_evicted if p.reason == "pdb"]
        if by_pdb:
            self.sink.emit(EVICTIONS_BLOCKED_BY_PDB, len(by_pdb))
        if result.throttled:
            self.sink.emit(EVICTIONS_THROTTLED, result.throttled)
        if result.complete:
            self._remove(node, reason, started=started, owned=owned, report=report)
            return
        waited = self.clock.now() - started
        stuck = "; ".join(f"{p.pod}: {p.reason} {p.message}".strip() for p in result.not_evicted[:5])
        if self._never_released(reason):
            grace = self._grace_period(node)
            if grace is not None and waited >= grace:
                self._force(node, reason, why=f"terminationGracePeriod {grace}s has passed ({stuck})")
                self._remove(node, reason, started=started, owned=owned, report=report)
                return
        elif waited >= self.options.blocked_drain_timeout:
            self._release(node, guard="PDB" if by_pdb else "Drain",
                          why=f"drain blocked for {int(waited)}s ({stuck})", report=report)
            return
        report.draining.append(node.name)
        log.info("drain of %s continues next pass: %s", node.name, stuck, extra={"node": node.name})
        self.cluster.record_event(node, reason="DisruptionBlocked", event_type="Warning",
                                  message=f"drain continues next pass: {stuck}")

    def _never_released(self, reason: Reason) -> bool:
        """Drains that are finished, never given back after ``blockedDrainTimeout``: Karpenter v1's forceful
        expiry, and the nodes of a removed NodePool (Karpenter deletes their NodeClaims)."""
        return reason == "NodePoolRemoved" or (reason == "Expired" and self.options.settings.forceful_expiry)

    def _grace_period(self, node: Node) -> float | None:
        pool = self.pools.get(node.node_pool or "")
        return None if pool is None or pool.termination_grace_period is None else float(pool.termination_grace_period)

    def _force(self, node: Node, reason: Reason, *, why: str) -> None:
        """Karpenter's termination once ``terminationGracePeriod`` is over: the pods a PDB or do-not-disrupt
        still keeps are deleted (no eviction), so the node can go."""
        deleted = 0
        for pod in self.cluster.pods(node_name=node.name):
            if not moves(pod):
                continue
            try:
                deleted += int(self.cluster.delete_pod(pod.namespace, pod.name, grace_seconds=0))
            except ClusterError as exc:
                log.warning("%s: could not delete pod %s of node %s: %s", reason, pod.key, node.name, exc)
        if deleted:
            self.sink.emit(PODS_EVICTED, deleted)
        log.warning("node %s (%s): %s; %d pod(s) deleted", node.name, reason, why, deleted,
                    extra={"node": node.name, "reason": reason})
        self.cluster.record_event(node, reason="DisruptionTerminating", event_type="Warning",
                                  message=f"{reason}: {why}; {deleted} pod(s) deleted without eviction")

    def _remove(self, node: Node, reason: Reason, *, started: float, owned: set[str], report: PassReport) -> None:
        iid = node.instance_id
        if iid is not None and iid not in owned and self._already_terminated(iid):
            # Killed between TerminateInstances and deleting the Node: finish the job, never uncordon a
            # dead node nor call it someone else's.
            self.cluster.delete_node(node.name, release_finalizers=self.release_finalizers)
            report.removed.append(node.name)
            log.info("node %s: instance %s already terminated; node deleted", node.name, iid,
                     extra={"node": node.name, "instanceId": iid})
            return
        if iid is None or iid not in owned:
            # decide() never picks such a node; a drain annotation put there by hand must not cost
            # someone else's instance.
            self._release(node, guard="NotOurs", why=f"instance {iid} is not this autoscaler's", report=report)
            return
        try:
            self.cloud.terminate([iid])
        except OwnershipError as exc:
            self._release(node, guard="NotOurs", why=str(exc), report=report)
            return
        except CloudError as exc:
            # One refused TerminateInstances must not end the pass: the node stays drained, cordoned and
            # recorded, and the next pass tries again.
            report.draining.append(node.name)
            report.notes.append(f"{node.name}: TerminateInstances failed ({exc.code or exc}); retried next pass")
            log.warning("terminating %s (%s) failed; retried next pass: %s", iid, node.name, exc,
                        extra={"node": node.name, "instanceId": iid, "code": exc.code})
            self.cluster.record_event(node, reason="DisruptionTerminateFailed", event_type="Warning",
                                      message=f"TerminateInstances {iid} failed: {exc}; retried next pass")
            return
        self.cluster.record_event(node, reason="DisruptionTerminating",
                                  message=f"{reason}: drained; instance {iid} terminated, node deleted")
        self.cluster.delete_node(node.name, release_finalizers=self.release_finalizers)
        report.removed.append(node.name)
        self.sink.emit(NODES_DISRUPTED, 1, **{REASON: reason})
        self.sink.emit(NODES_TERMINATED, 1, NodePool=node.node_pool or "unknown", Reason=reason)
        self.sink.emit(DRAIN_SECONDS, max(0.0, self.clock.now() - started))
        log.info("removed node %s (%s), instance %s terminated", node.name, reason, iid,
                 extra={"node": node.name, "reason": reason, "instanceId": iid})

    def _already_terminated(self, instance_id: str) -> bool:
        """Our instance, and EC2 already took it (shutting-down or terminated)."""
        try:
            found = self.cloud.describe_instances([instance_id])
        except CloudError:
            return False
        return any(i.state in ("shutting-down", "terminated")
                   and is_owned(i.tags, self.cluster_name, adopt_karpenter=self.options.adopt_karpenter)
                   for i in found)

    def _release(self, node: Node, *, guard: str, why: str, report: PassReport) -> None:
        """Give a node back to the scheduler: the disruption is abandoned."""
        self.cluster.remove_taint(node.name, key=DISRUPTED_TAINT.key, effect=DISRUPTED_TAINT.effect)
        try:
            self.cluster.uncordon(node.name)
        except ClusterError as exc:
            log.warning("could not uncordon %s: %s", node.name, exc)
        state = self.states.read(node)
        self._write(node, state, abandon(state))
        report.released.append(node.name)
        self.sink.emit(DISRUPTION_BLOCKED, 1, **{GUARD: guard})
        log.warning("disruption of %s abandoned: %s", node.name, why, extra={"node": node.name, "guard": guard})
        self.cluster.record_event(node, reason="DisruptionBlocked", event_type="Warning",
                                  message=f"disruption abandoned, node uncordoned: {why}")

    # ----- replacements ------------------------------------------------------------------------
    def _request_replacement(self, c: Candidate) -> str | None:
        """Ask the provisioner function for the candidate's replacement capacity (the same request the
        interruption function sends); without one configured, launch it here. None when requested,
        else why not."""
        if self.replacements is not None:
            event_id = f"disruption-{c.reason.lower()}-{'-'.join(c.nodes)}-{int(self.clock.now())}"
            # A static pool's replacement is the provisioner's count of the pool (the node being replaced
            # no longer counts): its pods are not planned as leaving, the request only wakes it up.
            leaving_nodes = tuple(n for n in c.nodes if not self._static(n))
            try:
                if self.replacements.request_replacement(source="disruption", nodes=leaving_nodes, unavailable=(),
                                                         event_id=event_id):
                    return None
            except CloudError as exc:
                return f"asking the provisioner failed: {exc}"
        return self.launch_replacements(c)

    def launch_replacements(self, c: Candidate) -> str | None:
        """Launch the candidate's replacement nodes directly (the provisioner's own steps)."""
        for launch in c.replacements:
            request = fleet_request_for(launch, cluster_name=self.cluster_name, node_pools=self.pools,
                                        node_classes=self.node_classes)
            result = self.cloud.launch(request)
            if not result.launched:
                errors = "; ".join(f"{e.code}: {e.message}" for e in result.errors[:3]) or "nothing launched"
                return f"launch for NodePool {launch.node_pool} failed ({errors})"
            log.info("launched replacement %s for %s", result.launched[0].instance_id, ", ".join(c.nodes))
        return None

    def _check_replacements(self, waiting: list[Node], *, owned: set[str], deadline: float,
                            report: PassReport) -> None:
        """Nodes that requested replacement capacity in the same pass wait for it together: once their
        pods fit on registered nodes without any launch, their drain starts."""
        if not waiting:
            return
        groups: dict[float, list[Node]] = defaultdict(list)
        for n in waiting:
            groups[self.states.read(n).replacement_requested or 0.0].append(n)
        snapshot = self._snapshot()
        now = self.clock.now()
        for requested, group in sorted(groups.items()):
            names = [n.name for n in group]
            reason: Reason = REASON_OF_DRAIN.get(self.states.read(group[0]).reason, "Underutilized")
            if self._replaced(snapshot, group):
                log.info("replacement for %s has registered; draining", ", ".join(names))
                self._start_drains(group, reason, owned=owned, deadline=deadline, report=report)
            elif now - requested >= self.options.replacement_timeout:
                for n in group:
                    state = self.states.read(n)
                    self._write(n, state, abandon(state))
                    self.cluster.record_event(n, reason="DisruptionBlocked", event_type="Warning",
                                              message="replacement capacity did not register in time; "
                                                      "disruption abandoned")
                report.notes.append(f"{', '.join(names)}: replacement did not register in time; abandoned")
            else:
                report.replacing.extend(names)
                for n in group:
                    self.cluster.record_event(n, reason="DisruptionWaitingReadiness",
                                              message="waiting for replacement capacity to register")

    def _static(self, node_name: str) -> bool:
        node = self.cluster.get_node(node_name)
        pool = self.pools.get(node.node_pool) if node is not None else None
        return pool is not None and pool.is_static

    def _replaced(self, snapshot: PlanInput, group: list[Node]) -> bool:
        """Whether the replacement for ``group`` has registered: for a static pool, it has as many ready
        nodes that stay as ``replicas``; otherwise the group's pods fit on registered nodes."""
        pool = self.pools.get(group[0].node_pool)
        if pool is not None and pool.is_static:
            ready = [n for n in snapshot.nodes if n.node_pool == pool.name and n.ready
                     and not leaving(n)]
            return len(ready) >= (pool.replicas or 0)
        return simulate(snapshot, [n.name for n in group]).fits

    # ----- repair ------------------------------------------------------------------------------
    def _repair(self, node: Node, c: Candidate, *, owned: set[str], report: PassReport) -> None:
        """Karpenter's forceful repair: the record, taint and cordon, then every pod deleted at once (no
        eviction, so neither PDBs nor ``do-not-disrupt`` hold it: the node is broken and its pods are
        not running anyway), the instance terminated and the Node deleted. Its pods go pending and the
        provisioner gives them new capacity."""
        state = self.states.read(node)
        started = self.clock.now()
        try:
            self._write(node, state, with_empty_since(start_drain(state, owner=Owner.DISRUPTION, reason="unhealthy",
                                                                  at=started), None), missing_ok=False)
            self.cluster.add_taint(node.name, DISRUPTED_TAINT)
            self.cluster.cordon(node.name)
        except (ClusterError, NotOwnedError) as exc:
            log.warning("could not start repairing %s: %s", node.name, exc)
            return
        self.cluster.record_event(node, reason="DisruptionTerminating", event_type="Warning",
                                  message=f"Unhealthy: {c.note}; pods deleted and node replaced (repair)")
        deleted = 0
        for pod in self.cluster.pods(node_name=node.name):
            if not moves(pod) and not pod.is_daemonset_pod:
                continue
            try:
                deleted += int(self.cluster.delete_pod(pod.namespace, pod.name, grace_seconds=0))
            except ClusterError as exc:
                log.warning("repair of %s: could not delete pod %s: %s", node.name, pod.key, exc)
        if deleted:
            self.sink.emit(PODS_EVICTED, deleted)
        self._remove(node, "Unhealthy", started=started, owned=owned, report=report)

    # ----- helpers -----------------------------------------------------------------------------
    def _write(self, node: Node, old: NodeState, new: NodeState, *, missing_ok: bool = True) -> None:
        """Store this function's part of the node's record; failures are logged (or raised with
        ``missing_ok=False``, where the caller must not go on without the record)."""
        try:
            self.states.write(node, old, new, by=Owner.DISRUPTION)
        except (ClusterError, NotOwnedError) as exc:
            if not missing_ok:
                raise
            log.warning("could not record the state of node %s: %s", node.name, exc)

