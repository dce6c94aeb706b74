"""Build the domain models from raw API JSON: Kubernetes objects and EC2 ``InstanceTypeInfo``.

One parser per kind, used by the CLI snapshot, the Kubernetes adapter (which reads raw JSON instead
of the client's slow generated models) and the AWS adapter. Malformed input raises
``ObjectError`` naming the object and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from functools import lru_cache
from typing import Any, cast

from autoscaler.domain import resources as res
from autoscaler.domain.keys import ZONE_KEYS
from autoscaler.domain.models import (
    ALL_NAMESPACES,
    DaemonSet,
    HostPort,
    LabelSelector,
    Node,
    NodeCondition,
    NodeSelectorTerm,
    OwnerRef,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    PodAffinityTerm,
    PodDisruptionBudget,
    Requirement,
    StorageClass,
    Taint,
    Toleration,
    TopologySpreadConstraint,
)
from autoscaler.domain.quantity import QuantityError

_OPERATORS = {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}
_EFFECTS = {"NoSchedule", "PreferNoSchedule", "NoExecute"}

Raw = Mapping[str, Any]


class ObjectError(ValueError):
    """Raised for malformed API objects; the message names the object and the field."""


def _name(obj: Raw) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{obj.get('kind', 'object')} {ns + '/' if ns else ''}{meta.get('name', '<unnamed>')}"


# Returned for every absent map: a 70k-pod list has ~200k empty annotation, selector and claim maps.
# Shared, so never to be mutated (the models type these fields as read-only Mappings).
_NO_ENTRIES: dict[str, str] = {}


def _map(value: Any) -> dict[str, str]:
    if not value:
        return _NO_ENTRIES
    return {str(k): str(v) for k, v in value.items()}


def parse_timestamp(value: str | None) -> float:
    """RFC 3339 timestamp ("2024-01-02T03:04:05Z") to epoch seconds; missing -> 0."""
    if not value:
        return 0.0
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def ec2_timestamp(value: Any) -> float | None:
    """An EC2 API time (``LaunchTime``, ``EndDate``: boto3's datetime, or the ISO 8601 text the CLI and
    snapshots carry) to epoch seconds; missing -> None."""
    if isinstance(value, datetime):
        return value.timestamp()
    return parse_timestamp(str(value)) if value else None


def parse_requirement(raw: Raw, *, where: str) -> Requirement:
    op = raw.get("operator")
    if op not in _OPERATORS:
        raise ObjectError(f"{where}: operator {op!r} is not one of {sorted(_OPERATORS)}")
    key = raw.get("key")
    if not key:
        raise ObjectError(f"{where}: requirement has no key")
    values = tuple(str(v) for v in raw.get("values") or ())
    if op == "In" and not values:
        raise ObjectError(f"{where}: operator In on {key!r} needs at least one value")
    if op in ("Gt", "Lt") and (len(values) != 1 or not values[0].lstrip("-").isdigit()):
        raise ObjectError(f"{where}: operator {op} on {key!r} needs exactly one integer value")
    min_values = raw.get("minValues")
    return Requirement(key=str(key), operator=op, values=values,
                       min_values=int(min_values) if min_values is not None else None)


def parse_label_selector(raw: Raw | None, *, where: str) -> LabelSelector | None:
    if raw is None:
        return None
    return LabelSelector(
        match_labels=tuple(sorted(_map(raw.get("matchLabels")).items())),
        match_expressions=tuple(
            parse_requirement(e, where=f"{where}.matchExpressions[{i}]")
            for i, e in enumerate(raw.get("matchExpressions") or ())
        ),
    )


def parse_taint(raw: Raw, *, where: str) -> Taint:
    effect = raw.get("effect")
    if effect not in _EFFECTS:
        raise ObjectError(f"{where}: taint effect {effect!r} is not one of {sorted(_EFFECTS)}")
    if not raw.get("key"):
        raise ObjectError(f"{where}: taint has no key")
    return Taint(key=str(raw["key"]), value=str(raw.get("value") or ""), effect=effect)


def parse_toleration(raw: Raw, *, where: str = "toleration") -> Toleration:
    operator = raw.get("operator") or "Equal"
    if operator not in ("Exists", "Equal"):
        # The API server rejects any other operator; accepting "Exist" as Equal would plan a pod onto
        # nodes its real toleration does not match.
        hint = " (did you mean 'Exists'?)" if str(operator).lower().startswith("exist") else ""
        raise ObjectError(f"{where}.operator: {operator!r} is not Exists or Equal{hint}")
    if operator == "Exists" and raw.get("value"):
        raise ObjectError(f"{where}.value: operator Exists takes no value (got {raw.get('value')!r})")
    seconds = raw.get("tolerationSeconds")
    return Toleration(
        key=str(raw.get("key") or ""),
        operator="Exists" if operator == "Exists" else "Equal",
        value=str(raw.get("value") or ""),
        effect=str(raw.get("effect") or ""),
        toleration_seconds=int(seconds) if seconds is not None else None,
    )


def _terms(raw_terms: Any, *, where: str) -> tuple[NodeSelectorTerm, ...]:
    return tuple(
        NodeSelectorTerm(tuple(
            parse_requirement(r, where=f"{where}[{i}].matchExpressions[{j}]")
            for j, r in enumerate(term.get("matchExpressions") or ())
        ))
        for i, term in enumerate(raw_terms or ())
    )


def _affinity_term(t: Raw, *, where: str) -> PodAffinityTerm:
    if not t.get("topologyKey"):
        raise ObjectError(f"{where}: topologyKey is required")
    namespaces = tuple(t.get("namespaces") or ())
    ns_selector = t.get("namespaceSelector")
    selector = None
    if isinstance(ns_selector, Mapping) and not ns_selector.get("matchLabels") and not ns_selector.get(
            "matchExpressions"):
        namespaces = (ALL_NAMESPACES,)  # an empty namespaceSelector selects every namespace
    elif isinstance(ns_selector, Mapping):
        selector = parse_label_selector(ns_selector, where=f"{where}.namespaceSelector")
    return PodAffinityTerm(
        label_selector=parse_label_selector(t.get("labelSelector"), where=f"{where}.labelSelector"),
        topology_key=str(t["topologyKey"]),
        namespaces=namespaces,
        namespace_selector=selector,
    )


def _affinity_terms(raw_terms: Any, *, where: str) -> tuple[PodAffinityTerm, ...]:
    return tuple(_affinity_term(t, where=f"{where}[{i}]") for i, t in enumerate(raw_terms or ()))


def _weighted_affinity_terms(raw_terms: Any, *, where: str) -> tuple[tuple[int, PodAffinityTerm], ...]:
    out = []
    for i, t in enumerate(raw_terms or ()):
        weight = t.get("weight", 1)
        if not isinstance(weight, int) or not 1 <= weight <= 100:
            raise ObjectError(f"{where}[{i}].weight: must be an integer from 1 to 100, got {weight!r}")
        term = t.get("podAffinityTerm")
        if not isinstance(term, dict):
            raise ObjectError(f"{where}[{i}].podAffinityTerm: is required")
        out.append((weight, _affinity_term(term, where=f"{where}[{i}].podAffinityTerm")))
    return tuple(out)


def _container_requests(containers: Any, *, where: str) -> list[res.Resources]:
    out = []
    for i, c in enumerate(containers or ()):
        r = c.get("resources") or {}
        # A limit without a request defaults the request to the limit (API server defaulting).
        merged = {**(r.get("limits") or {}), **(r.get("requests") or {})}
        try:
            out.append(res.parse_resource_list(merged))
        except (QuantityError, ValueError) as exc:
            raise ObjectError(f"{where}[{i}].resources: {exc}") from exc
    return out


def effective_requests(spec: Raw, *, where: str) -> res.Resources:
    """max(each init container, sum of app containers) + overhead, plus one ``pods`` slot.

    Restartable init containers (sidecars, ``restartPolicy: Always``) run alongside the app
    containers, so they are added to the sum, as the kube-scheduler does.
    """
    app = res.total(_container_requests(spec.get("containers"), where=f"{where}.containers"))
    init_total: res.Resources = {}
    sidecars: res.Resources = {}
    inits = spec.get("initContainers") or ()
    for c, req in zip(inits, _container_requests(inits, where=f"{where}.initContainers"), strict=True):
        if c.get("restartPolicy") == "Always":
            sidecars = res.add(sidecars, req)
        else:
            init_total = res.maximum(init_total, res.add(req, sidecars))
    requests = res.maximum(res.add(app, sidecars), init_total)
    try:
        requests = res.add(requests, res.parse_resource_list(spec.get("overhead")))
    except (QuantityError, ValueError) as exc:
        raise ObjectError(f"{where}.overhead: {exc}") from exc
    requests[res.PODS] = 1
    return requests


def _owner(meta: Raw) -> OwnerRef | None:
    refs = meta.get("ownerReferences") or ()
    chosen = next((r for r in refs if r.get("controller")), None)
    if chosen is None:
        return None
    return _owner_ref(str(chosen.get("kind", "")), str(chosen.get("name", "")), str(chosen.get("uid", "")),
                      str(chosen.get("apiVersion", "")))


@lru_cache(maxsize=4096)
def _owner_ref(kind: str, name: str, uid: str, api_version: str) -> OwnerRef:
    """One shared (immutable) OwnerRef per controller: a 50k-pod burst has a few dozen ReplicaSets."""
    return OwnerRef(kind=kind, name=name, uid=uid, controller=True, api_version=api_version)


def _host_ports(spec: Raw, *, where: str) -> tuple[HostPort, ...]:
    """The host ports a pod holds while it runs, as kube-scheduler's NodePorts filter counts them: those of
    its app containers and of its sidecars (restartable init containers, ``restartPolicy: Always``, which
    run for the pod's life); a run-to-completion init container's are not held."""
    running = [("initContainers", i, c) for i, c in enumerate(spec.get("initContainers") or ())
               if isinstance(c, Mapping) and c.get("restartPolicy") == "Always"]
    running += [("containers", i, c) for i, c in enumerate(spec.get("containers") or ()) if isinstance(c, Mapping)]
    out = []
    for kind, i, container in running:
        for j, p in enumerate(container.get("ports") or ()):
            if not isinstance(p, Mapping) or not p.get("hostPort"):
                continue
            try:
                port = int(p["hostPort"])
            except (TypeError, ValueError) as exc:
                raise ObjectError(f"{where}.{kind}[{i}].ports[{j}].hostPort: must be an integer, "
                                  f"got {p['hostPort']!r}") from exc
            out.append(HostPort(port=port, protocol=str(p.get("protocol") or "TCP"),
                                host_ip=str(p.get("hostIP") or "")))
    return tuple(out)


def _pod_from_spec(meta: Raw, spec: Raw, status: Raw, *, where: str) -> Pod:
    affinity = spec.get("affinity") or {}
    node_aff = affinity.get("nodeAffinity") or {}
    required = (node_aff.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    preferred = node_aff.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    pod_aff = affinity.get("podAffinity") or {}
    anti = affinity.get("podAntiAffinity") or {}
    conditions = status.get("conditions") or ()
    spread = []
    for i, c in enumerate(spec.get("topologySpreadConstraints") or ()):
        w = f"{where}.topologySpreadConstraints[{i}]"
        if not c.get("topologyKey") or c.get("maxSkew") is None:
            raise ObjectError(f"{w}: topologyKey and maxSkew are required")
        policies = {}
        for field_name, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
            value = c.get(field_name) or default
            if value not in ("Honor", "Ignore"):
                raise ObjectError(f"{w}.{field_name}: must be Honor or Ignore, got {value!r}")
            policies[field_name] = value
        min_domains = c.get("minDomains")
        if min_domains is not None and (not isinstance(min_domains, int) or min_domains < 1):
            raise ObjectError(f"{w}.minDomains: must be a positive integer, got {min_domains!r}")
        selector = parse_label_selector(c.get("labelSelector"), where=f"{w}.labelSelector")
        own = _map(meta.get("labels"))
        keys = [str(k) for k in c.get("matchLabelKeys") or () if str(k) in own]
        if keys and selector is not None:  # kube ignores matchLabelKeys without a labelSelector
            selector = replace(selector, match_labels=tuple(sorted({*selector.match_labels,
                                                                    *((k, own[k]) for k in keys)})))
        spread.append(TopologySpreadConstraint(
            max_skew=int(c["maxSkew"]), topology_key=str(c["topologyKey"]),
            when_unsatisfiable="ScheduleAnyway" if c.get("whenUnsatisfiable") == "ScheduleAnyway"
            else "DoNotSchedule",
            label_selector=selector,
            min_domains=min_domains,
            node_affinity_policy=policies["nodeAffinityPolicy"],  # type: ignore[arg-type]
            node_taints_policy=policies["nodeTaintsPolicy"],  # type: ignore[arg-type]
        ))
    ports = _host_ports(spec, where=where)
    claims = tuple(
        str(v["persistentVolumeClaim"]["claimName"])
        for v in (spec.get("volumes") or ()) if v.get("persistentVolumeClaim")
    )
    # A generic ephemeral volume's claim is named <pod>-<volume> and made from its template; until it
    # exists, the template's StorageClass says where it may be provisioned.
    ephemeral = {
        f"{meta.get('name') or ''}-{v.get('name')}": str(
            ((v["ephemeral"].get("volumeClaimTemplate") or {}).get("spec") or {}).get("storageClassName") or "")
        for v in (spec.get("volumes") or ()) if isinstance(v.get("ephemeral"), Mapping)
    }
    claims += tuple(ephemeral)
    grace = spec.get("terminationGracePeriodSeconds")
    return Pod(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        labels=_map(meta.get("labels")),
        annotations=_map(meta.get("annotations")),
        node_name=spec.get("nodeName") or None,
        phase=str(status.get("phase") or "Pending"),
        requests=effective_requests(spec, where=where),
        node_selector=_map(spec.get("nodeSelector")),
        required_node_affinity=_terms(required.get("nodeSelectorTerms"),
                                      where=f"{where}.affinity.nodeAffinity.required.nodeSelectorTerms"),
        preferred_node_affinity=tuple(
            (int(p.get("weight", 1)), _terms([p.get("preference") or {}],
                                             where=f"{where}.affinity.nodeAffinity.preferred[{i}]")[0])
            for i, p in enumerate(preferred)
        ),
        tolerations=tuple(parse_toleration(t, where=f"{where}: spec.tolerations[{i}]")
                          for i, t in enumerate(spec.get("tolerations") or ())),
        topology_spread=tuple(spread),
        pod_affinity=_affinity_terms(pod_aff.get("requiredDuringSchedulingIgnoredDuringExecution"),
                                     where=f"{where}.affinity.podAffinity.required"),
        pod_anti_affinity=_affinity_terms(anti.get("requiredDuringSchedulingIgnoredDuringExecution"),
                                          where=f"{where}.affinity.podAntiAffinity.required"),
        preferred_pod_affinity=_weighted_affinity_terms(
            pod_aff.get("preferredDuringSchedulingIgnoredDuringExecution"),
            where=f"{where}.affinity.podAffinity.preferred"),
        preferred_pod_anti_affinity=_weighted_affinity_terms(
            anti.get("preferredDuringSchedulingIgnoredDuringExecution"),
            where=f"{where}.affinity.podAntiAffinity.preferred"),
        host_ports=ports,
        volume_claims=claims,
        ephemeral_claims=ephemeral,
        empty_dir=any(isinstance(v, Mapping) and "emptyDir" in v for v in spec.get("volumes") or ()),
        owner=_owner(meta),
        priority=int(spec.get("priority") or 0),
        priority_class_name=str(spec.get("priorityClassName") or ""),
        created_at=parse_timestamp(meta.get("creationTimestamp")),
        deleting=bool(meta.get("deletionTimestamp")),
        deletion_at=parse_timestamp(meta.get("deletionTimestamp")),
        termination_grace_seconds=int(grace) if grace is not None else 30,
        ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
        unschedulable=any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                          and c.get("reason") == "Unschedulable" for c in conditions),
        scheduling_gated=bool(spec.get("schedulingGates")),
    )


def pod_from_dict(obj: Raw) -> Pod:
    where = _name({**obj, "kind": "Pod"})
    if not isinstance(obj.get("spec"), Mapping):
        raise ObjectError(f"{where}: spec is missing")
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not meta.get("name"):
        # A nameless pod cannot be reported, bound or evicted: kubectl output always carries metadata.name.
        raise ObjectError(f"{where}: metadata.name is missing; paste the pod as 'kubectl get pod -o json' prints it")
    return _pod_from_spec(obj.get("metadata") or {}, obj["spec"], obj.get("status") or {}, where=where)


def node_from_dict(obj: Raw) -> Node:
    where = _name({**obj, "kind": "Node"})
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    if not meta.get("name"):
        raise ObjectError(f"{where}: metadata.name is missing")
    try:
        allocatable = res.parse_resource_list(status.get("allocatable"))
        capacity = res.parse_resource_list(status.get("capacity"))
    except (QuantityError, ValueError) as exc:
        raise ObjectError(f"{where}.status: {exc}") from exc
    return Node(
        name=str(meta["name"]),
        labels=_map(meta.get("labels")),
        annotations=_map(meta.get("annotations")),
        taints=tuple(parse_taint(t, where=f"{where}.spec.taints[{i}]")
                     for i, t in enumerate(spec.get("taints") or ())),
        unschedulable=bool(spec.get("unschedulable")),
        allocatable=allocatable,
        capacity=capacity,
        provider_id=str(spec.get("providerID") or ""),
        ready=any(c.get("type") == "Ready" and c.get("status") == "True"
                  for c in status.get("conditions") or ()),
        created_at=parse_timestamp(meta.get("creationTimestamp")),
        deleting=bool(meta.get("deletionTimestamp")),
        conditions=tuple(NodeCondition(type=str(c.get("type") or ""), status=str(c.get("status") or "Unknown"),
                                       since=parse_timestamp(c.get("lastTransitionTime")))
                         for c in status.get("conditions") or () if isinstance(c, Mapping)),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def daemonset_from_dict(obj: Raw) -> DaemonSet:
    where = _name({**obj, "kind": "DaemonSet"})
    meta = obj.get("metadata") or {}
    template = ((obj.get("spec") or {}).get("template")) or {}
    if not isinstance(template.get("spec"), Mapping):
        raise ObjectError(f"{where}: spec.template.spec is missing")
    tmeta = {**(template.get("metadata") or {}), "namespace": meta.get("namespace"),
             "name": meta.get("name")}
    pod = _pod_from_spec(tmeta, template["spec"], {}, where=f"{where}.spec.template.spec")
    return DaemonSet(namespace=str(meta.get("namespace") or "default"), name=str(meta.get("name")),
                     template=pod)


def _int_or_percent(value: Any) -> int | str | None:
    if value is None:
        return None
    if isinstance(value, str) and not value.endswith("%"):
        return int(value)
    return cast(int | str, value)


def pdb_from_dict(obj: Raw) -> PodDisruptionBudget:
    where = _name({**obj, "kind": "PodDisruptionBudget"})
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    return PodDisruptionBudget(
        namespace=str(meta.get("namespace") or "default"), name=str(meta.get("name")),
        selector=parse_label_selector(spec.get("selector"), where=f"{where}.spec.selector"),
        min_available=_int_or_percent(spec.get("minAvailable")),
        max_unavailable=_int_or_percent(spec.get("maxUnavailable")),
    )


def pvc_from_dict(obj: Raw) -> PersistentVolumeClaim:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    return PersistentVolumeClaim(
        namespace=str(meta.get("namespace") or "default"), name=str(meta.get("name")),
        storage_class=spec.get("storageClassName"), volume_name=spec.get("volumeName") or None,
    )


def pv_from_dict(obj: Raw) -> PersistentVolume:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    terms = (((spec.get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms")) or ()
    zones = sorted({
        str(v) for t in terms for e in t.get("matchExpressions") or ()
        if e.get("key") in ZONE_KEYS and e.get("operator") == "In" for v in e.get("values") or ()
    })
    return PersistentVolume(name=str(meta.get("name")), zones=tuple(zones))


def namespace_from_dict(obj: Raw) -> tuple[str, dict[str, str]]:
    """A v1 Namespace as (name, labels): what a namespaceSelector of pod (anti-)affinity matches."""
    meta = obj.get("metadata") or {}
    if not meta.get("name"):
        raise ObjectError(f"{_name({**obj, 'kind': 'Namespace'})}: metadata.name is missing")
    return str(meta["name"]), _map(meta.get("labels"))


def storage_class_from_dict(obj: Raw) -> StorageClass:
    meta = obj.get("metadata") or {}
    zones = sorted({
        str(v) for t in obj.get("allowedTopologies") or ()
        for e in t.get("matchLabelExpressions") or () if e.get("key") in ZONE_KEYS
        for v in e.get("values") or ()
    })
    return StorageClass(name=str(meta.get("name")),
                        volume_binding_mode=str(obj.get("volumeBindingMode") or "Immediate"),
                        zones=tuple(zones))
