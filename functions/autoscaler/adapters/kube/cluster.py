"""``KubeCluster``: the ``ClusterPort`` over the official ``kubernetes`` client.

Requests go through the client's ``ApiClient`` (its configuration carries the endpoint, the CA and
the refreshing EKS token), but responses are read as raw JSON and parsed straight into the domain's
lean models: the generated models cost tens of seconds and gigabytes on 50,000 pods. Lists are
paginated with ``limit``/``continue``; reads retry 429 and 5xx with a bounded exponential backoff.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import quote

import urllib3
from kubernetes.client import ApiClient

from autoscaler.adapters.clock import SystemClock
from autoscaler.adapters.kube import lean
from autoscaler.adapters.kube.events import event_body
from autoscaler.adapters.kube.stream import gc_paused, open_stream, watch_events
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

if TYPE_CHECKING:
    from autoscaler.adapters.kube.informer import ClusterCache

T = TypeVar("T")
Raw = dict[str, Any]
Decode = Callable[[bytes], Raw]

# Unbound pods that are not finished: the API server filters, the domain's Pod.is_pending decides.
PENDING_FIELD_SELECTOR = "spec.nodeName=,status.phase!=Succeeded,status.phase!=Failed"
_CONFLICT_ATTEMPTS = 5


def _q(value: str) -> str:
    return quote(value, safe="")


class KubeCluster:
    """The cluster adapter. One instance per Lambda container; thread-safe as the ApiClient is."""

    def __init__(self, api: ApiClient, *, clock: Clock | None = None,
                 sleep: Callable[[float], None] | None = None, page_size: int = 2000,
                 read_attempts: int = 5, backoff_base: float = 0.2, backoff_max: float = 5.0,
                 request_timeout: float = 30.0, component: str = "eks-serverless-autoscaler") -> None:
        self._api = api
        self._clock: Clock = clock or SystemClock()
        self._sleep = sleep or self._clock.sleep
        self._page_size = page_size
        self._read_attempts = read_attempts
        self._backoff_base, self._backoff_max = backoff_base, backoff_max
        self._timeout = request_timeout
        self._component = component
        # The provisioner's warm pods and nodes (adapters/kube/informer.py); None: every read lists.
        self.cache: ClusterCache | None = None

    # ----- HTTP plumbing ---------------------------------------------------------------------
    def _send(self, method: str, path: str, *, query: list[tuple[str, str]] | None = None,
              body: Any = None, content_type: str | None = None,
              timeout: float | tuple[float, float] | None = None) -> Any:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        params = self._api.param_serialize(method=method, resource_path=path, query_params=query or [],
                                           header_params=headers, body=body, auth_settings=["BearerToken"])
        try:
            return self._api.call_api(*params, _request_timeout=timeout or self._timeout)
        except urllib3.exceptions.HTTPError as exc:
            raise ClusterError(f"{method} {path}: cannot reach the Kubernetes API: {exc}") from exc

    def _raise_for(self, method: str, path: str, resp: Any) -> None:
        status = int(resp.status)
        if 200 <= status < 300:
            return
        data = resp.read()
        message, reason = data.decode(errors="replace")[:500], ""
        cause_reasons: tuple[str, ...] = ()
        try:
            parsed = json.loads(data)
            message, reason = str(parsed.get("message") or message), str(parsed.get("reason") or "")
            raw_causes = [c for c in (parsed.get("details") or {}).get("causes") or () if isinstance(c, dict)]
            causes = [str(c.get("message")) for c in raw_causes if c.get("message")]
            cause_reasons = tuple(str(c.get("reason")) for c in raw_causes if c.get("reason"))
            if causes:
                message = f"{message} ({'; '.join(causes)})"
        except (ValueError, AttributeError):
            pass
        cls = NotFoundError if status == 404 else ConflictError if status == 409 else ClusterError
        raise cls(f"{method} {path}: HTTP {status} {reason}: {message}", status=status, reason=reason,
                  causes=cause_reasons)

    def _backoff(self, attempt: int) -> float:
        return float(min(self._backoff_max, self._backoff_base * (2 ** attempt)))

    def _call(self, method: str, path: str, *, retry: bool = False, decode: Decode | None = None,
              **kwargs: Any) -> Raw:
        """One request, parsed (by ``decode``: a lean decoder of ``adapters/kube/lean.py``, or all of the
        JSON). ``retry``: retry 429 / 5xx / unreachable (for reads and idempotent writes)."""
        attempts = self._read_attempts if retry else 1
        for attempt in range(attempts):
            try:
                resp = self._send(method, path, **kwargs)
                self._raise_for(method, path, resp)
                data = resp.read()
                if not data:
                    return {}
                try:
                    return (decode or json.loads)(data)
                except ValueError as exc:
                    raise ClusterError(f"{method} {path}: the API server's answer does not parse: {exc}",
                                       status=int(resp.status)) from exc
            except ClusterError as exc:
                if attempt + 1 >= attempts or not exc.retryable:
                    raise
                self._sleep(self._backoff(attempt))
        raise AssertionError("unreachable")

    def _list_all(self, path: str, *, field_selector: str | None = None, label_selector: str | None = None,
                  parse: Callable[[Raw], Any] | None = None, decode: Decode | None = None) -> tuple[list[Any], str]:
        """Every item of a collection, page by page, and the list's resourceVersion (the first page's:
        every page of a paginated list is served from that one snapshot). An expired continue token
        (410 Gone) throws the pages read so far away and lists again from scratch, as client-go's
        reflector does: appending the new list to the old pages would return objects twice."""
        base: list[tuple[str, str]] = [("limit", str(self._page_size))]
        if field_selector:
            base.append(("fieldSelector", field_selector))
        if label_selector:
            base.append(("labelSelector", label_selector))
        for _ in range(self._read_attempts):
            items: list[Any] = []
            version = ""
            token: str | None = None
            try:
                while True:
                    query = [*base, ("continue", token)] if token else base
                    page = self._call("GET", path, retry=True, query=query, decode=decode)
                    # Parsed page by page, and each page's JSON let go once parsed: a 70k-pod list never
                    # holds more than one page's raw objects at once.
                    raw = page.pop("items", None) or ()
                    items.extend(map(parse, raw) if parse is not None else raw)
                    del raw
                    meta = page.get("metadata") or {}
                    version = version or str(meta.get("resourceVersion") or "")
                    token = meta.get("continue") or None
                    if not token:
                        return items, version
            except ClusterError as exc:
                if exc.status != 410 or not token:
                    raise
        raise ClusterError(f"GET {path}: the list expired (410 Gone) {self._read_attempts} times in a row",
                           status=410, reason="Expired")

    def _parse_all(self, parse: Callable[[Raw], T], path: str, *, field_selector: str | None = None,
                   label_selector: str | None = None) -> list[T]:
        with gc_paused():
            return self._list_all(path, field_selector=field_selector, label_selector=label_selector, parse=parse,
                                  decode=lean.decoder_for(path))[0]

    def list_parsed(self, path: str, parse: Callable[[Raw], T], *,
                    label_selector: str | None = None) -> tuple[list[T], str]:
        """Every object of a collection, parsed, and the list's resourceVersion (the cache's list)."""
        with gc_paused():
            return self._list_all(path, parse=parse, label_selector=label_selector, decode=lean.decoder_for(path))

    def _get(self, path: str, *, decode: Decode | None = None) -> Raw | None:
        try:
            return self._call("GET", path, retry=True, decode=decode)
        except NotFoundError:
            return None

    # ----- reads -----------------------------------------------------------------------------
    def list_raw(self, path: str) -> list[Raw]:
        """Every object of an API collection (e.g. ``/api/v1/pods``) as raw JSON: for ``autoscaler
        snapshot``, which writes the cluster's own shapes."""
        return self._list_all(path)[0]

    def pending_pods(self) -> list[Pod]:
        pods = self._parse_all(pod_from_dict, "/api/v1/pods", field_selector=PENDING_FIELD_SELECTOR)
        return [p for p in pods if p.is_pending]

    def pods(self, *, node_name: str | None = None, label_selector: str | None = None,
             namespace: str | None = None) -> list[Pod]:
        path = f"/api/v1/namespaces/{_q(namespace)}/pods" if namespace else "/api/v1/pods"
        if self.cache is not None and not (node_name or label_selector or namespace):
            return self.cache.pods()
        fs = f"spec.nodeName={node_name}" if node_name else None
        return self._parse_all(pod_from_dict, path, field_selector=fs, label_selector=label_selector)

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        raw = self._get(f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}", decode=lean.pod)
        return pod_from_dict(raw) if raw is not None else None

    def nodes(self, *, label_selector: str | None = None) -> list[Node]:
        if self.cache is not None and not label_selector:
            return self.cache.nodes()
        return self._parse_all(node_from_dict, "/api/v1/nodes", label_selector=label_selector)

    def get_node(self, name: str) -> Node | None:
        raw = self._get(f"/api/v1/nodes/{_q(name)}")
        return node_from_dict(raw) if raw is not None else None

    def daemonsets(self) -> list[DaemonSet]:
        return self._parse_all(daemonset_from_dict, "/apis/apps/v1/daemonsets")

    def pdbs(self) -> list[PodDisruptionBudget]:
        return self._parse_all(pdb_from_dict, "/apis/policy/v1/poddisruptionbudgets")

    def pvcs(self) -> list[PersistentVolumeClaim]:
        return self._parse_all(pvc_from_dict, "/api/v1/persistentvolumeclaims")

    def pvs(self) -> list[PersistentVolume]:
        return self._parse_all(pv_from_dict, "/api/v1/persistentvolumes")

    def storage_classes(self) -> list[StorageClass]:
        return self._parse_all(storage_class_from_dict, "/apis/storage.k8s.io/v1/storageclasses")

    def namespaces(self) -> dict[str, dict[str, str]]:
        return dict(self._parse_all(namespace_from_dict, "/api/v1/namespaces"))

    # ----- node actions ----------------------------------------------------------------------
    def _node_path(self, name: str) -> str:
        return f"/api/v1/nodes/{_q(name)}"

    def _update_node(self, name: str, change: Callable[[Raw], Raw | None]) -> bool:
        """Read-modify-write with a resourceVersion precondition, retried on 409 Conflict.
        ``change`` returns the merge patch to send, or None when the node already is as wanted."""
        path = self._node_path(name)
        for attempt in range(_CONFLICT_ATTEMPTS):
            node = self._call("GET", path, retry=True)
            patch = change(node)
            if patch is None:
                return False
            patch.setdefault("metadata", {})["resourceVersion"] = node["metadata"]["resourceVersion"]
            try:
                # 429 / 5xx are retried with backoff here; a 409 (someone else wrote the node, or our own
                # retried PATCH had already landed) re-reads the node and recomputes the patch.
                self._call("PATCH", path, retry=True, body=patch, content_type="application/merge-patch+json")
                return True
            except ClusterError as exc:
                if exc.status != 409 or attempt + 1 >= _CONFLICT_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    def _set_unschedulable(self, name: str, value: bool) -> bool:
        def change(node: Raw) -> Raw | None:
            if bool((node.get("spec") or {}).get("unschedulable")) == value:
                return None
            return {"spec": {"unschedulable": value if value else None}}
        return self._update_node(name, change)

    def cordon(self, name: str) -> bool:
        return self._set_unschedulable(name, True)

    def uncordon(self, name: str) -> bool:
        return self._set_unschedulable(name, False)

    def add_taint(self, name: str, taint: Taint) -> bool:
        wanted: Raw = {"key": taint.key, "effect": taint.effect}
        if taint.value:
            wanted["value"] = taint.value

        def change(node: Raw) -> Raw | None:
            taints = list((node.get("spec") or {}).get("taints") or ())
            same = [t for t in taints if t.get("key") == taint.key and t.get("effect") == taint.effect]
            if same and all((t.get("value") or "") == taint.value for t in same):
                return None
            kept = [t for t in taints if not (t.get("key") == taint.key and t.get("effect") == taint.effect)]
            return {"spec": {"taints": [*kept, wanted]}}
        return self._update_node(name, change)

    def remove_taint(self, name: str, *, key: str, effect: str | None = None) -> bool:
        def change(node: Raw) -> Raw | None:
            taints = list((node.get("spec") or {}).get("taints") or ())
            kept = [t for t in taints if not (t.get("key") == key and (effect is None or t.get("effect") == effect))]
            if len(kept) == len(taints):
                return None
            return {"spec": {"taints": kept or None}}
        try:
            return self._update_node(name, change)
        except NotFoundError:
            return False

    def _patch_meta(self, name: str, field: str, values: Mapping[str, str | None], *,
                    resource_version: str = "") -> None:
        # With a resource_version the API server refuses the patch with 409 unless the node is still at it.
        meta: Raw = {field: dict(values), **({"resourceVersion": resource_version} if resource_version else {})}
        if values:
            self._call("PATCH", self._node_path(name), retry=True, body={"metadata": meta},
                       content_type="application/merge-patch+json")

    def label_node(self, name: str, labels: Mapping[str, str | None]) -> None:
        self._patch_meta(name, "labels", labels)

    def annotate_node(self, name: str, annotations: Mapping[str, str | None], *, resource_version: str = "") -> None:
        self._patch_meta(name, "annotations", annotations, resource_version=resource_version)

    def delete_node(self, name: str, *, release_finalizers: Collection[str] = ()) -> bool:
        try:
            deleted = self._call("DELETE", self._node_path(name), retry=True)
        except NotFoundError:
            return False
        held = set((deleted.get("metadata") or {}).get("finalizers") or ()) & set(release_finalizers)
        if held:
            self._release_finalizers(name, held)
        return True

    def _release_finalizers(self, name: str, finalizers: Collection[str]) -> None:
        """Remove ``finalizers`` from a Node being deleted (a merge patch sets the whole list, so it is
        sent with the resourceVersion it was computed from); the API server completes the delete once the
        list is empty. Other controllers' finalizers stay."""
        def change(node: Raw) -> Raw | None:
            held = list((node.get("metadata") or {}).get("finalizers") or ())
            kept = [f for f in held if f not in finalizers]
            return None if kept == held else {"metadata": {"finalizers": kept or None}}
        with contextlib.suppress(NotFoundError):  # already gone: someone else released it
            self._update_node(name, change)

    # ----- pod actions -----------------------------------------------------------------------
    def evict(self, namespace: str, name: str, *, deadline: float, uid: str | None = None,
              grace_seconds: int | None = None, retry_blocked: bool = True) -> EvictionResult:
        key = f"{namespace}/{name}"
        path = f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}/eviction"
        options: Raw = {}
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        if uid:
            options["preconditions"] = {"uid": uid}
        body: Raw = {"apiVersion": "policy/v1", "kind": "Eviction",
                     "metadata": {"name": name, "namespace": namespace}}
        if options:
            body["deleteOptions"] = options
        attempt = throttled = 0
        while True:
            attempt += 1
            try:
                self._call("POST", path, body=body, content_type="application/json")
                return EvictionResult(key, "evicted", attempts=attempt, throttled_attempts=throttled)
            except NotFoundError:
                return EvictionResult(key, "gone", attempts=attempt, throttled_attempts=throttled)
            except ClusterError as exc:
                if exc.status == 409 and uid:
                    return EvictionResult(key, "gone", "a new pod of the same name replaced it", attempt,
                                          throttled)
                if exc.retryable:
                    throttled += 1
                wait = self._backoff(attempt - 1)
                again = exc.retryable or (exc.pdb_refusal and retry_blocked)
                if not again or self._clock.monotonic() + wait > deadline:
                    outcome: Literal["blocked", "throttled", "error"] = (
                        "blocked" if exc.pdb_refusal else "throttled" if exc.retryable else "error")
                    return EvictionResult(key, outcome, str(exc), attempt, throttled)
                self._sleep(wait)

    def delete_pod(self, namespace: str, name: str, *, grace_seconds: int | None = None) -> bool:
        body = {"gracePeriodSeconds": grace_seconds} if grace_seconds is not None else None
        try:
            self._call("DELETE", f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}", retry=True,
                       body=body, content_type="application/json")
            return True
        except NotFoundError:
            return False

    def record_event(self, target: Pod | Node | ObjectRef, *, reason: str, message: str,
                     event_type: Literal["Normal", "Warning"] = "Normal", strict: bool = False) -> bool:
        namespace, event = event_body(target, reason=reason, message=message, event_type=event_type,
                                      component=self._component, now=self._clock.now())
        try:
            self._call("POST", f"/api/v1/namespaces/{_q(namespace)}/events", retry=True, body=event,
                       content_type="application/json")
            return True
        except ClusterError:
            if strict:
                raise
            return False

    # ----- watch -----------------------------------------------------------------------------
    def _relist_pending(self) -> tuple[list[Pod], str]:
        items, version = self._list_all("/api/v1/pods", field_selector=PENDING_FIELD_SELECTOR, decode=lean.pod_page)
        pods = [pod_from_dict(item) for item in items]
        return [p for p in pods if p.is_pending], version

    def _current_rv(self) -> str:
        page = self._call("GET", "/api/v1/pods", retry=True,
                          query=[("limit", "1"), ("fieldSelector", PENDING_FIELD_SELECTOR)])
        return str((page.get("metadata") or {}).get("resourceVersion") or "")

    def list_unbound_pods(self, parse: Callable[[Raw], T]) -> tuple[list[T], str]:
        """Every unbound, unfinished pod, ``parse``d page by page from only the fields the provisionable test
        reads (``lean.watched_pod_page``), and the list's resourceVersion (the watcher's list): 50,000 pending
        pods fit the 128 MB watcher."""
        with gc_paused():
            return self._list_all("/api/v1/pods", field_selector=PENDING_FIELD_SELECTOR, parse=parse,
                                  decode=lean.watched_pod_page)

    def watch_unbound_pods_raw(self, *, resource_version: str, timeout_seconds: float) -> Iterator[Raw]:
        """One watch stream of unbound, unfinished pods (a pod bound since arrives as DELETED); see watch_raw."""
        return self.watch_raw("/api/v1/pods", resource_version=resource_version, timeout_seconds=timeout_seconds,
                              field_selector=PENDING_FIELD_SELECTOR)

    def watch_raw(self, path: str, *, resource_version: str, timeout_seconds: float,
                  field_selector: str | None = None, quiet_seconds: float | None = None,
                  label_selector: str | None = None) -> Iterator[Raw]:
        """One watch stream of a collection from ``resource_version``: ``{"type", "object"}`` events,
        bookmarks included. Raises ClusterError: status 410 when the version is too old (as a status or an
        ERROR event), status 0 when the stream broke off (retryable). With ``quiet_seconds`` the stream ends
        normally once nothing has arrived for that long: a cache catching up has then read the backlog."""
        query = [("watch", "1"), ("resourceVersion", resource_version), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(max(1, int(timeout_seconds))))]
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if label_selector:
            query.append(("labelSelector", label_selector))
        if quiet_seconds is None:
            resp = self._send("GET", path, query=query, timeout=(10.0, timeout_seconds + 10.0))
        else:  # the header within the watch's own timeout, however slow the server; then quiet between events
            try:
                resp = open_stream(self._api, path, query=query, connect=10.0, quiet=quiet_seconds,
                                   header=min(10.0, max(1, int(timeout_seconds))))
            except urllib3.exceptions.HTTPError as exc:  # a header not in time too: not quiet, but unanswered
                raise ClusterError(f"GET {path}: cannot reach the Kubernetes API: {exc}") from exc
        self._raise_for("GET", f"{path}?watch=1", resp)
        done = False
        try:
            for event in watch_events(resp.response):
                if event.get("type") == "ERROR":
                    obj = event.get("object") or {}
                    raise ClusterError(f"watch {path}: {obj.get('message')}", status=int(obj.get("code") or 0),
                                       reason=str(obj.get("reason") or ""))
                yield event
            done = True
        except urllib3.exceptions.ReadTimeoutError as exc:
            if quiet_seconds is None:
                raise ClusterError(f"watch {path}: the stream went silent: {exc}") from exc
        except (urllib3.exceptions.HTTPError, ValueError, OSError) as exc:
            # The stream broke off mid-event (connection reset, truncated chunk): the caller resumes.
            raise ClusterError(f"watch {path}: the stream broke off: {exc}") from exc
        finally:
            if not done:  # left early (caught up, quiet, failed): this connection cannot be reused
                resp.response.close()
            resp.response.release_conn()

    def watch_pending_pods(self, *, timeout_seconds: float,
                           resource_version: str | None = None) -> Iterator[Pod]:
        """Watch pods becoming pending until the timeout. A stream that ends or drops resumes from the
        last resourceVersion seen; a resume the server can no longer serve (410 Gone, as a status or as
        an ERROR event) lists the pending pods again and yields them all before watching on from the
        list's version, as client-go's reflector does: starting from "now" would skip the pods that
        went pending in the gap."""
        end = self._clock.monotonic() + timeout_seconds
        rv = resource_version or self._current_rv()
        failures = 0
        while (left := end - self._clock.monotonic()) > 0:
            if failures:
                self._sleep(min(self._backoff(failures - 1), max(0.0, end - self._clock.monotonic())))
                if end - self._clock.monotonic() <= 0:
                    return
            try:
                for event in self.watch_unbound_pods_raw(resource_version=rv, timeout_seconds=left):
                    kind, obj = event.get("type"), event.get("object") or {}
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    failures = 0
                    if kind in ("ADDED", "MODIFIED"):
                        pod = pod_from_dict(obj)
                        if pod.is_pending:
                            yield pod
            except ClusterError as exc:
                if exc.status != 410:
                    if not exc.retryable:
                        raise
                    failures += 1
                    continue
                pods, rv = self._relist_pending()
                yield from pods

