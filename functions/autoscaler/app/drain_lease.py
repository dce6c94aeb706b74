"""Which interruption invocation holds a node's drain: the drain record's holder and lease
(``domain/node_state.py``), taken and released here through the one writer of node state.

Two invocations may handle the same interruption at once (SQS delivers at least once). Exactly one holds
the node: the write that takes it is conditional on the resourceVersion read (the early reader that loses
gets 409 and reads again), and a reader that comes after the winner wrote sees another holder. Only the
holder evicts and asks for a replacement. A lease ends with its invocation: released when the invocation
ends (a drain that ran out of time, a failed message), or at ``until`` when the holder died, so a retried
message continues the drain and nothing is left cordoned for ever.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from autoscaler.app.node_state import NodeStates, NotOwnedError
from autoscaler.app.ports import CloudError, ClusterError, ClusterPort, ConflictError, NotFoundError
from autoscaler.domain.models import Node
from autoscaler.domain.node_state import Owner, hold, release, start_drain

# Conditional writes of the drain record retried after a conflict caused by an unrelated write.
_TAKE_ATTEMPTS = 5
# A caller that names no lease holds a drain this long: Lambda's longest invocation.
DEFAULT_LEASE_SECONDS = 900.0


@dataclass(frozen=True, slots=True)
class DrainLease:
    """Who carries a drain out and until when (epoch seconds): one interruption invocation, until its end.
    ``taken``: the nodes it took, released when the invocation ends (``DrainLeases.release``)."""

    holder: str
    until: float
    taken: set[str] = field(default_factory=set, compare=False)


class DrainLeases:
    """Takes and releases drain records for the interruption function."""

    def __init__(self, cluster: ClusterPort, states: NodeStates) -> None:
        self._cluster = cluster
        self._states = states

    def take(self, node: Node, *, reason: str, lease: DrainLease, now: float) -> bool:
        """Hold the node's drain for ``lease``; False when another invocation holds it. The record goes
        before the taint: a function stopped in between leaves a record (the retry continues) and never a
        taint without one (which the disruption pass would give back). A node the disruption function was
        draining is taken over: EC2 reclaims it anyway. A conflict from any other write (a kubelet status
        update) reads the node again and retries."""
        for _ in range(_TAKE_ATTEMPTS):
            state = self._states.read(node)
            if state.held_by_another(lease.holder, now=now):
                return False
            if (state.drain_started is not None and state.owner is Owner.INTERRUPTION
                    and state.holder == lease.holder):
                return True  # this invocation took it already (the cordon pass, then the drain)
            taken = hold(start_drain(state, owner=Owner.INTERRUPTION, reason=reason, at=now),
                         holder=lease.holder, until=lease.until)
            try:
                self._states.write(node, state, taken, by=Owner.INTERRUPTION, conditional=True)
                lease.taken.add(node.name)
                return True
            except ConflictError:
                fresh = self._cluster.get_node(node.name)
                if fresh is None:
                    raise NotFoundError(f"node {node.name} was deleted", status=404) from None
                node = fresh
        raise ConflictError(f"node {node.name}: kept changing while its drain record was written", status=409)

    def release(self, lease: DrainLease) -> None:
        """The invocation holding ``lease`` ends: every drain it still holds may be taken by the next one (its
        message's retry) at once, whether it finished, failed or ran out of time. Best effort: a lease not
        released ends at ``until`` anyway."""
        for name in sorted(lease.taken):
            with contextlib.suppress(CloudError, ClusterError):
                self.release_node(name, lease)
        lease.taken.clear()

    def release_node(self, name: str, lease: DrainLease) -> None:
        """End ``lease`` on one node (it stays cordoned): the next invocation need not wait for it."""
        node = self._cluster.get_node(name)
        state = self._states.read(node) if node is not None else None
        if node is None or state is None or state.holder != lease.holder:
            return
        with contextlib.suppress(NotFoundError, NotOwnedError, ConflictError):
            self._states.write(node, state, release(state), by=Owner.INTERRUPTION, conditional=True)
