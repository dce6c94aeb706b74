"""``FakeCluster``: an in-memory ``ClusterPort`` for service tests (as Karpenter's ``fake/cloudprovider.go`` is
for its cloud provider), held to the adapter's contract by ``tests/adapters/contract/`` (the same test
functions run against it, ``KubeCluster`` on the emulator and ``KubeCluster`` on the real kube-apiserver).

Objects live in the emulator's object store (``simulator/kube_store.Store``) held in memory, without its HTTP
server: the store already carries the API server's rules the contract suite holds it to (resourceVersion
preconditions, finalizers, graceful deletion, the eviction handler's PDB arithmetic, selectors). What this
class adds is the port: the same typed errors (``NotFoundError``, ``ConflictError`` with the status and
reason, ``ClusterError``), the same idempotency answers (``cordon`` is False when already cordoned), the
same refusals, and a stateful fake's test hooks: ``calls`` per method and ``fail_next`` to inject the error
the adapter raises once its retries are spent.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any, Literal

from autoscaler.adapters.clock import ManualClock
from autoscaler.adapters.kube.cluster import PENDING_FIELD_SELECTOR
from autoscaler.adapters.kube.events import event_body
from autoscaler.app.ports import Clock, ClusterError, ConflictError, NotFoundError
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
from autoscaler.domain.objects import (
    daemonset_from_dict,
    namespace_from_dict,
    node_from_dict,
    pdb_from_dict,
    pod_from_dict,
    pv_from_dict,
    pvc_from_dict,
    storage_class_from_dict,
)
from simulator.kube_store import ApiError, Store

Raw = dict[str, Any]
MERGE = "application/merge-patch+json"


def cluster_error(err: ApiError, what: str) -> ClusterError:
    """The port's error for an API server Status, as ``KubeCluster`` raises it (404 → NotFoundError, 409 →
    ConflictError; the causes' reasons kept, ``DisruptionBudget`` telling a PDB refusal from throttling, and
    their messages appended: which budget refused and what it needs)."""
    raw_causes = [c for c in err.details.get("causes") or () if isinstance(c, dict)]
    causes = tuple(str(c.get("reason")) for c in raw_causes if c.get("reason"))
    said = [str(c.get("message")) for c in raw_causes if c.get("message")]
    message = f"{err.message} ({'; '.join(said)})" if said else err.message
    cls = NotFoundError if err.code == 404 else ConflictError if err.code == 409 else ClusterError
    return cls(f"{what}: HTTP {err.code} {err.reason}: {message}", status=err.code, reason=err.reason, causes=causes)


class FakeCluster:
    """``ClusterPort`` over an in-memory object store. ``store`` is the cluster's state (seed it with
    ``store.create(plural, raw)``). ``Store()`` removes a deleted pod at once (a kubelet that confirms at
    once); ``Store(graceful_deletion=True)`` keeps it terminating as the API server does until its kubelet
    confirms, which ``store.finish_terminating()`` stands in for. ``clock``'s ``sleep`` is where eviction
    retries wait (a ``ManualClock`` advances, so tests take no wall time)."""

    def __init__(self, store: Store | None = None, *, clock: Clock | None = None,
                 sleep: Callable[[float], None] | None = None, component: str = "eks-serverless-autoscaler",
                 backoff_base: float = 0.2, backoff_max: float = 5.0) -> None:
        self.store = store if store is not None else Store()
        self.clock: Clock = clock or ManualClock()
        self._sleep = sleep or self.clock.sleep
        self._component = component
        self._backoff_base, self._backoff_max = backoff_base, backoff_max
        self.calls: Counter[str] = Counter()
        self.eviction_requests: list[str] = []  # "namespace/name" of every pod asked to leave, first request each
        self._next_errors: dict[str, list[ClusterError]] = {}

    # ----- test hooks --------------------------------------------------------------------------
    def fail_next(self, method: str, error: ClusterError, *, times: int = 1) -> None:
        """The next ``times`` calls of ``method`` raise ``error`` (what the adapter raises once its own
        retries are spent). For ``evict``, which never raises, each eviction *attempt* takes one and is
        answered as the adapter answers that status (throttling and 5xx are retried until the deadline)."""
        if not hasattr(self, method):
            raise AttributeError(f"ClusterPort has no method {method!r}")
        self._next_errors.setdefault(method, []).extend([error] * times)

    def reset(self) -> None:
        """Forget the calls counted and the errors not yet raised (the store keeps its objects)."""
        self.calls.clear()
        self._next_errors.clear()

    def _enter(self, method: str) -> None:
        self.calls[method] += 1
        queued = self._next_errors.get(method)
        if queued:
            raise queued.pop(0)

    def _list(self, plural: str, what: str, **kwargs: Any) -> list[Raw]:
        try:
            return self.store.list(plural, **kwargs)
        except ApiError as err:
            raise cluster_error(err, what) from err

    # ----- reads -------------------------------------------------------------------------------
    def pending_pods(self) -> list[Pod]:
        self._enter("pending_pods")
        raw = self._list("pods", "GET /api/v1/pods", field_selector=PENDING_FIELD_SELECTOR)
        return [p for p in map(pod_from_dict, raw) if p.is_pending]

    def pods(self, *, node_name: str | None = None, label_selector: str | None = None,
             namespace: str | None = None) -> list[Pod]:
        self._enter("pods")
        raw = self._list("pods", "GET pods", namespace=namespace, label_selector=label_selector,
                         field_selector=f"spec.nodeName={node_name}" if node_name else None)
        return [pod_from_dict(p) for p in raw]

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        self._enter("get_pod")
        raw = self.store.peek("pods", namespace, name)
        return pod_from_dict(raw) if raw is not None else None

    def nodes(self, *, label_selector: str | None = None) -> list[Node]:
        self._enter("nodes")
        return [node_from_dict(n) for n in self._list("nodes", "GET /api/v1/nodes", label_selector=label_selector)]

    def get_node(self, name: str) -> Node | None:
        self._enter("get_node")
        raw = self.store.peek("nodes", None, name)
        return node_from_dict(raw) if raw is not None else None

    def daemonsets(self) -> list[DaemonSet]:
        self._enter("daemonsets")
        return [daemonset_from_dict(d) for d in self._list("daemonsets", "GET daemonsets")]

    def pdbs(self) -> list[PodDisruptionBudget]:
        self._enter("pdbs")
        return [pdb_from_dict(p) for p in self._list("poddisruptionbudgets", "GET poddisruptionbudgets")]

    def pvcs(self) -> list[PersistentVolumeClaim]:
        self._enter("pvcs")
        return [pvc_from_dict(p) for p in self._list("persistentvolumeclaims", "GET persistentvolumeclaims")]

    def pvs(self) -> list[PersistentVolume]:
        self._enter("pvs")
        return [pv_from_dict(p) for p in self._list("persistentvolumes", "GET persistentvolumes")]

    def storage_classes(self) -> list[StorageClass]:
        self._enter("storage_classes")
        return [storage_class_from_dict(s) for s in self._list("storageclasses", "GET storageclasses")]

    def namespaces(self) -> dict[str, dict[str, str]]:
        self._enter("namespaces")
        return dict(namespace_from_dict(n) for n in self._list("namespaces", "GET namespaces"))

    # ----- node actions ------------------------------------------------------------------------
    def _patch_node(self, name: str, patch: Raw) -> None:
        try:
            self.store.patch("nodes", None, name, patch, content_type=MERGE, echo=False)
        except ApiError as err:
            raise cluster_error(err, f"PATCH /api/v1/nodes/{name}") from err

    def _update_node(self, name: str, change: Callable[[Raw], Raw | None]) -> bool:
        """Read-modify-write with the resourceVersion the change was computed from (in process nobody can
        write in between, so no conflict retry is needed); NotFoundError for a missing node."""
        current = self.store.peek("nodes", None, name)
        if current is None:
            raise NotFoundError(f"GET /api/v1/nodes/{name}: HTTP 404 NotFound: nodes \"{name}\" not found",
                                status=404, reason="NotFound")
        patch = change(current)
        if patch is None:
            return False
        patch.setdefault("metadata", {})["resourceVersion"] = current["metadata"]["resourceVersion"]
        self._patch_node(name, patch)
        return True

    def _set_unschedulable(self, name: str, value: bool) -> bool:
        def change(node: Raw) -> Raw | None:
            if bool((node.get("spec") or {}).get("unschedulable")) == value:
                return None
            return {"spec": {"unschedulable": value if value else None}}
        return self._update_node(name, change)

    def cordon(self, name: str) -> bool:
        self._enter("cordon")
        return self._set_unschedulable(name, True)

    def uncordon(self, name: str) -> bool:
        self._enter("uncordon")
        return self._set_unschedulable(name, False)

    def add_taint(self, name: str, taint: Taint) -> bool:
        self._enter("add_taint")
        wanted: Raw = {"key": taint.key, "effect": taint.effect, **({"value": taint.value} if taint.value else {})}

        def change(node: Raw) -> Raw | None:
            taints = list((node.get("spec") or {}).get("taints") or ())
            same = [t for t in taints if (t.get("key"), t.get("effect")) == (taint.key, taint.effect)]
            if same and all((t.get("value") or "") == taint.value for t in same):
                return None
            kept = [t for t in taints if (t.get("key"), t.get("effect")) != (taint.key, taint.effect)]
            return {"spec": {"taints": [*kept, wanted]}}
        return self._update_node(name, change)

    def remove_taint(self, name: str, *, key: str, effect: str | None = None) -> bool:
        self._enter("remove_taint")

        def change(node: Raw) -> Raw | None:
            taints = list((node.get("spec") or {}).get("taints") or ())
            kept = [t for t in taints if not (t.get("key") == key and effect in (None, t.get("effect")))]
            return None if len(kept) == len(taints) else {"spec": {"taints": kept or None}}
        try:
            return self._update_node(name, change)
        except NotFoundError:
            return False

    def _patch_meta(self, name: str, field: str, values: Mapping[str, str | None], resource_version: str) -> None:
        if values:
            meta: Raw = {field: dict(values), **({"resourceVersion": resource_version} if resource_version else {})}
            self._patch_node(name, {"metadata": meta})

    def label_node(self, name: str, labels: Mapping[str, str | None]) -> None:
        self._enter("label_node")
        self._patch_meta(name, "labels", labels, "")

    def annotate_node(self, name: str, annotations: Mapping[str, str | None], *, resource_version: str = "") -> None:
        self._enter("annotate_node")
        self._patch_meta(name, "annotations", annotations, resource_version)

    def delete_node(self, name: str, *, release_finalizers: Collection[str] = ()) -> bool:
        self._enter("delete_node")
        try:
            deleted = self.store.delete("nodes", None, name)
        except ApiError as err:
            if err.code == 404:
                return False
            raise cluster_error(err, f"DELETE /api/v1/nodes/{name}") from err
        held = list((deleted.get("metadata") or {}).get("finalizers") or ())
        kept = [f for f in held if f not in set(release_finalizers)]
        if kept != held:
            patch = {"metadata": {"finalizers": kept or None,
                                  "resourceVersion": deleted["metadata"]["resourceVersion"]}}
            with contextlib.suppress(NotFoundError):  # someone else released it meanwhile
                self._patch_node(name, patch)
        return True

    # ----- pod actions -------------------------------------------------------------------------
    def _backoff(self, attempt: int) -> float:
        return float(min(self._backoff_max, self._backoff_base * (2 ** attempt)))

    def _evict_once(self, namespace: str, name: str, body: Raw) -> None:
        queued = self._next_errors.get("evict")
        if queued:
            raise queued.pop(0)
        try:
            self.store.evict(namespace, name, body)
        except ApiError as err:
            raise cluster_error(err, f"POST /api/v1/namespaces/{namespace}/pods/{name}/eviction") from err

    def evict(self, namespace: str, name: str, *, deadline: float, uid: str | None = None,
              grace_seconds: int | None = None, retry_blocked: bool = True) -> EvictionResult:
        self.calls["evict"] += 1
        key = f"{namespace}/{name}"
        if key not in self.eviction_requests:
            self.eviction_requests.append(key)
        options: Raw = {**({"gracePeriodSeconds": grace_seconds} if grace_seconds is not None else {}),
                        **({"preconditions": {"uid": uid}} if uid else {})}
        body: Raw = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace},
                     **({"deleteOptions": options} if options else {})}
        attempt = throttled = 0
        while True:
            attempt += 1
            try:
                self._evict_once(namespace, name, body)
                return EvictionResult(key, "evicted", attempts=attempt, throttled_attempts=throttled)
            except NotFoundError:
                return EvictionResult(key, "gone", attempts=attempt, throttled_attempts=throttled)
            except ClusterError as exc:
                if exc.status == 409 and uid:
                    return EvictionResult(key, "gone", "a new pod of the same name replaced it", attempt, throttled)
                throttled += exc.retryable
                wait = self._backoff(attempt - 1)
                again = exc.retryable or (exc.pdb_refusal and retry_blocked)
                if not again or self.clock.monotonic() + wait > deadline:
                    outcome: Literal["blocked", "throttled", "error"] = (
                        "blocked" if exc.pdb_refusal else "throttled" if exc.retryable else "error")
                    return EvictionResult(key, outcome, str(exc), attempt, throttled)
                self._sleep(wait)

    def delete_pod(self, namespace: str, name: str, *, grace_seconds: int | None = None) -> bool:
        self._enter("delete_pod")
        try:
            self.store.delete("pods", namespace, name, grace_period_seconds=grace_seconds)
        except ApiError as err:
            if err.code == 404:
                return False
            raise cluster_error(err, f"DELETE /api/v1/namespaces/{namespace}/pods/{name}") from err
        return True

    def record_event(self, target: Pod | Node | ObjectRef, *, reason: str, message: str,
                     event_type: Literal["Normal", "Warning"] = "Normal", strict: bool = False) -> bool:
        try:
            self._enter("record_event")
            namespace, event = event_body(target, reason=reason, message=message, event_type=event_type,
                                          component=self._component, now=self.clock.now())
            try:
                self.store.create("events", event, namespace=namespace, request=True)
            except ApiError as err:
                raise cluster_error(err, f"POST /api/v1/namespaces/{namespace}/events") from err
        except ClusterError:
            if strict:
                raise
            return False
        return True

    def events(self, *, reason: str | None = None) -> list[Raw]:
        """The Events recorded so far (optionally of one reason), for assertions."""
        return [e for e in self.store.objects("events") if reason is None or e.get("reason") == reason]

    # ----- watch -------------------------------------------------------------------------------
    def watch_pending_pods(self, *, timeout_seconds: float, resource_version: str | None = None) -> Iterator[Pod]:
        """Pods that became pending after ``resource_version`` (without one: after this call), read from the
        store's change log until ``timeout_seconds`` have passed on the clock, which is slept in steps of
        one second while nothing changes (a ``ManualClock`` makes the window take no wall time). A version
        the log no longer holds lists the pending pods again and yields them all, as the adapter does."""
        self._enter("watch_pending_pods")
        end = self.clock.monotonic() + timeout_seconds
        since = int(resource_version) if resource_version else self.store.resource_version
        while self.clock.monotonic() < end:
            try:
                changes = self.store.changes_since(since)
            except ApiError:
                since = self.store.resource_version
                yield from (p for p in map(pod_from_dict, self.store.list("pods")) if p.is_pending)
                continue
            for change in changes:
                since = change.rv
                if change.plural == "pods" and change.type in ("ADDED", "MODIFIED"):
                    pod = pod_from_dict(change.obj)
                    if pod.is_pending:
                        yield pod
            if not changes:
                self._sleep(min(1.0, max(0.0, end - self.clock.monotonic())))
