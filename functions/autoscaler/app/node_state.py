"""The one place node-state records (``domain/node_state.py``) are read from and written to nodes.

A write patches only the annotations whose value changes, so a service never overwrites a piece of
state it does not own (the provisioner's ``replacement-provisioned`` survives the interruption
function's update of its own pieces, and the other way round). A write by a service that may not act
on the node (``NodeState.may_be_acted_on_by``) is refused with ``NotOwnedError`` before any request.
A write that takes a node (the interruption function's drain record) is conditional on the
resourceVersion the record was read at, so two concurrent invocations cannot both take it.
"""

from __future__ import annotations

from autoscaler.app.ports import ClusterPort
from autoscaler.domain.models import Node
from autoscaler.domain.node_state import NodeState, Owner, annotations_for, read_state


class NotOwnedError(RuntimeError):
    """A service tried to change the disruption state of a node another service owns."""


class NodeStates:
    """Reads and writes node-state records through the cluster port."""

    def __init__(self, cluster: ClusterPort) -> None:
        self._cluster = cluster

    @staticmethod
    def read(node: Node) -> NodeState:
        return read_state(node.annotations)

    def write(self, node: Node | str, old: NodeState, new: NodeState, *, by: Owner,
              conditional: bool = False) -> bool:
        """Store ``new`` over ``old`` on the node; True if anything changed. Raises ``NotOwnedError``
        when ``by`` may not act on the node, NotFoundError for a missing node and ClusterError when the
        API refuses. ``conditional`` (``node`` as read): the patch carries the node's resourceVersion, so of
        two writers that read the same record exactly one succeeds and the other gets ConflictError."""
        name = node if isinstance(node, str) else node.name
        if _owners_part(new) != _owners_part(old) and not old.may_be_acted_on_by(by):
            raise NotOwnedError(f"node {name}: its disruption belongs to the {old.owner} function, not the {by}")
        before, after = annotations_for(old), annotations_for(new)
        patch = {k: v for k, v in after.items() if before.get(k) != v}
        if not patch:
            return False
        version = node.resource_version if conditional and isinstance(node, Node) else ""
        self._cluster.annotate_node(name, patch, resource_version=version)
        return True


def _owners_part(state: NodeState) -> tuple[object, ...]:
    """The pieces of a record that belong to the service disrupting the node."""
    return (state.owner, state.reason, state.drain_started, state.replacement_requested)
