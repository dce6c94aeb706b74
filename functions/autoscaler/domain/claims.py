"""Node claims: the durable record of a launch, written *before* CreateFleet is called.

Karpenter writes a NodeClaim to the API server before it launches and derives in-flight capacity from
it rather than from EC2's eventually consistent views; a claim here is the same promise. One claim is
one node: its own id, the pods planned onto it, what the planner asked for and, once EC2 answered, the
instance it got. A claim lives from just before CreateFleet until its instance registers as a Node (the
Node then counts itself) or is gone.

``reconcile_claims`` is the pure decision every pass makes over the stored claims, the instances EC2
lists and the registered Nodes: which claims count as in-flight capacity, which learnt their instance
from its tags, which launch must be resumed (the pass that wrote them died, or lost CreateFleet's
response), and which are finished.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from autoscaler.domain.fleet import GOING_AWAY_STATES, CloudInstance
from autoscaler.domain.keys import CAPACITY_TYPE_LABEL, NODECLAIM_TAG, NODEPOOL_LABEL, NODEPOOL_TAG
from autoscaler.domain.models import CapacityType, Taint, TaintEffect
from autoscaler.domain.plan import InFlightNode, Launch

ClaimState = Literal["launching", "launched"]

# A "launching" claim younger than this may still be in the hands of the pass that wrote it (its
# CreateFleet call takes seconds, and several groups run one after another): it counts as capacity
# and nobody touches it. Older, its launch is resumed with the same client tokens.
LAUNCH_SETTLE_SECONDS = 60.0
# A claim still "launching" this long after it was written is given up: had EC2 launched for it, the
# instance would have been listed with the claim's tag long ago (EC2's views lag by seconds).
LAUNCH_GIVE_UP_SECONDS = 600.0
# How long a claim stays after its launch even if EC2 never lists the instance (it then is gone).
CLAIM_TTL_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class Claim:
    """One planned node. ``group`` is the claim id of the first node launched by the same CreateFleet
    call (its client tokens derive from it); ``group_size`` is that call's node count."""

    claim_id: str
    group: str
    group_size: int
    node_pool: str
    node_class: str
    capacity_types: tuple[str, ...]  # preference order; the first is the planner's choice
    instance_types: tuple[str, ...]
    zones: tuple[str, ...]
    pods: tuple[str, ...]
    created_at: float
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    startup_taints: tuple[Taint, ...] = ()
    hourly_price: float = 0.0
    state: ClaimState = "launching"
    instance_id: str = ""
    instance_type: str = ""
    zone: str = ""
    capacity_type: str = ""
    # The planned fallback types per other capacity type (Launch.fallback_instance_types): a resumed launch
    # must send exactly what was first sent under the same client tokens.
    fallback_instance_types: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def launched(self, *, instance_id: str, instance_type: str, zone: str, capacity_type: str) -> Claim:
        return replace(self, state="launched", instance_id=instance_id, instance_type=instance_type, zone=zone,
                       capacity_type=capacity_type)

    def as_launch(self) -> Launch:
        """The planned node again (to resume its launch with the same parameters)."""
        return Launch(node_pool=self.node_pool, node_class=self.node_class, capacity_type=self.capacity_types[0],
                      zones=self.zones, instance_types=self.instance_types, pods=self.pods, labels=dict(self.labels),
                      taints=self.taints, startup_taints=self.startup_taints, hourly_price=self.hourly_price,
                      capacity_types=self.capacity_types, fallback_instance_types=dict(self.fallback_instance_types))

    def in_flight(self) -> InFlightNode:
        """This claim as the planner's in-flight capacity: the instance EC2 gave it, or before that the
        cheapest type planned (every planned type fits its pods) in its zone when it was pinned to one."""
        if self.state == "launched":
            it, zone, ct = self.instance_type, self.zone, self.capacity_type
        else:
            it, zone, ct = self.instance_types[0], self.zones[0] if len(self.zones) == 1 else "", self.capacity_types[0]
        return InFlightNode(instance_id=self.instance_id or f"claim/{self.claim_id}", node_pool=self.node_pool,
                            instance_type=it, zone=zone, capacity_type=ct,
                            labels={**self.labels, NODEPOOL_LABEL: self.node_pool, CAPACITY_TYPE_LABEL: ct},
                            taints=self.taints, launched_at=self.created_at, pod_keys=self.pods,
                            may_be=() if self.state == "launched" else self._may_be())

    def instance(self) -> CloudInstance | None:
        """A launched claim's instance as the claim recorded it from CreateFleet's answer (id, type, zone,
        capacity type, NodePool): what registering its node needs, without describing it. None before launch."""
        if self.state != "launched" or not self.instance_id:
            return None
        capacity_type: CapacityType = ("spot" if self.capacity_type == "spot" else
                                       "reserved" if self.capacity_type == "reserved" else "on-demand")
        return CloudInstance(instance_id=self.instance_id, instance_type=self.instance_type, zone=self.zone,
                             state="pending", capacity_type=capacity_type, launch_time=self.created_at,
                             tags={NODEPOOL_TAG: self.node_pool, NODECLAIM_TAG: self.claim_id})

    def _may_be(self) -> tuple[str, ...]:
        """Every type the launch may have got, the fallbacks' too."""
        extra = [t for types in self.fallback_instance_types.values() for t in types if t not in self.instance_types]
        return (*self.instance_types, *dict.fromkeys(extra))

    # ----- the stored form (a JSON document) --------------------------------------------------
    def to_json(self) -> str:
        doc: dict[str, Any] = {
            "id": self.claim_id, "group": self.group, "groupSize": self.group_size, "nodePool": self.node_pool,
            "nodeClass": self.node_class, "capacityTypes": list(self.capacity_types),
            "instanceTypes": list(self.instance_types), "zones": list(self.zones), "pods": list(self.pods),
            "createdAt": self.created_at, "labels": dict(self.labels), "taints": _taints_out(self.taints),
            "startupTaints": _taints_out(self.startup_taints), "hourlyPrice": self.hourly_price, "state": self.state,
        }
        if self.fallback_instance_types:
            doc["fallbackInstanceTypes"] = {ct: list(types) for ct, types in self.fallback_instance_types.items()}
        if self.state == "launched":
            doc.update(instanceId=self.instance_id, instanceType=self.instance_type, zone=self.zone,
                       capacityType=self.capacity_type)
        return json.dumps(doc, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Claim:
        """Raises ValueError naming what is wrong with a stored claim."""
        try:
            d = json.loads(text)
            state = d.get("state", "launching")
            if state not in ("launching", "launched"):
                raise ValueError(f"state {state!r} is neither 'launching' nor 'launched'")
            return cls(claim_id=str(d["id"]), group=str(d["group"]), group_size=int(d["groupSize"]),
                       node_pool=str(d["nodePool"]), node_class=str(d["nodeClass"]),
                       capacity_types=tuple(d["capacityTypes"]), instance_types=tuple(d["instanceTypes"]),
                       zones=tuple(d.get("zones", ())), pods=tuple(d.get("pods", ())),
                       created_at=float(d["createdAt"]), labels=dict(d.get("labels", {})),
                       taints=_taints_in(d.get("taints", ())), startup_taints=_taints_in(d.get("startupTaints", ())),
                       hourly_price=float(d.get("hourlyPrice", 0.0)), state=state,
                       instance_id=str(d.get("instanceId", "")), instance_type=str(d.get("instanceType", "")),
                       zone=str(d.get("zone", "")), capacity_type=str(d.get("capacityType", "")),
                       fallback_instance_types={str(ct): tuple(str(t) for t in types)
                                                for ct, types in (d.get("fallbackInstanceTypes") or {}).items()})
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"malformed node claim: {exc!r}") from exc


