"""Reserved capacity first: pending pods fill the capacity reservations their NodePools may use before
anything is planned on on-demand or spot, as Karpenter's ~0 price for ``reserved`` offerings makes it.

First rounds offer only the reservations' instance types and zones to the NodePools that allow
``reserved``; each node a round opens takes one slot of a reservation with room (one whose type it
fits, in its zone) or is dropped, and another round runs while reservations of other types still have
room. The last plan is the ordinary one with those reserved nodes as in-flight capacity holding their
pods, so everything else (other pods, the pools' limits, spread) counts them; a pod it puts on a
reserved node's spare room goes with that node.

Only pods whose requirements allow ``karpenter.sh/capacity-type: reserved`` take part in the reserved
rounds; there a pod that requires ``reserved`` is planned on the pools' on-demand stand-in.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import replace

from autoscaler.domain.keys import CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, ZONE_LABEL
from autoscaler.domain.models import NodeSelectorTerm, Pod, Requirement
from autoscaler.domain.nodepool import NodePool, requirement_allows
from autoscaler.domain.plan import InFlightNode, Launch, Plan, PlanInput, Unschedulable
from autoscaler.domain.reservations import CapacityReservation
from autoscaler.domain.scheduling.planner import plan
from autoscaler.domain.scheduling.prepared import Prepared

_SLOT = "reserved-slot-"  # the synthetic in-flight ids of the first plan's nodes


def _restricted(pool: NodePool, reservations: list[CapacityReservation]) -> NodePool:
    types = tuple(sorted({reservation.instance_type for reservation in reservations}))
    zones = tuple(sorted({reservation.zone for reservation in reservations}))
    return pool.model_copy(update={"requirements": (*pool.requirements, Requirement(INSTANCE_TYPE_LABEL, "In", types),
                                                    Requirement(ZONE_LABEL, "In", zones))})


_STAND_IN = Requirement(CAPACITY_TYPE_LABEL, "In", ("on-demand",))


def _for_reserved(pod: Pod) -> Pod | None:
    """The pod as the reserved rounds see it: None when it does not allow ``reserved``; its
    capacity-type requirements on the on-demand stand-in when it does."""
    mentions = CAPACITY_TYPE_LABEL in pod.node_selector or any(
        requirement.key == CAPACITY_TYPE_LABEL for term in pod.required_node_affinity
        for requirement in term.requirements)
    if not mentions:
        return pod
    selector = dict(pod.node_selector)
    if CAPACITY_TYPE_LABEL in selector:
        if selector[CAPACITY_TYPE_LABEL] != "reserved":
            return None
        selector[CAPACITY_TYPE_LABEL] = "on-demand"
    terms = [NodeSelectorTerm(tuple(_STAND_IN if requirement.key == CAPACITY_TYPE_LABEL else requirement
                                    for requirement in term.requirements))
             for term in pod.required_node_affinity
             if all(requirement_allows(requirement, "reserved") for requirement in term.requirements
                    if requirement.key == CAPACITY_TYPE_LABEL)]
    if pod.required_node_affinity and not terms:
        return None
    return replace(pod, node_selector=selector, required_node_affinity=tuple(terms))


def _slot(launch: Launch, reservations: tuple[CapacityReservation, ...],
          room: Mapping[str, int]) -> CapacityReservation | None:
    for name in launch.instance_types:
        for reservation in reservations:
            if reservation.instance_type == name and room.get(reservation.reservation_id, 0) > 0 and (
                    not launch.zones or reservation.zone in launch.zones):
                return reservation
    return None


def _reserved_only(result: Plan, pools: Mapping[str, NodePool]) -> Plan:
    """A NodePool allowing only ``reserved`` is planned on on-demand offerings; what did not fit a
    reservation cannot launch: its pods are unschedulable, saying so."""
    launches = []
    for launch in result.launches:
        pool = pools.get(launch.node_pool)
        if launch.capacity_type == "reserved" or pool is None or pool.capacity_types:
            launches.append(launch)
            continue
        result.unschedulable.extend(Unschedulable(key, (
            f"NodePool {pool.name} allows only karpenter.sh/capacity-type reserved and no capacity reservation "
            f"of EC2NodeClass {pool.node_class_ref} has room for it")) for key in launch.pods)
    result.launches = launches
    return result


def plan_reserved_first(snapshot: PlanInput, *, unavailable: Collection[tuple[str, str, str]] = (),
                        timer: Callable[[], float] | None = None, prepared: Prepared | None = None) -> Plan:
    """``plan`` with ``snapshot.reservations`` used first (see the module docstring). Without usable
    reservations it is exactly ``plan``. ``prepared``: as for ``plan``."""
    pools = {pool.name: pool for pool in snapshot.node_pools}
    room = {reservation.reservation_id: reservation.available for listed in snapshot.reservations.values()
            for reservation in listed}
    if not any(pod.is_pending for pod in snapshot.pods):
        return _reserved_only(plan(snapshot, unavailable=unavailable, timer=timer, prepared=prepared), pools)
    kept: list[Launch] = []
    slots: list[InFlightNode] = []
    spent = 0.0
    # Only when a reservation has room (the rounds below): it visits every pod.
    eligible = [seen for pod in snapshot.pods if (seen := _for_reserved(pod) if pod.is_pending else pod) is not None
                ] if any(room.values()) else []
    # One round per reservation at most: a round sizes its nodes to one type, so a reservation of another
    # type still with room gets the next round (its nodes planned around the slots taken so far).
    for _ in range(len(room)):
        restricted = []
        for pool in snapshot.node_pools:
            usable = [reservation for reservation in snapshot.reservations.get(pool.node_class_ref, ())
                      if room[reservation.reservation_id] > 0]
            if usable and pool.allows_reserved and not pool.is_static:
                restricted.append(_restricted(pool, usable))
        if not restricted:
            break
        first = plan(replace(snapshot, node_pools=restricted, pods=eligible,
                             in_flight=[*snapshot.in_flight, *slots]), unavailable=unavailable, timer=timer,
                     prepared=prepared)
        spent += first.solve_seconds
        taken, placed = len(kept), {key for launch in kept for key in launch.pods}
        for launch in first.launches:
            slot = _slot(launch, snapshot.reservations.get(launch.node_class, ()), room)
            if slot is None or placed.intersection(launch.pods):
                continue  # no reservation left for it: its pods are planned again below
            room[slot.reservation_id] -= 1
            kept.append(replace(launch, capacity_type="reserved", instance_types=(slot.instance_type,),
                                zones=(slot.zone,), hourly_price=0.0,
                                labels={**launch.labels, CAPACITY_TYPE_LABEL: "reserved", ZONE_LABEL: slot.zone}))
            # Labelled as the reserved rounds see it (the on-demand stand-in); the last plan relabels it.
            slots.append(InFlightNode(instance_id=f"{_SLOT}{len(slots)}", node_pool=launch.node_pool,
                                      instance_type=slot.instance_type, zone=slot.zone,
                                      capacity_type=launch.capacity_type,
                                      labels={**launch.labels, ZONE_LABEL: slot.zone}, taints=launch.taints,
                                      pod_keys=launch.pods))
        if len(kept) == taken or len(kept) - taken == len(first.launches):
            break  # nothing more fits a reservation, or every pending pod has a reserved node
    if not kept:
        return _reserved_only(plan(snapshot, unavailable=unavailable, timer=timer, prepared=prepared), pools)
    # The last plan sees the pods as they are: the reserved nodes carry the capacity type they will have.
    final_slots = [replace(flight, capacity_type="reserved", labels={**flight.labels, CAPACITY_TYPE_LABEL: "reserved"})
                   for flight in slots]
    rest = plan(replace(snapshot, in_flight=[*snapshot.in_flight, *final_slots]), unavailable=unavailable,
                timer=timer, prepared=prepared)
    reserved_pods = {key for launch in kept for key in launch.pods}
    extra: dict[int, list[str]] = {}
    existing = {}
    for key, node in rest.existing.items():
        if node.startswith(_SLOT):
            if key not in reserved_pods:  # spare room of a reserved node: the pod goes with its launch
                extra.setdefault(int(node[len(_SLOT):]), []).append(key)
        elif key not in reserved_pods:
            existing[key] = node
    kept = [replace(launch, pods=(*launch.pods, *extra[i])) if i in extra else launch for i, launch in enumerate(kept)]
    reserved_pods.update(key for keys in extra.values() for key in keys)
    others = []
    for launch in rest.launches:
        # A pod of a reserved node is never planned twice, whatever the last plan made of it.
        pods = tuple(key for key in launch.pods if key not in reserved_pods)
        if pods:
            others.append(replace(launch, pods=pods))
    rest.launches = [*kept, *others]
    rest.existing = existing
    rest.unschedulable = [unplaced for unplaced in rest.unschedulable if unplaced.pod not in reserved_pods]
    rest.solve_seconds += spent
    return _reserved_only(rest, pools)
