"""Protocols the domain needs from the outside world. Adapters in ``aws/`` and ``kube/`` implement
them; tests use the real adapters against moto and the Kubernetes API emulator.

Each method's docstring states its contract.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from autoscaler.domain.models import (
    DaemonSet,
    EvictionResult,
    Node,
    ObjectRef,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    PodDisruptionBudget,
    StorageClass,
    Taint,
)

if TYPE_CHECKING:
    from autoscaler.domain.catalogue_needs import CatalogueNeeds
    from autoscaler.domain.claims import Claim
    from autoscaler.domain.fleet import CloudInstance, FleetRequest, FleetResult, LaunchTemplateInfo, ResolvedNodeClass
    from autoscaler.domain.interruption import LifecycleAction
    from autoscaler.domain.models import InstanceType, Offering
    from autoscaler.domain.nodeclass import NodeClass
from autoscaler.domain.reservations import CapacityReservation

T = TypeVar("T")


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (wall clock), as time.time() returns."""
        ...

    def monotonic(self) -> float:
        """A monotonic reading for measuring intervals and deadlines."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` on this clock (the system clock blocks; a simulated clock advances)."""
        ...


class ClusterError(Exception):
    """The Kubernetes API refused or failed a request after the adapter's retries.
    ``status`` is the HTTP status (0 when the server could not be reached); ``causes`` the
    ``details.causes[].reason`` of the Status body (``DisruptionBudget`` tells a PDB refusal from
    API throttling, both HTTP 429)."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "", causes: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.status, self.reason, self.causes = status, reason, causes

    @property
    def pdb_refusal(self) -> bool:
        """A PodDisruptionBudget refused an eviction (HTTP 429 with a ``DisruptionBudget`` cause)."""
        return self.status == 429 and "DisruptionBudget" in self.causes

    @property
    def retryable(self) -> bool:
        """Worth retrying with backoff: throttling (429 that is not a PDB refusal), a server error, or
        no answer at all."""
        if self.status == 429:
            return not self.pdb_refusal
        return self.status == 0 or self.status in (500, 502, 503, 504)


class NotFoundError(ClusterError):
    """The object named in the request does not exist (HTTP 404)."""


class ConflictError(ClusterError):
    """A write's resourceVersion precondition no longer matched (HTTP 409): someone else wrote the object
    since it was read."""


# AWS error codes that mean "slow down": the call may succeed later.
THROTTLING_CODES = frozenset({
    "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottled", "RequestLimitExceeded",
    "TooManyRequestsException", "SlowDown", "RequestThrottledException", "EC2ThrottledException",
})


class CloudError(Exception):
    """An AWS API call failed after the SDK's own retries. ``operation`` is the API operation
    (``create_fleet``), ``code`` AWS's error code (``UnauthorizedOperation``) or, for a call that never
    got an answer, the SDK's exception name (``EndpointConnectionError``); ``status`` the HTTP status
    (0 without an answer) and ``request_id`` what AWS support asks for."""

    def __init__(self, message: str, *, operation: str = "", code: str = "", status: int = 0,
                 request_id: str = "") -> None:
        super().__init__(message)
        self.operation, self.code, self.status, self.request_id = operation, code, status, request_id

    @property
    def throttled(self) -> bool:
        return self.code in THROTTLING_CODES or self.status == 429

    @property
    def retryable(self) -> bool:
        """Worth trying again later: throttling, a server error, or no answer at all."""
        return self.throttled or self.status >= 500 or self.status == 0


# The kinds of AWS failure the product branches on. The adapters raise the most specific one (the
# translation is ``adapters/aws/_calls.cloud_error``); a caller that does not care catches ``CloudError``.

class ThrottledError(CloudError):
    """AWS asked the caller to slow down (a throttling code or HTTP 429). The request was not carried
    out, whatever the HTTP status (EC2's ``RequestLimitExceeded`` comes with 503)."""


class InsufficientCapacityError(CloudError):
    """AWS has no capacity for what was asked (``InsufficientInstanceCapacity`` and the like)."""


class CloudNotFoundError(CloudError):
    """The named resource does not exist (``InvalidInstanceID.NotFound``, ``NoSuchEntity``, ...)."""


class UnauthorizedError(CloudError):
    """The caller's role may not do this (``UnauthorizedOperation``, ``AccessDenied``...): retrying does not
    help, the deployment's IAM policy must change."""


class UncertainOutcomeError(CloudError):
    """No answer, or a server error: AWS may or may not have acted on the request. A caller that changes
    state must find out what happened before it asks again with anything but the same client token."""


class ClusterPort(Protocol):
    """What the autoscaler reads from and does to a Kubernetes cluster.

    Reads return the domain's lean models, complete (every page), and retry HTTP 429 / 5xx with a
    bounded backoff before raising ``ClusterError``. Deadlines are readings of the adapter's clock's
    ``monotonic()``.
    """

    # ----- reads -----------------------------------------------------------------------------
    def pending_pods(self) -> list[Pod]:
        """Pods waiting for a node: unbound, phase Pending, not deleting, not scheduling-gated.
        ``Pod.unschedulable`` tells whether the kube-scheduler has already given up on one."""
        ...

    def pods(self, *, node_name: str | None = None, label_selector: str | None = None,
             namespace: str | None = None) -> list[Pod]:
        """Pods in every phase, optionally only those bound to ``node_name``, matching a Kubernetes
        label selector string (``app=web,tier in (a,b)``) and/or in ``namespace``."""
        ...

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        """One pod, or None when it does not exist."""
        ...

    def nodes(self, *, label_selector: str | None = None) -> list[Node]:
        """Every node (optionally matching a label selector string)."""
        ...

    def get_node(self, name: str) -> Node | None:
        """One node, or None when it does not exist."""
        ...

    def daemonsets(self) -> list[DaemonSet]:
        """Every DaemonSet in every namespace."""
        ...

    def pdbs(self) -> list[PodDisruptionBudget]:
        """Every policy/v1 PodDisruptionBudget in every namespace."""
        ...

    def pvcs(self) -> list[PersistentVolumeClaim]:
        """Every PersistentVolumeClaim in every namespace."""
        ...

    def pvs(self) -> list[PersistentVolume]:
        """Every PersistentVolume."""
        ...

    def storage_classes(self) -> list[StorageClass]:
        """Every StorageClass."""
        ...

    def namespaces(self) -> dict[str, dict[str, str]]:
        """Every namespace's labels, by name (for namespaceSelectors of pod affinity)."""
        ...

    # ----- node actions (idempotent) ---------------------------------------------------------
    def cordon(self, name: str) -> bool:
        """Set ``spec.unschedulable``. True if this call changed it, False if it was already set.
        Raises NotFoundError for a missing node."""
        ...

    def uncordon(self, name: str) -> bool:
        """Clear ``spec.unschedulable``; True if changed. Raises NotFoundError for a missing node."""
        ...

    def add_taint(self, name: str, taint: Taint) -> bool:
        """Add ``taint`` unless a taint with the same key and effect exists (its value is then
        updated). True if the node changed. Safe against concurrent writers (resourceVersion
        precondition, retried on conflict). Raises NotFoundError for a missing node."""
        ...

    def remove_taint(self, name: str, *, key: str, effect: str | None = None) -> bool:
        """Remove taints with ``key`` (and ``effect`` if given). True if any was removed; a missing
        node is not an error (False)."""
        ...

    def label_node(self, name: str, labels: Mapping[str, str | None]) -> None:
        """Set labels; a None value removes that label. Raises NotFoundError for a missing node."""
        ...

    def annotate_node(self, name: str, annotations: Mapping[str, str | None], *,
                      resource_version: str = "") -> None:
        """Set annotations; a None value removes it. Raises NotFoundError for a missing node. With a
        ``resource_version`` the write is conditional (optimistic concurrency): ConflictError when the node
        changed since that version was read."""
        ...

    def delete_node(self, name: str, *, release_finalizers: Collection[str] = ()) -> bool:
        """Delete the Node object. True if deleted, False if it was already gone. Never raises for 404.
        ``release_finalizers``: finalizers whose controller is gone (Karpenter's on an adopted node) are
        removed once the delete is accepted, so the API server completes it; others keep holding it."""
        ...

    # ----- pod actions -----------------------------------------------------------------------
    def evict(self, namespace: str, name: str, *, deadline: float, uid: str | None = None,
              grace_seconds: int | None = None, retry_blocked: bool = True) -> EvictionResult:
        """Evict through ``policy/v1`` Eviction (PodDisruptionBudgets respected). API throttling (429
        without a PDB cause), 5xx and an unreachable server are retried with backoff until ``deadline``;
        a PDB refusal is retried too unless ``retry_blocked`` is False (a caller with its own retry
        cadence); a deadline already passed means exactly one attempt. Never raises for API errors: 404
        (or a ``uid`` precondition that no longer matches) is ``gone``, a PDB refusal still standing is
        ``blocked``, throttling still standing at the deadline is ``throttled``, anything else is
        ``error`` with the server's message. ``EvictionResult.throttled`` counts the attempts refused by
        throttling or server errors. ``grace_seconds`` overrides the pod's own
        terminationGracePeriodSeconds (None keeps it)."""
        ...

    def delete_pod(self, namespace: str, name: str, *, grace_seconds: int | None = None) -> bool:
        """Delete without PDB checks. True if deleted, False if it was already gone."""
        ...

    def record_event(self, target: Pod | Node | ObjectRef, *, reason: str, message: str,
                     event_type: Literal["Normal", "Warning"] = "Normal", strict: bool = False) -> bool:
        """Record a core/v1 Event about a pod, node or other object (a pod's controller), as
        ``kubectl describe`` shows it. Best effort:
        returns False instead of raising when the API refuses it; with ``strict``, raises the
        ClusterError instead (for a caller that reports why)."""
        ...

    def watch_pending_pods(self, *, timeout_seconds: float,
                           resource_version: str | None = None) -> Iterator[Pod]:
        """Yield pods as they become pending (added, or modified while pending) until
        ``timeout_seconds`` have passed. Without ``resource_version`` it starts from now (only
        changes after the call). The same pod may be yielded more than once."""
class CloudPort(Protocol):
    """What the provisioner, interruption and disruption services need from EC2 (``AwsCloud``)."""

    def instance_types(self) -> Mapping[str, InstanceType]:
        """Every instance type nodes can run on in the region, by name. Cached (an hour, or until
        ``expect_catalogue`` sees the NodePools' needs change): a warm call makes no API request."""
        ...

    def expect_catalogue(self, needs: CatalogueNeeds) -> None:
        """The NodePools' needs this pass: the instance catalogue is read again now if they changed since the
        last pass or name a type, family, architecture or zone it lacks (not lacked after its last read)."""
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

    def subnet_zones(self, node_class: NodeClass) -> frozenset[str]:
        """The zones where the node class's subnet selectors find a subnet (cached). Raises ConfigError
        when they find none, CloudError when EC2 cannot be asked."""
        ...

    def capacity_reservations(self, node_class: NodeClass) -> list[CapacityReservation]:
        """The usable reservations the node class's ``capacityReservationSelectorTerms`` select (cached),
        each with ``available`` set to what it still takes. Raises CloudError when EC2 cannot be asked."""
        ...

    def describe_capacity_reservations(self, reservation_ids: Iterable[str]) -> list[CapacityReservation]:
        """The named reservations as EC2 describes them now (ended ones too). Raises CloudError."""
        ...

    def resolve_node_class(self, node_class: NodeClass) -> ResolvedNodeClass:
        """Every AMI (all architectures and accelerated variants), subnet and security group the node
        class's selector terms select now. Raises ConfigError when a term set selects nothing."""
        ...

    def in_flight(self, registered_instance_ids: Collection[str]) -> list[CloudInstance]:
        """Pending/running instances this cluster's autoscaler launched that are not yet registered nodes."""
        ...

    def owned_instances(self) -> list[CloudInstance]:
        """All pending/running instances carrying this cluster's ownership tags."""
        ...

    def claimed_instances(self, claim_ids: Collection[str]) -> list[CloudInstance]:
        """Pending/running instances of this cluster whose node-claim tag is one of ``claim_ids`` (a launch
        whose CreateFleet answer was lost). A filtered DescribeInstances (one per 200 ids), never a listing of
        every instance."""
        ...

    def karpenter_instances(self) -> list[CloudInstance]:
        """Pending/running instances Karpenter launched for this cluster (``ownership.launched_by_karpenter``),
        adopted or not."""
        ...

    def describe_instances(self, instance_ids: Iterable[str]) -> list[CloudInstance]:
        """The instances that exist among ``instance_ids``; unknown ids are left out."""
        ...

    def terminate(self, instance_ids: Iterable[str]) -> list[str]:
        """Terminate instances. Raises OwnershipError (naming the instance) and terminates nothing if
        any of them lacks this cluster's ownership tags (or, with adoption on, is not one Karpenter launched
        for this cluster). Already-gone ids are skipped."""
        ...

    def mark_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> None:
        """Treat one offering as out of capacity for the next 3 minutes (the planner and the launcher
        skip it), as an interruption or a registration timeout shows."""
        ...

    def launch_templates(self) -> list[LaunchTemplateInfo]:
        """Every launch template this cluster's autoscaler created (name prefix and ownership tags)."""
        ...

    def launch_template_last_used(self, name: str) -> float | None:
        """Epoch seconds this container last launched with template ``name``; None if it has not."""
        ...

    def delete_launch_template(self, template_id: str) -> bool:
        """Delete one of our launch templates; False if it was already gone. Never raises for NotFound."""
        ...

class ClaimStore(Protocol):
    """The durable record of launches (``domain/claims.py``): written before CreateFleet, read with
    strong consistency by every pass. Every method raises CloudError when the store cannot answer."""

    def claims(self) -> list[Claim]:
        """Every stored claim of this cluster, as of now (a strongly consistent read)."""
        ...

    def create(self, claims: Sequence[Claim]) -> None:
        """Store new claims; each must not exist yet (a claim id is never reused)."""
        ...

    def update(self, claims: Sequence[Claim]) -> None:
        """Overwrite stored claims (their launch answered)."""
        ...

    def delete(self, claim_ids: Collection[str]) -> None:
        """Forget claims; ids already gone are fine."""
        ...

    def acquire_lease(self, holder: str, *, now: float, seconds: float) -> bool:
        """Take the cluster's launch lease for ``seconds`` unless another holder has it unexpired. Only
        the holder plans and launches, so two overlapping passes never launch for the same pods."""
        ...

    def release_lease(self, holder: str) -> None:
        """Give the lease back (a no-op when ``holder`` no longer has it)."""
        ...


class LifecycleHooks(Protocol):
    """Auto Scaling lifecycle actions (the terminate hook of a managed node group or any ASG)."""

    def complete(self, action: LifecycleAction, *, result: Literal["CONTINUE", "ABANDON"] = "CONTINUE") -> bool:
        """CompleteLifecycleAction. True if completed, False when the action is no longer active (already
        completed, or timed out). Raises CloudError for other failures."""
        ...

    def heartbeat(self, action: LifecycleAction) -> bool:
        """RecordLifecycleActionHeartbeat: restart the hook's timeout while a drain is retried. False when
        the action is no longer active."""
        ...


class ReplacementRequester(Protocol):
    """Asks the provisioner for capacity to replace nodes that are going away (the cross-function
    contract in docs/interruption.md: an asynchronous invoke of the provisioner function; the
    provisioner plans with ``nodes`` as leaving and the ``unavailable`` offerings marked for 3 minutes)."""

    def request_replacement(self, *, source: Literal["interruption", "disruption"], nodes: Sequence[str],
                            unavailable: Sequence[tuple[str, str, str]], event_id: str) -> bool:
        """Queue one replacement request and return at once (no waiting for the provisioner). True if the
        request was sent, False when no provisioner is configured. Raises when the request could not be
        queued, so the caller can retry."""
        ...


class UnboundPodWatch(Protocol):
    """The watcher's view of the cluster: unbound, unfinished pods as raw JSON (``KubeCluster``)."""

    def list_unbound_pods(self, parse: Callable[[dict[str, Any]], T]) -> tuple[list[T], str]:
        """Every such pod, each ``parse``d as its page is read (50,000 raw pods would not fit the watcher's
        memory), and the list's resourceVersion. Raises ClusterError."""
        ...

    def watch_unbound_pods_raw(self, *, resource_version: str, timeout_seconds: float) -> Iterator[dict[str, Any]]:
        """One watch stream of ``{"type", "object"}`` events from ``resource_version``. Raises ClusterError
        (status 410: the version is too old, list again; status 0: the stream broke off)."""
        ...


class UninitializedNodeWatch(Protocol):
    """The watcher's view of our nodes waiting for initialisation, as raw JSON (``domain/node_wake.py``'s
    selector; ``adapters/kube/node_watch.py``)."""

    def list_uninitialized_nodes_raw(self) -> tuple[list[dict[str, Any]], str]:
        """Every such node and the list's resourceVersion. Raises ClusterError."""
        ...

    def watch_uninitialized_nodes_raw(self, *, resource_version: str,
                                      timeout_seconds: float) -> Iterator[dict[str, Any]]:
        """One watch stream of ``{"type", "object"}`` events (a node leaving the selection arrives as
        DELETED). Raises ClusterError as ``UnboundPodWatch.watch_unbound_pods_raw``."""
        ...


class ProvisionerWaker(Protocol):
    """Wakes the provisioner function (an asynchronous invoke: the watcher never waits for a pass)."""

    def wake(self, *, reason: str, pods: int, resource_version: str = "") -> None:
        """Queue one provisioner pass; ``resource_version``: the newest pod version of the batch, which the
        pass's view of the pods must include. Raises CloudError when it could not be queued."""
        ...


class MessageVisibility(Protocol):
    """When a queue message returned for retry comes back (SQS ChangeMessageVisibility)."""

    def change_visibility(self, *, source_arn: str, receipt_handle: str, seconds: int) -> bool:
        """Make the message (its queue's ARN, as Lambda's SQS record names it, and its receipt handle) visible
        again in ``seconds``. False, changing nothing, when the ARN or handle cannot name a message (a record
        not read from SQS). Raises CloudError when SQS refuses or cannot be asked."""
        ...
