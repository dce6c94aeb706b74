"""The provisioner's book of node claims: written before CreateFleet, completed after it, reconciled
by every pass (``domain/claims.py`` decides; this module reads and writes the store).

``MemoryClaimStore`` is the store when no table is configured (``autoscaler plan``, local runs, the
services' tests): the record then lives as long as the process, which is what a single container
remembers anyway. Lambda always gets the DynamoDB store (``adapters/aws/claims.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from autoscaler.app.ports import ClaimStore, CloudError
from autoscaler.domain.claims import Claim, ClaimDecisions, launched_out_of_view, reconcile_claims
from autoscaler.domain.errors import ConfigError
from autoscaler.domain.fleet import GOING_AWAY_STATES, CloudInstance, FleetResult, LaunchedInstance
from autoscaler.domain.plan import InFlightNode

log = logging.getLogger(__name__)


class MemoryClaimStore:
    """Claims and the launch lease in this process's memory (no durability across containers)."""

    def __init__(self) -> None:
        self._claims: dict[str, Claim] = {}
        self._lease: tuple[str, float] | None = None

    def claims(self) -> list[Claim]:
        return list(self._claims.values())

    def create(self, claims: Sequence[Claim]) -> None:
        clash = [c.claim_id for c in claims if c.claim_id in self._claims]
        if clash:
            raise CloudError(f"node claim(s) already exist: {', '.join(clash)}", operation="CreateClaims",
                             code="ConditionalCheckFailedException")
        self._claims.update({c.claim_id: c for c in claims})

    def update(self, claims: Sequence[Claim]) -> None:
        self._claims.update({c.claim_id: c for c in claims})

    def delete(self, claim_ids: Collection[str]) -> None:
        for cid in claim_ids:
            self._claims.pop(cid, None)

    def acquire_lease(self, holder: str, *, now: float, seconds: float) -> bool:
        if self._lease is not None and self._lease[0] != holder and self._lease[1] > now:
            return False
        self._lease = (holder, now + seconds)
        return True

    def release_lease(self, holder: str) -> None:
        if self._lease is not None and self._lease[0] == holder:
            self._lease = None


@dataclass(slots=True)
class Reconciled:
    """Stored claims after a pass looked at them: the capacity they stand for and what changed."""

    in_flight: list[InFlightNode] = field(default_factory=list)
    pinned: dict[str, tuple[str, ...]] = field(default_factory=dict)  # registering node's instance -> pods
    adopted: int = 0
    finished: int = 0
    resumed: list[LaunchedInstance] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


# Resends a group's CreateFleet with its original parameters and client tokens.
Resume = Callable[[Sequence[Claim]], FleetResult]


Describe = Callable[[Collection[str]], Sequence[CloudInstance]]


def _gone(stored: Sequence[Claim], *, listed: Sequence[CloudInstance], registered: Collection[str], now: float,
          describe: Describe) -> list[CloudInstance]:
    """The instances of launched claims out of view that EC2 reports going away (terminated, stopping)."""
    ids = launched_out_of_view(stored, listed={i.instance_id for i in listed}, registered=registered, now=now)
    if not ids:
        return []
    try:
        return [i for i in describe(ids) if i.state in GOING_AWAY_STATES]
    except CloudError as exc:  # the claims stay in flight; the next pass asks again
        log.warning("could not describe %d instance(s) of launched node claims: %s", len(ids), exc)
        return []


