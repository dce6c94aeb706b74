"""The node-state record: who started what on a node, when and why — the only state the product keeps
about a node, stored in the node's annotations so any Lambda container can continue another's work.

Every piece has one owner:

- ``owner``, ``reason``, ``drain-started`` and ``replacement-requested`` belong to the service that
  started disrupting the node: the interruption function (spot warning, rebalance, scheduled change,
  state change) or the disruption function (empty, expired, underutilized, drifted, unhealthy,
  overprovisioned, capacityBlockExpiring). A service acts only on
  nodes it owns; the one take-over allowed is interruption over disruption (EC2 reclaiming the
  instance beats a consolidation in progress).
- ``drain-holder`` and ``drain-held-until`` belong to the interruption function: the invocation carrying
  the drain out and when its lease ends. Two invocations may handle the same interruption at once (SQS
  delivers at least once); only the holder evicts and asks for a replacement. The lease ends with the
  holder's invocation, so a holder that dies leaves nothing cordoned for ever: the message's retry takes
  the node over once the lease has passed.
- ``replacement-provisioned`` belongs to the provisioner: the request time it has planned capacity for.
- ``empty-since`` belongs to the disruption function: since when it has seen the node empty.

Pure: ``read_state`` parses annotations (including the wave-1 annotations, whose owner is inferred from
their reason), ``annotations_for`` writes a record back; ``app/node_state.py`` is the one module that
reads and writes them on the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from autoscaler.domain.keys import (
    DRAIN_HELD_UNTIL_ANNOTATION,
    DRAIN_HOLDER_ANNOTATION,
    DRAIN_REASON_ANNOTATION,
    DRAIN_STARTED_ANNOTATION,
    EMPTY_SINCE_ANNOTATION,
    OWNER_ANNOTATION,
    REPLACEMENT_PROVISIONED_ANNOTATION,
    REPLACEMENT_REQUESTED_ANNOTATION,
)


class Owner(StrEnum):
    PROVISIONER = "provisioner"
    INTERRUPTION = "interruption"
    DISRUPTION = "disruption"


# The disruption function's reasons, as written in ``drain-reason``; every other reason is an interruption's.
DISRUPTION_REASONS = frozenset({"empty", "expired", "underutilized", "drifted", "unhealthy", "overprovisioned",
                                "capacityBlockExpiring"})


@dataclass(frozen=True, slots=True)
class NodeState:
    """One node's record. Times are epoch seconds; None means not started."""

    owner: Owner | None = None
    reason: str = ""
    drain_started: float | None = None
    replacement_requested: float | None = None
    replacement_provisioned: float | None = None
    empty_since: float | None = None
    holder: str = ""  # the interruption invocation carrying the drain out ("" none)
    held_until: float | None = None  # when its lease ends

    @property
    def in_progress(self) -> bool:
        """A disruption of this node has started (a drain or a replacement request)."""
        return self.drain_started is not None or self.replacement_requested is not None

    @property
    def awaiting_replacement(self) -> bool:
        """Replacement capacity was asked for and the provisioner has not planned it yet: the node's pods
        count as leaving it."""
        return self.replacement_requested is not None and (
            self.replacement_provisioned is None or self.replacement_provisioned < self.replacement_requested)

    def held_by_another(self, holder: str, *, now: float) -> bool:
        """Another interruption invocation holds the drain and its lease has not ended."""
        return (self.owner is Owner.INTERRUPTION and bool(self.holder) and self.holder != holder
                and self.held_until is not None and now < self.held_until)

    def may_be_acted_on_by(self, owner: Owner) -> bool:
        """Whether ``owner`` may start, continue or abandon a disruption of this node."""
        return self.owner in (None, owner) or (owner is Owner.INTERRUPTION and self.owner is Owner.DISRUPTION)