def _taints_out(taints: Iterable[Taint]) -> list[dict[str, str]]:
    return [{"key": t.key, "value": t.value, "effect": t.effect} for t in taints]


def _taints_in(raw: Iterable[Mapping[str, str]]) -> tuple[Taint, ...]:
    effects: tuple[TaintEffect, ...] = ("NoSchedule", "PreferNoSchedule", "NoExecute")
    out = []
    for t in raw:
        effect = t["effect"]
        if effect not in effects:
            raise ValueError(f"taint effect {effect!r} is not one of {effects}")
        out.append(Taint(key=t["key"], value=t.get("value", ""), effect=effect))
    return tuple(out)


def claims_for(launches: Sequence[Launch], claim_ids: Sequence[str], *, now: float) -> list[Claim]:
    """The claims of one CreateFleet call: one per planned node, the first id naming the group."""
    group = claim_ids[0]
    return [Claim(claim_id=cid, group=group, group_size=len(launches), node_pool=launch.node_pool,
                  node_class=launch.node_class,
                  capacity_types=(launch.capacity_type, *(c for c in launch.capacity_types
                                                         if c != launch.capacity_type)),
                  instance_types=launch.instance_types, zones=launch.zones, pods=launch.pods, created_at=now,
                  labels=dict(launch.labels), taints=launch.taints, startup_taints=launch.startup_taints,
                  hourly_price=launch.hourly_price,
                  fallback_instance_types=dict(launch.fallback_instance_types))
            for launch, cid in zip(launches, claim_ids, strict=True)]


@dataclass(slots=True)
class ClaimDecisions:
    """What a pass does with the stored claims before it plans."""

    in_flight: list[InFlightNode] = field(default_factory=list)  # replaces EC2's view of the same instance
    # instance id -> the claim's pods, for registered nodes not initialised yet: the pods keep their place
    pinned: dict[str, tuple[str, ...]] = field(default_factory=dict)
    adopted: list[Claim] = field(default_factory=list)  # learnt their instance from its tags: store them
    finished: list[str] = field(default_factory=list)  # claim ids to delete
    resume: list[list[Claim]] = field(default_factory=list)  # groups whose launch must be sent again


