"""The object store behind the Kubernetes API emulator: resources, resourceVersions, selectors,
pagination, the watch log, patches, bindings and evictions with the API server's PDB arithmetic.

Tests may seed and inspect it directly (``store.create``, ``store.get``, ``store.seed``); every
write bumps the global resourceVersion and is seen by open watches, except ``seed`` which is the
fast bulk path for benchmarks and sets no watch events.

Where the emulator simplifies: there are no workload controllers, so a PDB's ``expectedPods`` is the
number of non-terminal pods its selector matches (the disruption controller would use the owning
controller's scale); pods are removed at once on delete unless ``graceful_deletion`` is set, in which
case they keep a ``deletionTimestamp`` until ``finish_terminating()`` (standing in for the kubelet).

Finalizers are honoured as the API server does: deleting an object whose ``metadata.finalizers`` is not
empty only sets its ``deletionTimestamp`` (the object stays, readable and patchable); the write that
empties the list removes it; no new finalizer may be added to an object being deleted; an update that sets
a ``deletionTimestamp`` on an object not being deleted is refused (422, as the API server's), and one of an
object being deleted cannot change or remove it.
"""

from __future__ import annotations

import base64
import bisect
import copy
import json
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from simulator.kube_patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from simulator.kube_selectors import Predicate, SelectorError, field_predicate, label_predicate

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)

CRITICAL_CLASSES = ("system-cluster-critical", "system-node-critical")


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


RESOURCES: tuple[Resource, ...] = (
    Resource("", "v1", "pods", "Pod", True, ("po",), ("status", "binding", "eviction")),
    Resource("", "v1", "nodes", "Node", False, ("no",), ("status",)),
    Resource("", "v1", "events", "Event", True, ("ev",)),
    Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, ("pvc",), ("status",)),
    Resource("", "v1", "persistentvolumes", "PersistentVolume", False, ("pv",), ("status",)),
    Resource("", "v1", "namespaces", "Namespace", False, ("ns",), ("status",)),
    Resource("apps", "v1", "daemonsets", "DaemonSet", True, ("ds",), ("status",)),
    Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ("pdb",), ("status",)),
    Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", False, ("sc",)),
)
BY_PLURAL = {r.plural: r for r in RESOURCES}