def _epoch(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def read_state(annotations: Mapping[str, str]) -> NodeState:
    """The record in a node's annotations. A wave-1 node has no ``owner``: a disruption reason
    (empty, expired, underutilized) means the disruption function, any other the interruption function."""
    reason = annotations.get(DRAIN_REASON_ANNOTATION, "")
    drain_started = _epoch(annotations.get(DRAIN_STARTED_ANNOTATION))
    requested = _epoch(annotations.get(REPLACEMENT_REQUESTED_ANNOTATION))
    owner: Owner | None
    try:
        owner = Owner(annotations.get(OWNER_ANNOTATION, ""))
    except ValueError:
        owner = None
    if owner is None and (drain_started is not None or requested is not None):
        owner = Owner.DISRUPTION if reason in DISRUPTION_REASONS else Owner.INTERRUPTION
    return NodeState(owner=owner, reason=reason, drain_started=drain_started, replacement_requested=requested,
                     replacement_provisioned=_epoch(annotations.get(REPLACEMENT_PROVISIONED_ANNOTATION)),
                     empty_since=_epoch(annotations.get(EMPTY_SINCE_ANNOTATION)),
                     holder=annotations.get(DRAIN_HOLDER_ANNOTATION, ""),
                     held_until=_epoch(annotations.get(DRAIN_HELD_UNTIL_ANNOTATION)))


def awaits_replacement(annotations: Mapping[str, str]) -> bool:
    """``read_state(annotations).awaiting_replacement``, without reading the whole record of the (many)
    nodes nobody asked to replace."""
    return bool(annotations.get(REPLACEMENT_REQUESTED_ANNOTATION)) and read_state(annotations).awaiting_replacement


def _text(value: float | None) -> str | None:
    return None if value is None else str(int(value))


def annotations_for(state: NodeState) -> dict[str, str | None]:
    """The annotations that store ``state`` (None removes one), for a merge patch."""
    return {
        OWNER_ANNOTATION: state.owner.value if state.owner is not None and state.in_progress else None,
        DRAIN_REASON_ANNOTATION: state.reason or None if state.in_progress else None,
        DRAIN_STARTED_ANNOTATION: _text(state.drain_started),
        REPLACEMENT_REQUESTED_ANNOTATION: _text(state.replacement_requested),
        REPLACEMENT_PROVISIONED_ANNOTATION: _text(state.replacement_provisioned),
        EMPTY_SINCE_ANNOTATION: _text(state.empty_since),
        DRAIN_HOLDER_ANNOTATION: state.holder or None if state.in_progress else None,
        DRAIN_HELD_UNTIL_ANNOTATION: _text(state.held_until) if state.in_progress and state.holder else None,
    }


def start_drain(state: NodeState, *, owner: Owner, reason: str, at: float) -> NodeState:
    """``owner`` drains the node (a drain already started keeps its start time; a take-over changes the
    owner and reason)."""
    return replace(state, owner=owner, reason=reason or state.reason,
                   drain_started=state.drain_started if state.drain_started is not None else at)


def hold(state: NodeState, *, holder: str, until: float) -> NodeState:
    """The interruption invocation ``holder`` carries the drain out until ``until`` (epoch seconds)."""
    return replace(state, holder=holder, held_until=until)


def release(state: NodeState) -> NodeState:
    """The holder's invocation is ending with the drain unfinished: the next invocation may take it at once."""
    return replace(state, holder="", held_until=None)


def request_replacement(state: NodeState, *, owner: Owner, reason: str, at: float) -> NodeState:
    """``owner`` asked the provisioner for capacity to replace the node at ``at``."""
    return replace(state, owner=owner, reason=reason or state.reason, replacement_requested=at)


def abandon(state: NodeState) -> NodeState:
    """The disruption is given up: the node goes back to the scheduler (the owner's pieces are cleared)."""
    return replace(state, owner=None, reason="", drain_started=None, replacement_requested=None, holder="",
                   held_until=None)


def mark_provisioned(state: NodeState) -> NodeState:
    """The provisioner has planned capacity for the node's current replacement request."""
    return replace(state, replacement_provisioned=state.replacement_requested)


def with_empty_since(state: NodeState, at: float | None) -> NodeState:
    """The disruption function's observation of since when the node is empty (None: not empty)."""
    return replace(state, empty_since=at)