class ClaimBook:
    def __init__(self, store: ClaimStore) -> None:
        self.store = store

    def reconcile(self, *, listed: Sequence[CloudInstance], registered: Collection[str], pending: Collection[str],
                  now: float, resume: Resume | None, write: bool = True,
                  initialized: Collection[str] = (), describe: Describe | None = None,
                  stored: Sequence[Claim] | None = None) -> Reconciled:
        """Read every claim, apply ``reconcile_claims`` and (with ``write``) store the outcome and resume
        stale launches. A store that cannot be read raises CloudError: planning without knowing what is
        in flight could launch twice. ``describe`` (DescribeInstances by id) tells which launched claims
        whose instance is out of view have ended. ``stored``: the claims as the caller read them from the
        store in this pass (read here otherwise)."""
        stored = self.store.claims() if stored is None else stored
        if describe is not None:
            listed = [*listed, *_gone(stored, listed=listed, registered=registered, now=now, describe=describe)]
        decisions = reconcile_claims(stored, listed=listed, registered=registered, pending=pending, now=now,
                                     initialized=initialized)
        out = Reconciled(in_flight=list(decisions.in_flight), pinned=dict(decisions.pinned),
                         adopted=len(decisions.adopted),
                         finished=len(decisions.finished))
        if write:
            self._write(decisions, out)
        else:
            finished = set(decisions.finished)
            out.in_flight += [c.in_flight() for c in decisions.adopted if c.claim_id not in finished]
        taken = {c.instance_id for c in [*stored, *decisions.adopted] if c.instance_id}
        if resume is not None:
            for group in decisions.resume:
                out.in_flight += self._resume(group, resume, out, taken)
        return out

    def _write(self, decisions: ClaimDecisions, out: Reconciled) -> None:
        finished = set(decisions.finished)
        try:
            if decisions.adopted:
                self.store.update([c for c in decisions.adopted if c.claim_id not in finished])
            if finished:
                self.store.delete(finished)
        except CloudError as exc:  # the next pass decides the same again
            out.errors.append(f"claims not updated: {exc}")
            log.warning("could not update node claims: %s", exc)
        out.in_flight += [c.in_flight() for c in decisions.adopted if c.claim_id not in finished]

    def _resume(self, group: Sequence[Claim], resume: Resume, out: Reconciled,
                taken: set[str]) -> list[InFlightNode]:
        """Send a stale launching group again; its instances (old or new) become its claims' instances."""
        ids = ", ".join(c.claim_id for c in group)
        try:
            result = resume(group)
        except ConfigError as exc:  # it can never launch as configured: the pods are planned afresh
            out.errors.append(f"the launch of {ids} cannot be resumed: {exc}")
            self._forget(group)
            return []
        except Exception as exc:  # any failure of the resent launch (EC2 may have acted): logged, reported in the
            # pass's claim errors, and the claims kept so the next pass resumes them with the same tokens
            out.errors.append(f"resuming the launch of {ids} failed: {exc}")
            log.warning("resuming the launch of node claim(s) %s failed: %s", ids, exc)
            return [c.in_flight() for c in group]
        if result.uncertain and not result.launched:
            # EC2 took this token with other parameters, or gave no answer: the fleet may exist, and its
            # instances would be listed with the claim's tag. Until then they are in flight (for at most
            # LAUNCH_GIVE_UP_SECONDS from the claim's creation).
            return [c.in_flight() for c in group]
        # EC2 answers a repeated token with the whole fleet: instances other claims already hold stay theirs.
        fresh = [i for i in result.launched if i.instance_id not in taken]
        done = self.complete(group, fresh, uncertain=result.uncertain)
        taken.update(c.instance_id for c in done)
        mine = {c.instance_id for c in done}
        out.resumed += [i for i in fresh if i.instance_id in mine]
        log.info("resumed the launch of node claim(s) %s: %d instance(s)", ids, len(done),
                 extra={"claims": [c.claim_id for c in group], "launched": [c.instance_id for c in done]})
        return [c.in_flight() for c in done]

    def record(self, claims: Sequence[Claim]) -> None:
        """Before CreateFleet. Raises CloudError: no launch without its record."""
        self.store.create(claims)

    def _forget(self, claims: Sequence[Claim]) -> None:
        try:
            self.store.delete({c.claim_id for c in claims})
        except CloudError as exc:
            log.warning("could not delete node claim(s) %s: %s", ", ".join(c.claim_id for c in claims), exc)

    def complete(self, claims: Sequence[Claim], launched: Sequence[LaunchedInstance], *,
                 uncertain: bool = False) -> list[Claim]:
        """After CreateFleet: each launched instance completes one claim (the one it was tagged for,
        else the next in order). Claims that got no instance are deleted, unless the answer was
        ``uncertain`` (EC2 may have launched more than it said): those stay for the next pass to adopt
        or resume. Returns the launched claims. A store failure is logged: the next pass adopts the
        instances by their claim tags."""
        remaining = list(claims)
        done: list[Claim] = []
        by_id = {c.claim_id: c for c in remaining}
        ordered = sorted(launched, key=lambda i: i.claim_id not in by_id or i.claim_id == claims[0].group)
        for inst in ordered:
            claim = by_id.get(inst.claim_id) if inst.claim_id != claims[0].group else None
            if claim is None or claim not in remaining:
                claim = remaining[0] if remaining else None
            if claim is None:
                break
            remaining.remove(claim)
            done.append(claim.launched(instance_id=inst.instance_id, instance_type=inst.instance_type,
                                       zone=inst.zone, capacity_type=inst.capacity_type))
        try:
            if done:
                self.store.update(done)
            if remaining and not uncertain:
                self.store.delete({c.claim_id for c in remaining})
        except CloudError as exc:
            log.warning("could not complete node claim(s) %s: %s", ", ".join(c.claim_id for c in claims), exc)
        return done
