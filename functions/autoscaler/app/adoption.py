"""Nodes Karpenter launched for this cluster, as the disruption function sees them. Adopted
(``migration.adoptKarpenterNodes``, docs/migration.md): their instances count as ours and Karpenter's
``karpenter.sh/termination`` finalizer is removed when their Node is deleted. Not adopted: the pass leaves
them alone, with no Blocked entry or Event per node and pass, one log line when the set of such nodes
changes and the ``KarpenterNodesNotAdopted`` gauge."""

from __future__ import annotations

import logging

from autoscaler.app.ports import CloudPort
from autoscaler.domain.keys import KARPENTER_TERMINATION_FINALIZER
from autoscaler.domain.models import Node
from autoscaler.metrics_catalog import KARPENTER_NODES_NOT_ADOPTED, MetricsSink

log = logging.getLogger("autoscaler.disruption")


class KarpenterNodes:
    """Build once per container: it remembers which unadopted nodes it has logged, so the log line is
    written when the set changes, not every minute."""

    def __init__(self, *, cloud: CloudPort, sink: MetricsSink, adopt: bool) -> None:
        self.cloud, self.sink, self.adopt = cloud, sink, adopt
        self._logged: frozenset[str] = frozenset()

    @property
    def release_finalizers(self) -> tuple[str, ...]:
        """Finalizers removed from a Node the autoscaler deletes: Karpenter's, once its nodes are adopted."""
        return (KARPENTER_TERMINATION_FINALIZER,) if self.adopt else ()

    def sort(self, nodes: list[Node], *, owned: set[str]) -> set[str]:
        """Adopted Karpenter nodes' instances are added to ``owned``; the names of unadopted ones are
        returned for the pass to leave alone. EC2 is asked only when some node of a NodePool (or v0.2x
        Provisioner) runs on an instance that is not ours."""
        foreign = {n.instance_id: n for n in nodes if n.node_pool and n.instance_id and n.instance_id not in owned}
        karpenter = {i.instance_id for i in self.cloud.karpenter_instances()} & set(foreign) if foreign else set()
        if self.adopt:
            owned |= karpenter
            return set()
        names = frozenset(foreign[i].name for i in karpenter)
        self.sink.emit(KARPENTER_NODES_NOT_ADOPTED, len(names))
        if names and names != self._logged:
            shown = ", ".join(sorted(names)[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
            log.info("%d node(s) launched by Karpenter are left alone (not disrupted or consolidated): %s; set "
                     "migration.adoptKarpenterNodes: true once Karpenter is scaled to zero (docs/migration.md)",
                     len(names), shown, extra={"nodes": sorted(names)})
        self._logged = names
        return set(names)
