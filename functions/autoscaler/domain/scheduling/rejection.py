"""Why a NodePool cannot take a pod class, as a record (NodePool, criterion, detail) from which the
unschedulable reason is worded: callers branch on the criterion, operators read the text."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Criterion(StrEnum):
    NO_PRICED_OFFERING = "no-priced-offering"
    TAINT_NOT_TOLERATED = "taint-not-tolerated"
    HOST_PORT_TAKEN = "host-port-taken"
    REQUIREMENT_NOT_SATISFIED = "requirement-not-satisfied"
    LABEL_MISMATCH = "label-mismatch"
    REQUIREMENT_CONFLICT = "requirement-conflict"
    LABEL_NOT_SET = "label-not-set"
    NO_ZONE = "no-zone"
    NO_CAPACITY_TYPE = "no-capacity-type"
    NO_INSTANCE_TYPE = "no-instance-type"
    DAEMON_OVERHEAD = "daemon-overhead"
    TOO_LARGE = "too-large"
    MIN_VALUES = "min-values"
    LIMIT_REACHED = "limit-reached"
    LIMIT_REACHED_ON = "limit-reached-on"
    NO_TYPE_FITS_TOGETHER = "no-type-fits-together"
    LAUNCH_MIN_VALUES = "launch-min-values"


# The wording of each criterion; ``{pool}`` is the NodePool's name, ``{0}``... the detail's parts.
_WORDING = {
    Criterion.NO_PRICED_OFFERING: "NodePool {pool}: no instance type has a priced offering its requirements "
                                  "allow (capacity types {0})",
    Criterion.TAINT_NOT_TOLERATED: "NodePool {pool}: taint {0} not tolerated",
    Criterion.HOST_PORT_TAKEN: "NodePool {pool}: host port {0} is taken by DaemonSet {1} on its nodes",
    Criterion.REQUIREMENT_NOT_SATISFIED: "NodePool {pool}: requirement {0} not satisfied",
    Criterion.LABEL_MISMATCH: "NodePool {pool}: label {0} does not satisfy {1}",
    Criterion.REQUIREMENT_CONFLICT: "NodePool {pool}: requirement {0} conflicts with the NodePool's requirements",
    Criterion.LABEL_NOT_SET: "NodePool {pool}: requirement {0} not satisfied (the NodePool does not set label {1})",
    Criterion.NO_ZONE: "NodePool {pool}: no offering in an allowed zone",
    Criterion.NO_CAPACITY_TYPE: "NodePool {pool}: no allowed capacity type",
    Criterion.NO_INSTANCE_TYPE: "NodePool {pool}: no instance type satisfies {0}",
    Criterion.DAEMON_OVERHEAD: "NodePool {pool}: requests ({0}) plus DaemonSet overhead ({1}) exceed every "
                               "instance type it allows (largest: {2})",
    Criterion.TOO_LARGE: "NodePool {pool}: requests ({0}) exceed the largest instance type it allows",
    Criterion.MIN_VALUES: "NodePool {pool}: the instance types that fit its requests ({0}) cannot meet its minValues",
    Criterion.LIMIT_REACHED: "NodePool {pool} limit reached",
    Criterion.LIMIT_REACHED_ON: "NodePool {pool} limit reached ({0})",
    Criterion.NO_TYPE_FITS_TOGETHER: "NodePool {pool}: no instance type fits the pods together",
    Criterion.LAUNCH_MIN_VALUES: "NodePool {pool}: the instance types that fit do not meet its minValues",
}


@dataclass(frozen=True, slots=True)
class Rejection:
    pool: str
    criterion: Criterion
    detail: tuple[str, ...] = ()

    def render(self) -> str:
        return _WORDING[self.criterion].format(*self.detail, pool=self.pool)


def render_all(rejections: list[Rejection]) -> str:
    return "; ".join(rejection.render() for rejection in rejections)