def launched_out_of_view(claims: Iterable[Claim], *, listed: Collection[str], registered: Collection[str],
                         now: float, settle_seconds: float = LAUNCH_SETTLE_SECONDS) -> list[str]:
    """Instance ids of launched claims that neither EC2's listing of live instances nor a registered Node
    shows, past the time EC2 takes to list a new instance: ended (terminated with its Node deleted before
    a pass saw it initialised) or, rarely, not yet visible. The caller asks EC2 for them by id; one it
    reports going away finishes its claim, which would otherwise stay in-flight capacity for its pods
    until ``CLAIM_TTL_SECONDS``."""
    return sorted({c.instance_id for c in claims
                   if c.state == "launched" and c.instance_id and c.instance_id not in listed
                   and c.instance_id not in registered and now - c.created_at >= settle_seconds})


def reconcile_claims(claims: Iterable[Claim], *, listed: Iterable[CloudInstance], registered: Collection[str],
                     pending: Collection[str], now: float, initialized: Collection[str] = (),
                     settle_seconds: float = LAUNCH_SETTLE_SECONDS,
                     give_up_seconds: float = LAUNCH_GIVE_UP_SECONDS,
                     ttl_seconds: float = CLAIM_TTL_SECONDS) -> ClaimDecisions:
    """Decide, for every stored claim, from what EC2 lists (``listed``: the owned instances not yet
    registered, with their tags), the registered instance ids and the keys of the pods still pending.

    - launched, its node registered and initialised, or its instance going away: finished (the Node
      counts itself);
    - launched, its node registered but not initialised: its pods stay pinned to that node (until
      kube-scheduler can bind them there, other pending pods must not take their place);
    - launched otherwise: in-flight capacity from the claim, which knows its pods exactly (EC2's view
      may not list the instance yet, or its tags may lack the pod keys); unlisted for ``ttl_seconds``,
      it is finished;
    - launching, an instance carries its claim (or group) tag: adopted;
    - launching, younger than ``settle_seconds``: in-flight capacity (its pass may still be launching);
    - launching, older, some of its pods still pending: its group is resumed with the same client
      tokens (EC2 answers with the instances it already launched, or launches them now); the caller
      counts them as capacity once that answer is in;
    - launching, older, none of its pods pending, or older than ``give_up_seconds``: finished.
    """
    decisions = ClaimDecisions()
    by_id = {i.instance_id: i for i in listed}
    by_claim_tag: dict[str, list[CloudInstance]] = {}
    for listed_instance in by_id.values():
        if listed_instance.claim_id and listed_instance.state not in GOING_AWAY_STATES:
            by_claim_tag.setdefault(listed_instance.claim_id, []).append(listed_instance)
    claims = list(claims)
    taken = {c.instance_id for c in claims if c.instance_id}
    launching: dict[str, list[Claim]] = {}
    for claim in claims:
        if claim.state == "launched":
            seen = by_id.get(claim.instance_id)
            if claim.instance_id in initialized or (seen is not None and seen.state in GOING_AWAY_STATES):
                decisions.finished.append(claim.claim_id)
            elif claim.instance_id in registered:
                if now - claim.created_at < ttl_seconds:
                    decisions.pinned[claim.instance_id] = claim.pods
                else:
                    decisions.finished.append(claim.claim_id)
            elif seen is not None or now - claim.created_at < ttl_seconds:
                decisions.in_flight.append(claim.in_flight())
            else:
                decisions.finished.append(claim.claim_id)
            continue
        launching.setdefault(claim.group, []).append(claim)
    for group, members in launching.items():
        members.sort(key=lambda c: c.claim_id != group)  # the group's own claim first
        found = [i for c in members for i in by_claim_tag.get(c.claim_id, ())]
        found += [i for i in by_claim_tag.get(group, ()) if i not in found]
        found = [i for i in found if i.instance_id not in taken]
        exact = {i.claim_id: i for i in found}
        rest = [i for i in found if i.claim_id not in {c.claim_id for c in members} or i.claim_id == group]
        unresolved: list[Claim] = []
        for claim in members:
            inst: CloudInstance | None = exact.get(claim.claim_id) if claim.claim_id != group else None
            if inst is None and rest:
                inst = rest.pop(0)
            if inst is not None:
                taken.add(inst.instance_id)
                adopted = claim.launched(instance_id=inst.instance_id, instance_type=inst.instance_type,
                                         zone=inst.zone, capacity_type=inst.capacity_type)
                decisions.adopted.append(adopted)
                continue
            unresolved.append(claim)
        if not unresolved:
            continue
        young = [c for c in unresolved if now - c.created_at < settle_seconds]
        decisions.in_flight += [c.in_flight() for c in young]
        old = [c for c in unresolved if c not in young]
        expired = [c for c in old if now - c.created_at >= give_up_seconds]
        decisions.finished += [c.claim_id for c in expired]
        old = [c for c in old if c not in expired]
        if not old:
            continue
        if any(k in pending for c in old for k in c.pods):
            decisions.resume.append(old)  # the caller counts them once the resumed launch answers
        else:
            decisions.finished += [c.claim_id for c in old]
    return decisions