class ApiError(Exception):
    """An error the API server returns as a ``Status`` object."""

    def __init__(self, code: int, reason: str, message: str, *, details: Mapping[str, Any] | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, dict(details or {})

    def status(self) -> Obj:
        body: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                     "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:
            body["details"] = self.details
        return body


def _not_found(res: Resource, name: str) -> ApiError:
    kind = f"{res.plural}.{res.group}" if res.group else res.plural
    return ApiError(404, "NotFound", f'{kind} "{name}" not found',
                    details={"name": name, "group": res.group, "kind": res.plural})


def now_rfc3339(at: float | None = None) -> str:
    """RFC 3339 at one-second resolution, as the API server writes timestamps: ``at`` (epoch seconds) or now."""
    moment = datetime.now(UTC) if at is None else datetime.fromtimestamp(at, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class WatchEvent:
    rv: int
    plural: str
    type: str  # ADDED | MODIFIED | DELETED
    obj: Obj
    old: Obj | None = None


@dataclass
class _Injected:
    path_substring: str
    status: int
    remaining: int
    method: str | None
    query_substring: str | None = None
    delay: float = 0.0  # seconds before the answer (``status`` 200: no error, only the wait)


@dataclass
class PdbStatus:
    expected_pods: int
    current_healthy: int
    desired_healthy: int
    disruptions_allowed: int

    def as_dict(self) -> Obj:
        return {"expectedPods": self.expected_pods, "currentHealthy": self.current_healthy,
                "desiredHealthy": self.desired_healthy, "disruptionsAllowed": self.disruptions_allowed,
                "observedGeneration": 1}


def _scaled(value: Any, total: int, *, where: str) -> int:
    if isinstance(value, int):
        return value
    text = str(value)
    if text.endswith("%"):
        try:
            pct = int(text[:-1])
        except ValueError as exc:
            raise ApiError(422, "Invalid", f"{where}: {text!r} is not an integer or percentage") from exc
        return math.ceil(pct * total / 100)  # the API server rounds percentages up
    try:
        return int(text)
    except ValueError as exc:
        raise ApiError(422, "Invalid", f"{where}: {text!r} is not an integer or percentage") from exc


def _namespace_name_label(ns: Obj) -> None:
    """The API server labels every namespace with its name (on create and on every update)."""
    meta = ns["metadata"]
    meta["labels"] = {**(meta.get("labels") or {}), "kubernetes.io/metadata.name": meta["name"]}


def _graceful(pod: Mapping[str, Any]) -> bool:
    """Whether the API server deletes a pod gracefully (CheckGracefulDelete): only a pod bound to a node and
    not finished waits for its kubelet; an unbound or finished pod is removed at once."""
    return bool((pod.get("spec") or {}).get("nodeName")) and \
        (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _next_bookmark(now: float, end: float) -> float | None:
    """When the watch cache sends a watcher's next bookmark: in a minute, or 2 s before its timeout if that
    comes first; None once that moment has passed."""
    at = min(now + 60.0, end - 2.0)
    return at if at > now else None


def pod_ready(pod: Mapping[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or ())


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics for policy/v1: nil matches nothing, empty matches everything."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or ():
        key, op, values = e.get("key"), e.get("operator"), set(e.get("values") or ())
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def pdb_status(pdb: Mapping[str, Any], pods: list[Obj]) -> PdbStatus:
    """The disruption controller's arithmetic over the pods a PDB selects."""
    spec = pdb.get("spec") or {}
    where = f"PodDisruptionBudget {pdb['metadata'].get('namespace')}/{pdb['metadata']['name']}"
    live = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    expected = len(live)
    healthy = sum(1 for p in live if pod_ready(p))
    if spec.get("maxUnavailable") is not None:
        max_unavailable = _scaled(spec["maxUnavailable"], expected, where=f"{where}.spec.maxUnavailable")
        desired = max(0, expected - max_unavailable)
    elif spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected, where=f"{where}.spec.minAvailable")
    else:
        desired = expected  # neither set: the API server defaults minAvailable to 1 on create
    return PdbStatus(expected, healthy, desired, max(0, healthy - desired))


def label_selector_problems(selector: Mapping[str, Any], where: str) -> list[str]:
    """apimachinery's ValidateLabelSelector on the operators: In/NotIn need values, Exists/DoesNotExist take
    none, and no other operator (Gt/Lt are node selector operators) belongs in a LabelSelector."""
    problems = []
    for index, expr in enumerate(selector.get("matchExpressions") or ()):
        at, operator, values = f"{where}.matchExpressions[{index}]", expr.get("operator"), expr.get("values") or []
        if operator in ("In", "NotIn") and not values:
            problems.append(f"{at}.values: Required value: must be specified when `operator` is 'In' or 'NotIn'")
        elif operator in ("Exists", "DoesNotExist") and values:
            problems.append(f"{at}.values: Forbidden: may not be specified when `operator` is 'Exists' or "
                            "'DoesNotExist'")
        elif operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            problems.append(f'{at}.operator: Invalid value: "{operator}": not a valid selector operator')
    return problems


# The resources whose registry strategy refuses an update without a resourceVersion
# (AllowUnconditionalUpdate false); the others here take one as "whatever is stored now".
CONDITIONAL_UPDATES_ONLY = frozenset({"poddisruptionbudgets"})


def _check_budget_selector(obj: Obj) -> None:
    """ValidatePodDisruptionBudget on the selector, which the API server runs on create and on every update
    (policy/v1 lets an update change the selector): a budget with an invalid one is refused, 422."""
    selector = (obj.get("spec") or {}).get("selector")
    problems = label_selector_problems(selector, "spec.selector") if selector else []
    if problems:
        name = (obj.get("metadata") or {}).get("name")
        listed = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
        raise ApiError(422, "Invalid", f'PodDisruptionBudget.policy "{name}" is invalid: {listed}')


def _check_create_request(res: Resource, obj: Obj, namespace: str | None) -> None:
    """What the API server's create strategies and validation do to a created object before it is stored."""
    if res.plural == "pods":
        # PrepareForCreate: the status is the server's; the kubelet reports the rest through pods/status.
        obj["status"] = {"phase": "Pending"}
    elif res.plural == "poddisruptionbudgets":
        _check_budget_selector(obj)
    elif res.plural == "events" and not obj.get("eventTime"):
        # core/v1 Event validation: the involved object is in the Event's namespace ("default" or none for a
        # cluster-scoped object).
        ns = namespace or (obj.get("metadata") or {}).get("namespace") or "default"
        involved = str((obj.get("involvedObject") or {}).get("namespace") or "")
        if (involved and involved != ns) or (not involved and ns != "default"):
            raise ApiError(422, "Invalid", f'Event "{(obj.get("metadata") or {}).get("name")}" is invalid: '
                           f'involvedObject.namespace: Invalid value: "{involved}": does not match event.namespace')


@dataclass
class Store:
    """Thread-safe object store with a global resourceVersion and a watch log."""

    graceful_deletion: bool = False
    watch_log_limit: int = 50_000
    _objs: dict[str, dict[Key, Obj]] = field(default_factory=lambda: {r.plural: {} for r in RESOURCES})
    _json: dict[str, dict[Key, bytes]] = field(default_factory=lambda: {r.plural: {} for r in RESOURCES})
    _sorted: dict[str, list[Key] | None] = field(default_factory=dict)
    _rv: int = 1
    _log: list[WatchEvent] = field(default_factory=list)
    _log_rvs: list[int] = field(default_factory=list)
    _compacted_rv: int = 0
    _injected: list[_Injected] = field(default_factory=list)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, path) served, for tests
    watches: list[str] = field(default_factory=list)  # paths served as watch streams, for tests
    # Where timestamps come from: the wall clock, or the simulator's virtual clock (simulator/sim).
    clock: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        self._cond = threading.Condition(self._lock)
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.create("namespaces", {"metadata": {"name": ns}})

    # ----- error injection -------------------------------------------------------------------
    def inject_error(self, path_substring: str, status: int, count: int = 1, *, method: str | None = None,
                     query_substring: str | None = None) -> None:
        """The next ``count`` requests whose path contains ``path_substring`` (and, if given, use
        ``method`` and have ``query_substring`` in the query string, e.g. ``continue=`` for a page after
        the first) get HTTP ``status`` with a Kubernetes Status body."""
        with self._lock:
            self._injected.append(_Injected(path_substring, status, count, method.upper() if method else None,
                                            query_substring))

    def inject_delay(self, path_substring: str, seconds: float, count: int = 1, *, method: str | None = None,
                     query_substring: str | None = None) -> None:
        """The next ``count`` matching requests (as ``inject_error`` matches them) are answered ``seconds``
        late, header included: a slow or loaded API server (a watch's 200 header arriving late)."""
        with self._lock:
            self._injected.append(_Injected(path_substring, 200, count, method.upper() if method else None,
                                            query_substring, delay=seconds))

    def take_injected(self, method: str, path: str, query: str = "") -> int | None:
        """The injected error status for this request (0: drop the connection), else None; an injected
        delay is waited out here, before anything is answered."""
        delay = 0.0
        with self._lock:
            self.requests.append((method, path))
            for inj in self._injected:
                if inj.query_substring is not None and inj.query_substring not in query:
                    continue
                if inj.remaining > 0 and inj.path_substring in path and inj.method in (None, method):
                    inj.remaining -= 1
                    if inj.delay:
                        delay = inj.delay
                        break
                    return inj.status  # 0: the connection is dropped mid-response
        if delay:
            time.sleep(delay)  # outside the lock: the server's other requests (the writes) go on meanwhile
        return None

    def compact(self) -> None:
        """Drop the whole watch history, as etcd compaction does: older resourceVersions get 410 Gone on
        watch, and continue tokens issued before now get 410 on list."""
        with self._lock:
            self._compacted_rv = int(self._bump())
            self._log.clear()
            self._log_rvs.clear()

    # ----- basics ----------------------------------------------------------------------------
    def changes_since(self, rv: int) -> list[WatchEvent]:
        """The watch log after resourceVersion ``rv``, oldest first, without copying the objects (an
        informer for in-process controllers: the simulator's kubelet, scheduler and controllers).
        Raises ApiError 410 when the log was compacted past ``rv``, as a watch would."""
        with self._lock:
            if rv < self._compacted_rv:
                raise ApiError(410, "Expired", f"too old resource version: {rv} ({self._compacted_rv})")
            return self._log[bisect.bisect_right(self._log_rvs, rv):]

    @property
    def resource_version(self) -> int:
        return self._rv

    def _res(self, plural: str) -> Resource:
        try:
            return BY_PLURAL[plural]
        except KeyError:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({plural})") from None

    def _key(self, res: Resource, namespace: str | None, name: str) -> Key:
        return ((namespace or "default") if res.namespaced else "", name)

    def _bump(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _store(self, res: Resource, key: Key, obj: Obj | None, *, event: str | None, old: Obj | None) -> None:
        objs = self._objs[res.plural]
        if obj is None:
            objs.pop(key, None)
            self._json[res.plural].pop(key, None)
            self._sorted[res.plural] = None
        else:
            if key not in objs:
                self._sorted[res.plural] = None
            objs[key] = obj
            self._json[res.plural].pop(key, None)
        if event is not None:
            payload = obj if obj is not None else old
            assert payload is not None
            self._log.append(WatchEvent(self._rv, res.plural, event, payload, old))
            self._log_rvs.append(self._rv)
            if len(self._log) > self.watch_log_limit:
                cut = len(self._log) // 2
                self._compacted_rv = self._log_rvs[cut - 1]
                del self._log[:cut]
                del self._log_rvs[:cut]
            self._cond.notify_all()

    def _decorate(self, res: Resource, obj: Obj) -> Obj:
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        return obj

    def get(self, plural: str, namespace: str | None, name: str) -> Obj:
        res = self._res(plural)
        with self._lock:
            obj = self._objs[plural].get(self._key(res, namespace, name))
            if obj is None:
                raise _not_found(res, name)
            if plural == "poddisruptionbudgets":
                return self._with_pdb_status(obj)
            return copy.deepcopy(obj)

    def peek(self, plural: str, namespace: str | None, name: str) -> Obj | None:
        """One object as stored, not copied, or None: for in-process readers that never mutate it (the
        simulator asks, per launch and per pod, whether a node is leaving)."""
        res = self._res(plural)
        with self._lock:
            return self._objs[plural].get(self._key(res, namespace, name))

    def exists(self, plural: str, namespace: str | None, name: str) -> bool:
        res = self._res(plural)
        with self._lock:
            return self._key(res, namespace, name) in self._objs[plural]

    def _read(self, plural: str, namespace: str | None, name: str) -> Obj:
        """``get`` without the copy, for the store's own helpers that only read the object (404 if none)."""
        obj = self.peek(plural, namespace, name)
        if obj is None:
            raise _not_found(self._res(plural), name)
        return obj

    def view(self, plural: str) -> list[Obj]:
        """Every object of a kind as stored, not copied: for in-process readers that never mutate what they
        get (the simulator's scheduler, controllers and sampler, where copying thousands of pods per
        event dominated the run)."""
        with self._lock:
            return list(self._objs[plural].values())

    def objects(self, plural: str) -> list[Obj]:
        """A deep copy of every object of a kind, for tests to inspect."""
        with self._lock:
            return [copy.deepcopy(o) for o in self._objs[plural].values()]

    # ----- create / update / delete ----------------------------------------------------------
    def _defaults(self, res: Resource, obj: Obj) -> None:
        meta = obj["metadata"]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now_rfc3339(self.clock()))
        meta.setdefault("generation", 1)
        if res.plural == "pods":
            obj.setdefault("spec", {})
            obj.setdefault("status", {}).setdefault("phase", "Pending")
        elif res.plural == "namespaces":
            obj.setdefault("status", {"phase": "Active"})
            _namespace_name_label(obj)
        elif res.plural == "poddisruptionbudgets":
            spec = obj.setdefault("spec", {})
            if spec.get("minAvailable") is None and spec.get("maxUnavailable") is None:
                spec["minAvailable"] = 1

    def create(self, plural: str, obj: Mapping[str, Any], *, namespace: str | None = None,
               request: bool = False) -> Obj:
        """``request``: a create sent to the API (``kube_api``), held to the API server's rules: a pod's
        status is the server's (Pending), the namespace must exist (404), an Event's involved object must be
        in its namespace (422), a PodDisruptionBudget's selector uses label selector operators only (422).
        Without it (tests and the simulator seeding the store) objects are stored as given and a missing
        namespace is created."""
        res = self._res(plural)
        new = copy.deepcopy(dict(obj))
        if request:
            _check_create_request(res, new, namespace)
        meta = new.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(422, "Invalid", f"{res.kind}: metadata.name or metadata.generateName is required")
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if res.namespaced:
            if namespace and meta.get("namespace") and meta["namespace"] != namespace:
                raise ApiError(400, "BadRequest", "the namespace of the provided object does not match "
                               "the namespace sent on the request")
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        with self._lock:
            key = self._key(res, meta.get("namespace"), meta["name"])
            if key in self._objs[plural]:
                raise ApiError(409, "AlreadyExists", f'{plural} "{meta["name"]}" already exists',
                               details={"name": meta["name"], "kind": plural})
            if res.namespaced and ("", key[0]) not in self._objs["namespaces"]:
                if request:  # the NamespaceLifecycle admission plugin
                    raise ApiError(404, "NotFound", f'namespaces "{key[0]}" not found',
                                   details={"name": key[0], "kind": "namespaces"})
                # Seeding: tests and the simulator create objects in namespaces they never declared.
                self.create("namespaces", {"metadata": {"name": key[0]}})
            self._defaults(res, new)
            self._decorate(res, new)
            new["metadata"]["resourceVersion"] = self._bump()
            self._store(res, key, new, event="ADDED", old=None)
            return copy.deepcopy(new)

    def seed(self, plural: str, objs: list[Obj]) -> None:
        """Fast bulk insert for benchmarks: takes ownership of ``objs``, records no watch events."""
        res = self._res(plural)
        with self._lock:
            store, cache = self._objs[plural], self._json[plural]
            for obj in objs:
                meta = obj.setdefault("metadata", {})
                if res.namespaced:
                    meta.setdefault("namespace", "default")
                self._defaults(res, obj)
                self._decorate(res, obj)
                self._rv += 1
                meta["resourceVersion"] = str(self._rv)
                key = self._key(res, meta.get("namespace"), meta["name"])
                store[key] = obj
                cache[key] = json.dumps(obj, separators=(",", ":")).encode()
            self._sorted[plural] = None

    def _write(self, res: Resource, key: Key, new: Obj, old: Obj, *, echo: bool = True) -> Obj:
        want = (new.get("metadata") or {}).get("resourceVersion")
        if want and want != old["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {res.plural} "{key[1]}": '
                           "the object has been modified; please apply your changes to the latest version "
                           "and try again", details={"name": key[1], "kind": res.plural})
        meta = new.setdefault("metadata", {})
        for immutable in ("name", "namespace", "uid", "creationTimestamp"):
            if immutable in old["metadata"]:
                meta[immutable] = old["metadata"][immutable]
        # Only a delete sets these; an update can neither set, change nor clear them. As the API server: an
        # update that names a deletionTimestamp for an object not being deleted is refused (422), one of an
        # object being deleted keeps the stored one whatever it names.
        sent = meta.get("deletionTimestamp")
        if sent and not old["metadata"].get("deletionTimestamp"):
            raise ApiError(422, "Invalid", f'{res.kind} "{key[1]}" is invalid: metadata.deletionTimestamp: Invalid '
                           f'value: "{sent}": field is immutable',
                           details={"name": key[1], "kind": res.kind, "causes": [{
                               "reason": "FieldValueInvalid", "message": f'Invalid value: "{sent}": field is immutable',
                               "field": "metadata.deletionTimestamp"}]})
        for server_set in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            if server_set in old["metadata"]:
                meta[server_set] = old["metadata"][server_set]
            else:
                meta.pop(server_set, None)
        deleting = bool(old["metadata"].get("deletionTimestamp"))
        added = set(meta.get("finalizers") or ()) - set(old["metadata"].get("finalizers") or ())
        if deleting and added:
            raise ApiError(422, "Invalid", f'{res.kind} "{key[1]}" is invalid: metadata.finalizers: Forbidden: '
                           f"no new finalizers can be added if the object is being deleted, found new finalizers "
                           f"{sorted(added)}")
        if res.plural == "poddisruptionbudgets":
            _check_budget_selector(new)
        self._decorate(res, new)
        if res.plural == "namespaces":
            _namespace_name_label(new)
        meta["resourceVersion"] = self._bump()
        if deleting and not meta.get("finalizers") and not (res.plural == "pods" and self.graceful_deletion):
            # The last finalizer is gone: the API server completes the pending delete.
            self._store(res, key, None, event="DELETED", old=new)
            return copy.deepcopy(new) if echo else new
        self._store(res, key, new, event="MODIFIED", old=old)
        return copy.deepcopy(new) if echo else new

    def _existing(self, res: Resource, plural: str, namespace: str | None, name: str) -> tuple[Key, Obj]:
        """The store key and current object; 404 when there is none. Call with the lock held."""
        key = self._key(res, namespace, name)
        old = self._objs[plural].get(key)
        if old is None:
            raise _not_found(res, name)
        return key, old

    def replace(self, plural: str, namespace: str | None, name: str, obj: Mapping[str, Any]) -> Obj:
        res = self._res(plural)
        if plural in CONDITIONAL_UPDATES_ONLY and not (obj.get("metadata") or {}).get("resourceVersion"):
            raise ApiError(422, "Invalid", f'{plural}.{res.group} "{name}" is invalid: metadata.resourceVersion: '
                           "Invalid value: 0: must be specified for an update")
        with self._lock:
            key, old = self._existing(res, plural, namespace, name)
            return self._write(res, key, copy.deepcopy(dict(obj)), old)

    def patch(self, plural: str, namespace: str | None, name: str, body: Any, *,
              content_type: str = "application/merge-patch+json", echo: bool = True) -> Obj:
        """``echo=False``: the result is the stored object itself, not a copy (in-process callers that
        ignore it; it must not be mutated)."""
        res = self._res(plural)
        with self._lock:
            key, old = self._existing(res, plural, namespace, name)
            ctype = content_type.split(";", 1)[0].strip()
            if ctype == "application/merge-patch+json":
                # Stored objects are never changed in place (every write stores a new one), so a merge
                # patch may share the subtrees it does not touch; merge_patch copies the paths it patches
                # and _write only changes the top level and metadata, copied here.
                meta = {k: v for k, v in old["metadata"].items() if k != "resourceVersion"}
                base = {**old, "metadata": meta}
            else:
                base = copy.deepcopy(old)
                base["metadata"].pop("resourceVersion", None)
            try:
                if ctype == "application/merge-patch+json":
                    new = merge_patch(base, body)
                elif ctype == "application/strategic-merge-patch+json":
                    if res.group not in ("", "apps", "policy", "storage.k8s.io"):
                        raise ApiError(415, "UnsupportedMediaType", "strategic merge patch is not supported "
                                       f"for {res.kind}")
                    new = strategic_merge_patch(base, body)
                elif ctype == "application/json-patch+json":
                    with_rv = copy.deepcopy(old)
                    new = json_patch(with_rv, body)
                    if new["metadata"].get("resourceVersion") == old["metadata"]["resourceVersion"]:
                        new["metadata"].pop("resourceVersion")
                else:
                    raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown "
                                   f"format - accepted media types include: application/json-patch+json, "
                                   f"application/merge-patch+json, application/strategic-merge-patch+json "
                                   f"(got {ctype!r})")
            except PatchError as exc:
                raise ApiError(422, "Invalid", str(exc)) from exc
            if not isinstance(new, dict):
                raise ApiError(422, "Invalid", f"patch of {res.kind} {name} did not produce an object")
            return self._write(res, key, new, old, echo=echo)

    def delete(self, plural: str, namespace: str | None, name: str, *,
               grace_period_seconds: int | None = None, precondition_uid: str | None = None) -> Obj:
        res = self._res(plural)
        with self._lock:
            key, old = self._existing(res, plural, namespace, name)
            if precondition_uid and old["metadata"].get("uid") != precondition_uid:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {res.kind} "{name}": the UID in '
                               f"the precondition ({precondition_uid}) does not match the UID in record "
                               f"({old['metadata'].get('uid')}). The object might have been deleted and then "
                               "recreated", details={"name": name, "kind": res.kind})
            if plural == "pods" and self.graceful_deletion and grace_period_seconds != 0 and _graceful(old):
                grace = grace_period_seconds if grace_period_seconds is not None else \
                    int((old.get("spec") or {}).get("terminationGracePeriodSeconds") or 30)
                held = old["metadata"].get("deletionGracePeriodSeconds")
                if old["metadata"].get("deletionTimestamp") and (held is None or grace >= int(held)):
                    return copy.deepcopy(old)  # already terminating; a delete may only shorten the grace period
                new = copy.deepcopy(old)
                # As the API server: the deletion's time plus its grace period (when the kubelet is due
                # to kill the containers), not the time of the DELETE.
                new["metadata"]["deletionTimestamp"] = now_rfc3339(self.clock() + grace)
                new["metadata"]["deletionGracePeriodSeconds"] = grace
                new["metadata"]["resourceVersion"] = self._bump()
                self._store(res, key, new, event="MODIFIED", old=old)
                return copy.deepcopy(new)
            if old["metadata"].get("finalizers"):
                # Kept until every finalizer is removed (by its controller, or by whoever gives up on it).
                if old["metadata"].get("deletionTimestamp"):
                    return copy.deepcopy(old)
                new = copy.deepcopy(old)
                new["metadata"]["deletionTimestamp"] = now_rfc3339(self.clock())
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                new["metadata"]["resourceVersion"] = self._bump()
                self._store(res, key, new, event="MODIFIED", old=old)
                return copy.deepcopy(new)
            gone = copy.deepcopy(old)
            gone["metadata"]["resourceVersion"] = self._bump()
            self._store(res, key, None, event="DELETED", old=gone)
            return gone

    def finish_terminating(self) -> int:
        """Stand in for the kubelet: remove every pod that has a deletionTimestamp. Returns how many."""
        with self._lock:
            keys = [k for k, p in self._objs["pods"].items()
                    if p["metadata"].get("deletionTimestamp") and not p["metadata"].get("finalizers")]
            for ns, name in keys:
                old = self._objs["pods"][(ns, name)]
                gone = copy.deepcopy(old)
                gone["metadata"]["resourceVersion"] = self._bump()
                self._store(BY_PLURAL["pods"], (ns, name), None, event="DELETED", old=gone)
            return len(keys)

    # ----- pod helpers for tests -------------------------------------------------------------
    def set_pod_ready(self, namespace: str, name: str, ready: bool = True, *, echo: bool = True) -> Obj:
        """Mark a pod Running and Ready (or not Ready), as the kubelet would report it."""
        status = "True" if ready else "False"
        pod = self._read("pods", namespace, name)
        conds = [c for c in (pod.get("status") or {}).get("conditions") or () if c.get("type") != "Ready"]
        conds.append({"type": "Ready", "status": status, "lastTransitionTime": now_rfc3339(self.clock())})
        return self.patch("pods", namespace, name, {"status": {"phase": "Running", "conditions": conds}}, echo=echo)

    def bind(self, namespace: str, name: str, node_name: str, *, echo: bool = True) -> Obj:
        """The pods/binding subresource: set spec.nodeName (once) and PodScheduled=True."""
        with self._lock:
            pod = self._read("pods", namespace, name)
            if (pod.get("spec") or {}).get("nodeName"):
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on pods/binding "{name}": '
                               f"pod {name} is already assigned to node \"{pod['spec']['nodeName']}\"")
            conds = [c for c in (pod.get("status") or {}).get("conditions") or () if c.get("type") != "PodScheduled"]
            conds.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339(self.clock())})
            return self.patch("pods", namespace, name, {"spec": {"nodeName": node_name},
                                                        "status": {"conditions": conds}}, echo=echo)

    # ----- eviction --------------------------------------------------------------------------
    def pdbs_for(self, pod: Mapping[str, Any]) -> list[Obj]:
        ns, labels = pod["metadata"].get("namespace"), pod["metadata"].get("labels") or {}
        return [p for (pns, _), p in self._objs["poddisruptionbudgets"].items()
                if pns == ns and selector_matches((p.get("spec") or {}).get("selector"), labels)]

    def _pdb_pods(self, pdb: Mapping[str, Any]) -> list[Obj]:
        ns, sel = pdb["metadata"].get("namespace"), (pdb.get("spec") or {}).get("selector")
        return [p for (pns, _), p in self._objs["pods"].items()
                if pns == ns and selector_matches(sel, p["metadata"].get("labels") or {})]

    def _with_pdb_status(self, pdb: Obj) -> Obj:
        out = copy.deepcopy(pdb)
        out["status"] = pdb_status(pdb, self._pdb_pods(pdb)).as_dict()
        return out

    def evict(self, namespace: str, name: str, body: Mapping[str, Any] | None = None) -> Obj:
        """policy/v1 Eviction, following the API server's eviction REST handler."""
        delete_opts = (body or {}).get("deleteOptions") or {}
        grace = delete_opts.get("gracePeriodSeconds")
        uid = (delete_opts.get("preconditions") or {}).get("uid")
        with self._lock:
            pod = self.get("pods", namespace, name)
            phase = (pod.get("status") or {}).get("phase")
            can_ignore = phase in ("Succeeded", "Failed", "Pending") or pod["metadata"].get("deletionTimestamp")
            if not can_ignore:
                pdbs = self.pdbs_for(pod)
                if len(pdbs) > 1:
                    raise ApiError(500, "InternalError", "This pod has more than one PodDisruptionBudget, "
                                   "which the eviction subresource does not support.")
                if pdbs:
                    self._check_budget(pdbs[0], pod)
            self.delete("pods", namespace, name, grace_period_seconds=grace, precondition_uid=uid)
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def _check_budget(self, pdb: Obj, pod: Obj) -> None:
        st = pdb_status(pdb, self._pdb_pods(pdb))
        policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") or "IfHealthyBudget"
        if not pod_ready(pod) and (policy == "AlwaysAllow" or (st.current_healthy >= st.desired_healthy > 0)):
            return
        if st.disruptions_allowed > 0:
            return
        raise ApiError(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
                       details={"causes": [{
                           "reason": "DisruptionBudget",
                           "message": f"The disruption budget {pdb['metadata']['name']} needs "
                                      f"{st.desired_healthy} healthy pods and has {st.current_healthy} currently",
                       }]})

    # ----- list / watch ----------------------------------------------------------------------
    def _predicates(self, res: Resource, label_selector: str | None, field_selector: str | None) -> list[Predicate]:
        try:
            preds = [label_predicate(label_selector), field_predicate(field_selector, kind=res.kind)]
        except SelectorError as exc:
            raise ApiError(400, "BadRequest", str(exc)) from exc
        return [p for p in preds if p is not None]

    def list_raw(self, plural: str, *, namespace: str | None = None, label_selector: str | None = None,
                 field_selector: str | None = None, limit: int | None = None,
                 continue_token: str | None = None) -> tuple[list[bytes], str, str | None, int | None]:
        """One page as pre-serialised JSON items: (items, resourceVersion, continue, remainingItemCount)."""
        res = self._res(plural)
        preds = self._predicates(res, label_selector, field_selector)
        start: Key | None = None
        if continue_token:
            try:
                tok = json.loads(base64.urlsafe_b64decode(continue_token.encode()))
                start = (str(tok["start"][0]), str(tok["start"][1]))
                token_rv = int(tok.get("rv") or 0)
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                raise ApiError(400, "BadRequest", f"continue key is not valid: {continue_token!r}") from exc
            if token_rv < self._compacted_rv:
                # The API server answers 410 once the snapshot a continue token points at is compacted.
                raise ApiError(410, "Expired", "The provided continue parameter is too old to display a "
                               "consistent list result. You can start a new list without the continue parameter.")
        with self._lock:
            keys = self._sorted.get(plural)
            if keys is None:
                keys = sorted(self._objs[plural])
                self._sorted[plural] = keys
            objs, cache = self._objs[plural], self._json[plural]
            i = bisect.bisect_right(keys, start) if start else 0
            if namespace and res.namespaced and (start is None or start[0] < namespace):
                i = max(i, bisect.bisect_left(keys, (namespace, "")))
            out: list[bytes] = []
            last: Key | None = None
            n = len(keys)
            pdb = plural == "poddisruptionbudgets"
            while i < n:
                key = keys[i]
                if namespace and res.namespaced and key[0] != namespace:
                    break
                obj = objs[key]
                if all(p(obj) for p in preds):
                    if limit and len(out) >= limit:
                        break
                    if pdb:
                        out.append(json.dumps(self._with_pdb_status(obj), separators=(",", ":")).encode())
                    else:
                        raw = cache.get(key)
                        if raw is None:
                            raw = json.dumps(obj, separators=(",", ":")).encode()
                            cache[key] = raw
                        out.append(raw)
                    last = key
                i += 1
            more = limit is not None and limit > 0 and i < n and len(out) >= limit and last is not None
            token = None
            if more and last is not None:
                token = base64.urlsafe_b64encode(json.dumps({"rv": self._rv, "start": list(last)}).encode()).decode()
            return out, str(self._rv), token, None

    def list(self, plural: str, **kwargs: Any) -> list[Obj]:
        """Every matching object (all pages), parsed, for tests."""
        items, _, _, _ = self.list_raw(plural, **kwargs)
        return [json.loads(b) for b in items]

    def watch(self, plural: str, *, namespace: str | None = None, resource_version: str | None = None,
              label_selector: str | None = None, field_selector: str | None = None,
              timeout: float = 60.0, stop: threading.Event | None = None,
              bookmarks: bool = False) -> Iterator[Obj]:
        """Watch events as ``{"type", "object"}`` dicts, like the API server's watch stream.

        No resourceVersion (or "0"): synthetic ADDED events for the current state first. An object
        that stops matching the selectors is sent as DELETED, one that starts matching as ADDED.
        ``bookmarks`` (allowWatchBookmarks): as the API server's watch cache, a BOOKMARK carrying the current
        resourceVersion every minute and 2 s before the watch's timeout, when the store moved past the last
        version this watch sent (changes it does not select) and no event is due.
        """
        res = self._res(plural)
        preds = self._predicates(res, label_selector, field_selector)

        def ok(obj: Obj | None) -> bool:
            if obj is None:
                return False
            if namespace and res.namespaced and obj["metadata"].get("namespace") != namespace:
                return False
            return all(p(obj) for p in preds)

        with self._lock:
            if resource_version in (None, "", "0"):
                since = self._rv
                initial = [copy.deepcopy(o) for o in self._objs[plural].values() if ok(o)]
            else:
                try:
                    since = int(str(resource_version))
                except ValueError as exc:
                    # What kube-apiserver answers (its storage fails to parse the version: an internal error).
                    raise ApiError(500, "InternalError", f'resourceVersion: Invalid value: "{resource_version}": '
                                   f"strconv.ParseUint: parsing {resource_version!r}: invalid syntax") from exc
                initial = []
                if since < self._compacted_rv:
                    initial = [{"__error__": True}]
        return self._watch_events(res, ok, since, initial, timeout=timeout, stop=stop, bookmarks=bookmarks)

    def _watch_events(self, res: Resource, ok: Callable[[Obj | None], bool], since: int, initial: list[Obj], *,
                      timeout: float, stop: threading.Event | None, bookmarks: bool) -> Iterator[Obj]:
        """The events of a watch ``watch`` established (validated, its start version and snapshot taken): a
        generator, so the caller can answer the header before the first event exists."""
        plural = res.plural
        start = time.monotonic()
        end = start + timeout
        next_mark = _next_bookmark(start, end) if bookmarks else None
        sent = since  # the newest version this watch has told its client about
        for obj in initial:
            if obj.get("__error__"):
                yield {"type": "ERROR", "object": ApiError(
                    410, "Expired", f"too old resource version: {since} ({self._compacted_rv})").status()}
                return
            yield {"type": "ADDED", "object": obj}
        while True:
            mark: Obj | None = None
            with self._cond:
                idx = bisect.bisect_right(self._log_rvs, since)
                while idx >= len(self._log):
                    now = time.monotonic()
                    remaining = end - now
                    if remaining <= 0 or (stop is not None and stop.is_set()):
                        return
                    if next_mark is not None and now >= next_mark and self._rv > sent:
                        since = sent = max(since, self._rv)
                        mark = {"type": "BOOKMARK", "object": {
                            "kind": res.kind, "apiVersion": res.api_version,
                            "metadata": {"resourceVersion": str(since)}}}
                        next_mark = _next_bookmark(now, end)
                        break
                    if next_mark is not None and now >= next_mark:
                        next_mark = _next_bookmark(now, end)  # nothing new to report this time
                    self._cond.wait(min(remaining, 0.25))
                    idx = bisect.bisect_right(self._log_rvs, since)
                batch = [] if mark is not None else self._log[idx:]
            if mark is not None:
                yield mark
                continue
            for ev in batch:
                since = ev.rv
                if ev.plural != plural:
                    continue
                now_ok = ev.type != "DELETED" and ok(ev.obj)
                was_ok = ok(ev.old) if ev.type != "ADDED" else False
                if ev.type == "DELETED":
                    was_ok = ok(ev.obj)
                if now_ok and was_ok:
                    kind = "MODIFIED"
                elif now_ok:
                    kind = "ADDED"
                elif was_ok:
                    kind = "DELETED"
                else:
                    continue
                sent = ev.rv
                yield {"type": kind, "object": ev.obj}
