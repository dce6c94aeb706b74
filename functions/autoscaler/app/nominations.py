"""Nominations: the pending pods a pass placed on existing nodes, remembered by the warm container until
they bind or the nomination expires (Karpenter's cluster state ``NominateNode``).

Why: between a pass that places pods on an existing node and kube-scheduler binding them (seconds; longer
after a 50,000-pod burst), the pods are still pending. A pass in that gap would plan them again, and the
topology spread of the others would then see the existing nodes' domains without them and launch nodes
nobody needs. So a nominated pod counts as running on its node (its requests on the node, its labels in
the node's topology domains) until it binds, leaves, or ``NOMINATION_SECONDS`` pass: then kube-scheduler
has evidently put it elsewhere or not at all, and planning it afresh is right. A new container starts with
none: its first pass plans every pending pod, as any pass without this memory did.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from autoscaler.domain.models import Pod

# kube-scheduler binds a pod that fits a node within seconds of the nomination; a minute covers the passes
# of a burst (a scheduled pass runs every minute) without holding a pod the scheduler rejected for long.
NOMINATION_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class _Nomination:
    uid: str
    node: str
    until: float


@dataclass
class Nominations:
    """One container's nominations (the provisioner's; its passes run one at a time)."""

    seconds: float = NOMINATION_SECONDS
    _by_pod: dict[str, _Nomination] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self._by_pod)

    def apply(self, pods: Sequence[Pod], nodes: Collection[str], *, now: float) -> list[Pod]:
        """``pods`` with every pending pod still nominated placed on its node (``node_name`` set, as
        kube-scheduler will bind it). Forgets the nominations whose pod bound, left or was recreated (another
        uid), whose node is not among ``nodes`` (gone or leaving), or that expired."""
        if not self._by_pod:
            return list(pods)
        kept: dict[str, _Nomination] = {}
        out = []
        for pod in pods:
            held = self._by_pod.get(pod.key) if pod.node_name is None else None
            if held is not None and held.until > now and held.node in nodes and held.uid == pod.uid:
                kept[pod.key] = held
                out.append(replace(pod, node_name=held.node))
            else:
                out.append(pod)
        self._by_pod = kept
        return out

    def remember(self, placed: Mapping[str, str], pending: Mapping[str, Pod], nodes: Collection[str], *,
                 now: float) -> None:
        """Nominate each pending pod ``placed`` on one of ``nodes`` (a plan's ``existing``: in-flight instances
        are left out, their node claims already hold their pods)."""
        until = now + self.seconds
        for key, node in placed.items():
            pod = pending.get(key)
            if pod is not None and node in nodes:
                self._by_pod[key] = _Nomination(uid=pod.uid, node=node, until=until)
