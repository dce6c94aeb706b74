"""Protocols the domain needs from the outside world. Adapters in ``aws/`` and ``kube/`` implement
them; tests use the real adapters against moto and the Kubernetes API emulator.

Each method's docstring states its contract. Later issues add the cloud and cluster ports here.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from autoscaler.domain.fleet import CloudInstance, FleetRequest, FleetResult
    from autoscaler.domain.models import InstanceType, Offering


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (wall clock), as time.time() returns."""
        ...

    def monotonic(self) -> float:
        """A monotonic reading for measuring intervals and deadlines."""
        ...


class CloudPort(Protocol):
    """What the provisioner, interruption and disruption services need from EC2 (``AwsCloud``)."""

    def instance_types(self) -> Mapping[str, InstanceType]:
        """Every instance type nodes can run on in the region, by name. Cached (5 min): a warm call
        makes no API request."""
        ...

    def offerings(self) -> list[Offering]:
        """Every (type, zone, capacity type) the region offers, priced in USD/hour. Offerings without a
        known price are left out; ``available`` is False for those in the capacity-error cache."""
        ...

    def unavailable(self) -> frozenset[tuple[str, str, str]]:
        """(instance type, zone, capacity type) that failed for lack of capacity in the last 3 minutes."""
        ...

    @property
    def prices_stale(self) -> bool:
        """True when the last price refresh failed and older prices are in use."""
        ...

    def launch(self, request: FleetRequest) -> FleetResult:
        """Launch ``request.count`` nodes. Capacity shortfalls never raise: the result says precisely
        what launched and why the rest did not. Raises ConfigError when the node class resolves to no
        subnet, security group or AMI."""
        ...

    def in_flight(self, registered_instance_ids: Collection[str]) -> list[CloudInstance]:
        """Pending/running instances this cluster's autoscaler launched that are not yet registered nodes."""
        ...

    def owned_instances(self) -> list[CloudInstance]:
        """All pending/running instances carrying this cluster's ownership tags."""
        ...

    def describe_instances(self, instance_ids: Iterable[str]) -> list[CloudInstance]:
        """The instances that exist among ``instance_ids``; unknown ids are left out."""
        ...

    def terminate(self, instance_ids: Iterable[str]) -> list[str]:
        """Terminate instances. Raises OwnershipError (naming the instance) and terminates nothing if
        any of them lacks this cluster's ownership tags. Already-gone ids are skipped."""
        ...
