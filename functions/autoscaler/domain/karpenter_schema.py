"""Strict validation of Karpenter manifests at every depth: NodePool (``karpenter.sh/v1``, ``v1beta1``),
Provisioner (``v1alpha5``), EC2NodeClass (``karpenter.k8s.aws/v1``, ``v1beta1``) and AWSNodeTemplate
(``v1alpha1``).

Each version has its own schema, so a field of another version is named as such. Beyond shapes:
label keys in the reserved families (``karpenter.sh/``, ``karpenter.k8s.aws/``, ``kubernetes.io/``, ...)
must be known keys, limits name real resources with non-negative quantities, and instance types and
families are checked against the bundled catalogue (a warning: AWS adds types). ``manifest_check`` runs
these schemas and the domain parsers together.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from autoscaler.domain import keys
from autoscaler.domain.cron import parse_cron
from autoscaler.domain.durations import optional_duration_seconds
from autoscaler.domain.errors import Path, Problem, did_you_mean
from autoscaler.domain.instance_catalogue import (
    CATEGORIES,
    SIZES,
    instance_type_names,
    known_family,
    known_instance_type,
)
from autoscaler.domain.manifest_schema import (
    ANY,
    BOOLEAN,
    DURATION,
    INTEGER,
    STRING,
    STRING_MAP,
    Custom,
    Enum,
    ListOf,
    MapOf,
    Obj,
    Scalar,
    Spec,
    duration,
    quantity,
)
from autoscaler.domain.nodeclass import WINDOWS_UNSUPPORTED

_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_BASE_RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage", "storage")
# A NodePool's limits also take ``nodes``: how many nodes it may have (Karpenter v1.11+).
LIMIT_RESOURCES = (*_BASE_RESOURCES, "nodes")
_WINDOWS = f"is a Windows family: {WINDOWS_UNSUPPORTED}"


# --- value checks -------------------------------------------------------------------------------------

def label_key(key: Any, path: Path) -> list[Problem]:
    """A label key: well formed, and known when it is in a reserved family."""
    if not isinstance(key, str) or not key:
        return [Problem(f"label key {key!r} must be a non-empty string", path)]
    prefix, _, name = key.rpartition("/")
    if not _LABEL_NAME.match(name) or len(prefix) > 253:
        return [Problem(f"{key!r} is not a valid label key; write [prefix/]name with name of at most 63 "
                        "letters, digits, '-', '_' or '.'", path)]
    if key in keys.KNOWN_LABEL_KEYS:
        return []
    family = f"{prefix}/"
    same_family = [k for k in keys.KNOWN_LABEL_KEYS if k.startswith(family)]
    if family in keys.RESERVED_LABEL_PREFIXES:
        return [Problem(f"unknown label key {key!r} in the reserved {family!r} family; "
                        f"{did_you_mean(key, same_family)}", path)]
    if family in keys.OPEN_LABEL_PREFIXES and did_you_mean(key, same_family).startswith("did you mean"):
        return [Problem(f"unknown label key {key!r}; {did_you_mean(key, same_family)}", path)]
    return []


def label_value(value: Any, path: Path) -> list[Problem]:
    """A label value: at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric."""
    text = str(value)
    if len(text) <= 63 and _LABEL_VALUE.match(text):
        return []
    return [Problem(f"{text!r} is not a valid label value; write at most 63 letters, digits, '-', '_' or '.', "
                    "starting and ending with a letter or digit", path)]


def _resource_name(name: Any, path: Path, *, known: tuple[str, ...] = _BASE_RESOURCES) -> list[Problem]:
    if not isinstance(name, str):
        return [Problem(f"resource name {name!r} must be a string", path)]
    if name in known or name.startswith("hugepages-") or "/" in name:
        return []
    return [Problem(f"unknown resource {name!r}; {did_you_mean(name, known)} "
                    "(extended resources are written domain/name, e.g. nvidia.com/gpu)", path)]


def _resource_list(value: Any, path: Path, *, known: tuple[str, ...] = _BASE_RESOURCES) -> list[Problem]:
    if not isinstance(value, Mapping):
        return [Problem("must be a map of resource name to quantity, e.g. {cpu: 1000, memory: 1000Gi}", path)]
    out: list[Problem] = []
    for name, amount in value.items():
        out += (_resource_name(name, (*path, name), known=known)
                or quantity(amount, (*path, name), resource=str(name)))
    return out


def _expire_after(value: Any, path: Path) -> list[Problem]:
    found = duration(value, path)
    if found or str(value) == "Never" or optional_duration_seconds(value, field="") != 0:
        return found
    return [Problem(f"{value!r} expires every node of this NodePool as soon as it is launched (each is "
                    "replaced at once, over and over); write a rotation period such as '720h', or 'Never'",
                    path, severity="warning")]


def _limit_list(value: Any, path: Path) -> list[Problem]:
    return _resource_list(value, path, known=LIMIT_RESOURCES)


def _node_class_group(value: Any, path: Path) -> list[Problem]:
    if value == "karpenter.k8s.aws":
        return []
    # Karpenter resolves the reference in this group only; another group names a node class it cannot read.
    return [Problem(f"{value!r} is not the EC2NodeClass API group; write group: karpenter.k8s.aws", path)]


def _requirement(value: Mapping[str, Any], path: Path) -> list[Problem]:
    key, op, values = value.get("key"), value.get("operator"), value.get("values") or []
    out = label_key(key, (*path, "key"))
    if not isinstance(values, list) or op not in ("In", "NotIn"):
        return out
    texts = [str(v) for v in values]
    where = (*path, "values")
    out += [p for i, v in enumerate(texts) for p in label_value(v, (*where, i))]
    if key in (keys.INSTANCE_TYPE_LABEL, keys.INSTANCE_TYPE_LABEL_BETA):
        out += [Problem(f"{v!r} is not an instance type in the bundled catalogue; "
                        f"{did_you_mean(v, instance_type_names())} (fine if AWS added it since)", where,
                        severity="warning") for v in texts if not known_instance_type(v)]
    elif key == keys.FAMILY_LABEL:
        out += [Problem(f"{v!r} is not an instance family in the bundled catalogue; "
                        f"{did_you_mean(v, [n.split('.')[0] for n in instance_type_names()])}", where,
                        severity="warning") for v in texts if not known_family(v)]
    elif key == keys.SIZE_LABEL:
        out += [Problem(f"{v!r} is not an instance size in the bundled catalogue; {did_you_mean(v, SIZES)}", where,
                        severity="warning") for v in texts if v not in SIZES]
    elif key == keys.CATEGORY_LABEL:
        out += [Problem(f"{v!r} is not an instance category; {did_you_mean(v, CATEGORIES)}", where,
                        severity="warning") for v in texts if v not in CATEGORIES]
    elif key == keys.CAPACITY_TYPE_LABEL:
        allowed = ("spot", "on-demand", "reserved")
        out += [Problem(f"{v!r} is not a capacity type; {did_you_mean(v, allowed)}", where)
                for v in texts if v not in allowed]
    elif key == keys.ARCH_LABEL:
        out += [Problem(f"{v!r} is not an architecture; {did_you_mean(v, ('amd64', 'arm64'))}", where)
                for v in texts if v not in ("amd64", "arm64")]
    elif key == keys.OS_LABEL and op == "In":
        out += [Problem(f"{v!r}: only linux nodes are launched (docs/aws.md); write 'linux'", where)
                for v in texts if v != "linux"]
    return out


def _budget_nodes(value: Any, path: Path) -> list[Problem]:
    text = str(value).strip()
    if (isinstance(value, int) and not isinstance(value, bool) and value >= 0) or text.isdigit() or (
            text.endswith("%") and text[:-1].isdigit() and int(text[:-1]) <= 100):
        return []
    return [Problem(f"{value!r} must be a node count or a percentage; write e.g. '10%' or '1'", path)]


def _budget_schedule(value: Any, path: Path) -> list[Problem]:
    try:
        parse_cron(value)
    except ValueError as exc:
        return [Problem(f"{exc}; write a 5-field cron such as '0 9 * * mon-fri' or '@daily'", path)]
    return []


def _not_implemented(_value: Any, path: Path) -> list[Problem]:
    return [Problem("is a Karpenter field this autoscaler does not implement: it has no effect; remove it, or "
                    "expect Karpenter's behaviour for it to be missing", path, severity="warning")]


# Valid Karpenter fields the autoscaler does not act on: accepted (the file stays valid Karpenter) but
# never silently.
NOT_IMPLEMENTED = Custom(ANY, _not_implemented)


def _alias(value: Any, path: Path) -> list[Problem]:
    if str(value).lower().startswith("windows"):
        return [Problem(f"alias {value!r}: {WINDOWS_UNSUPPORTED}", path)]
    return []


# --- shared shapes ------------------------------------------------------------------------------------

_OPS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
REQUIREMENT = Custom(Obj({"key": STRING, "operator": Enum(_OPS), "values": ListOf(ANY),
                          "minValues": Scalar("integer", 1, 50)}, required=("key", "operator")), _requirement)
TAINT = Obj({"key": STRING, "value": STRING, "effect": Enum(("NoSchedule", "PreferNoSchedule", "NoExecute")),
             "timeAdded": STRING}, required=("key", "effect"))
LABELS = MapOf(Custom(STRING, label_value), key=label_key)
QUANTITIES = Custom(ANY, _resource_list)
LIMITS = Custom(ANY, _limit_list)
EXPIRE_AFTER = Custom(ANY, _expire_after)
# Karpenter's CRDs bound a NodePool's (and a Provisioner's) weight to 1..100; no weight is the lowest priority.
WEIGHT = Scalar("integer", 1, 100)
KUBELET = Obj({
    "clusterDNS": ListOf(STRING), "maxPods": Scalar("integer", 1), "podsPerCore": Scalar("integer", 0),
    "systemReserved": QUANTITIES, "kubeReserved": QUANTITIES, "evictionHard": STRING_MAP,
    "evictionSoft": STRING_MAP, "evictionSoftGracePeriod": MapOf(DURATION),
    "evictionMaxPodGracePeriod": INTEGER, "imageGCHighThresholdPercent": Scalar("integer", 0, 100),
    "imageGCLowThresholdPercent": Scalar("integer", 0, 100), "cpuCFSQuota": BOOLEAN, "containerRuntime": STRING,
})
BUDGET = Obj({"nodes": Custom(ANY, _budget_nodes), "schedule": Custom(STRING, _budget_schedule),
              "duration": DURATION, "reasons": ListOf(Enum(("Underutilized", "Empty", "Drifted")))})
_META_ANY = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "finalizers",
             "ownerReferences", "deletionTimestamp", "deletionGracePeriodSeconds", "generateName", "selfLink",
             "namespace")
def _name(value: Any, path: Path) -> list[Problem]:
    return [] if value else [Problem("must not be empty; write the object's name", path)]


METADATA = Obj({"name": Custom(STRING, _name), "labels": STRING_MAP, "annotations": STRING_MAP,
                **dict.fromkeys(_META_ANY, ANY)}, required=("name",))


def _top(spec: Spec) -> Obj:
    return Obj({"apiVersion": STRING, "kind": STRING, "metadata": METADATA, "spec": spec, "status": ANY},
               required=("metadata", "spec"))


# --- NodePool / Provisioner ---------------------------------------------------------------------------

def _node_pool(version: str) -> Obj:
    v1 = version == "v1"
    other = "karpenter.sh/v1beta1" if v1 else "karpenter.sh/v1"
    ref = (Obj({"group": Custom(STRING, _node_class_group), "kind": STRING, "name": STRING}, required=("name",),
               foreign={"apiVersion": f"is a {other} field; karpenter.sh/v1 takes group: karpenter.k8s.aws"})
           if v1 else
           Obj({"apiVersion": STRING, "kind": STRING, "name": STRING}, required=("name",),
               foreign={"group": f"is a {other} field; v1beta1 takes apiVersion: karpenter.k8s.aws/v1beta1"}))
    template_fields: dict[str, Spec] = {
        "nodeClassRef": ref, "taints": ListOf(TAINT), "startupTaints": ListOf(TAINT),
        "requirements": ListOf(REQUIREMENT), "terminationGracePeriod": DURATION,
    }
    if v1:
        template_fields["expireAfter"] = EXPIRE_AFTER
        template_foreign = {"kubelet": "is a karpenter.sh/v1beta1 field: karpenter.sh/v1 moved kubelet to the "
                                       "EC2NodeClass (spec.kubelet)"}
    else:
        template_fields["kubelet"] = KUBELET
        template_foreign = {"expireAfter": "is a karpenter.sh/v1 field; v1beta1 takes spec.disruption.expireAfter"}
    policies = ("WhenEmpty", "WhenEmptyOrUnderutilized") if v1 else ("WhenEmpty", "WhenUnderutilized")
    hint = ({"WhenUnderutilized": "is the karpenter.sh/v1beta1 spelling; karpenter.sh/v1 calls it "
                                  "'WhenEmptyOrUnderutilized'"} if v1 else
            {"WhenEmptyOrUnderutilized": "is the karpenter.sh/v1 spelling; v1beta1 calls it 'WhenUnderutilized'"})
    disruption_fields: dict[str, Spec] = {"consolidationPolicy": Enum(policies, hint), "consolidateAfter": DURATION,
                                          "budgets": ListOf(BUDGET)}
    disruption_foreign = {}
    if v1:
        disruption_foreign["expireAfter"] = ("is a karpenter.sh/v1beta1 field: karpenter.sh/v1 moved it to "
                                             "spec.template.spec.expireAfter")
    else:
        disruption_fields["expireAfter"] = EXPIRE_AFTER
    template = Obj({"metadata": Obj({"labels": LABELS, "annotations": STRING_MAP}),
                    "spec": Obj(template_fields, required=("nodeClassRef",), foreign=template_foreign)},
                   required=("spec",))
    return _top(Obj({"template": template, "disruption": Obj(disruption_fields, foreign=disruption_foreign),
                     "limits": LIMITS, "weight": WEIGHT, "replicas": Scalar("integer", 0)},
                    required=("template",)))


_PROVISIONER = _top(Obj({
    "labels": LABELS, "annotations": STRING_MAP, "taints": ListOf(TAINT), "startupTaints": ListOf(TAINT),
    "requirements": ListOf(REQUIREMENT), "limits": Obj({"resources": LIMITS}),
    "weight": WEIGHT,
    "providerRef": Obj({"name": STRING, "kind": STRING, "apiVersion": STRING}, required=("name",)),
    "provider": ANY, "kubeletConfiguration": KUBELET, "ttlSecondsAfterEmpty": Scalar("integer", 0),
    "ttlSecondsUntilExpired": Scalar("integer", 0), "consolidation": Obj({"enabled": BOOLEAN}),
}, foreign={"template": "is a NodePool field; a karpenter.sh/v1alpha5 Provisioner takes requirements, labels and "
                        "taints directly under spec",
            "disruption": "is a NodePool field; a Provisioner uses ttlSecondsAfterEmpty or consolidation.enabled"}))


# --- EC2NodeClass / AWSNodeTemplate -------------------------------------------------------------------

_FAMILIES = Enum(("AL2023", "AL2", "Bottlerocket", "Custom"),
                 {"Windows2019": _WINDOWS, "Windows2022": _WINDOWS,
                  "Ubuntu": "is not supported by karpenter.k8s.aws/v1; use AL2023 or a Custom family with "
                            "amiSelectorTerms"})
_EBS = Obj({"volumeSize": Custom(ANY, quantity), "volumeType": Enum(("standard", "io1", "io2", "gp2", "sc1", "st1",
                                                                       "gp3")),
            "iops": INTEGER, "throughput": INTEGER, "encrypted": BOOLEAN, "kmsKeyID": STRING,
            "deleteOnTermination": BOOLEAN, "snapshotID": STRING, "volumeInitializationRate": INTEGER})
_BLOCK_DEVICES = ListOf(Obj({"deviceName": STRING, "ebs": _EBS, "rootVolume": BOOLEAN}, required=("deviceName",)))
_ENABLED = Enum(("enabled", "disabled"))
_METADATA_OPTIONS = Obj({"httpEndpoint": _ENABLED, "httpProtocolIPv6": _ENABLED,
                         "httpPutResponseHopLimit": Scalar("integer", 1, 64),
                         "httpTokens": Enum(("required", "optional"))})
_COMMON_CLASS: dict[str, Spec] = {
    "amiFamily": _FAMILIES, "userData": STRING, "instanceProfile": STRING, "tags": STRING_MAP,
    "blockDeviceMappings": _BLOCK_DEVICES, "metadataOptions": _METADATA_OPTIONS, "detailedMonitoring": BOOLEAN,
    "context": NOT_IMPLEMENTED,
}


def _reservation_term(value: Mapping[str, Any], path: Path) -> list[Problem]:
    """Karpenter's CEL rules on a term, before the model's (which say the same in pydantic's words)."""
    out = []
    if "id" in value and any(k in value for k in ("tags", "ownerID", "instanceMatchCriteria")):
        out.append(Problem("'id' is mutually exclusive, cannot be set along with other fields in a capacity "
                           "reservation selector term; write {id: cr-...} alone, or select by tags", path))
    if not any(k in value for k in ("id", "tags", "instanceMatchCriteria")):
        out.append(Problem("expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']", path))
    if "id" in value and not re.match(r"^cr-[0-9a-z]+$", str(value["id"])):
        out.append(Problem(f"id {value['id']!r} is not a capacity reservation id; write cr- and lowercase hex, "
                           "e.g. cr-0123456789abcdef0", (*path, "id")))
    if "ownerID" in value and not re.match(r"^[0-9]{12}$", str(value["ownerID"])):
        out.append(Problem(f"ownerID {value['ownerID']!r} is not an AWS account id; write its 12 digits",
                           (*path, "ownerID")))
    return out


_RESERVATION_TERM = Custom(Obj({"id": STRING, "tags": STRING_MAP, "ownerID": STRING,
                                "instanceMatchCriteria": Enum(("open", "targeted"))}), _reservation_term)


def _node_class(version: str) -> Obj:
    v1 = version == "v1"
    ami_fields: dict[str, Spec] = {"tags": STRING_MAP, "id": STRING, "name": STRING, "owner": STRING}
    if v1:
        ami_fields |= {"alias": Custom(STRING, _alias), "ssmParameter": STRING}
    ami = Obj(ami_fields, foreign={} if v1 else {
        "alias": "is a karpenter.k8s.aws/v1 field; v1beta1 picks the image family with spec.amiFamily"})
    fields: dict[str, Spec] = {
        **_COMMON_CLASS, "subnetSelectorTerms": ListOf(Obj({"tags": STRING_MAP, "id": STRING})),
        "securityGroupSelectorTerms": ListOf(Obj({"tags": STRING_MAP, "id": STRING, "name": STRING})),
        "amiSelectorTerms": ListOf(ami), "role": STRING, "associatePublicIPAddress": BOOLEAN,
        **dict.fromkeys(("instanceStorePolicy", "placementGroupSelector",
                         "ipPrefixCount", "networkInterfaces", "connectionTracking", "cpuOptions"), NOT_IMPLEMENTED),
    }
    foreign = {}
    if v1:
        fields["kubelet"] = KUBELET
        fields["capacityReservationSelectorTerms"] = ListOf(_RESERVATION_TERM)
    else:
        foreign["capacityReservationSelectorTerms"] = "is a karpenter.k8s.aws/v1 field; upgrade the manifest to v1"
        foreign["kubelet"] = ("is a karpenter.k8s.aws/v1 field; v1beta1 takes kubelet in the NodePool's "
                              "spec.template.spec.kubelet")
    return _top(Obj(fields, required=("subnetSelectorTerms", "securityGroupSelectorTerms"), foreign=foreign))


_AWS_NODE_TEMPLATE = _top(Obj({
    **_COMMON_CLASS, "subnetSelector": STRING_MAP, "securityGroupSelector": STRING_MAP, "amiSelector": STRING_MAP,
}, required=("subnetSelector", "securityGroupSelector"), foreign={
    "launchTemplate": "is not supported: the autoscaler builds launch templates; use the AWSNodeTemplate's fields",
    "subnetSelectorTerms": "is an EC2NodeClass field; a v1alpha1 AWSNodeTemplate takes subnetSelector (a tag map)",
}))

NODE_POOL_SCHEMAS: dict[tuple[str, str], Obj] = {
    ("karpenter.sh/v1", "NodePool"): _node_pool("v1"),
    ("karpenter.sh/v1beta1", "NodePool"): _node_pool("v1beta1"),
    ("karpenter.sh/v1alpha5", "Provisioner"): _PROVISIONER,
}
NODE_CLASS_SCHEMAS: dict[tuple[str, str], Obj] = {
    ("karpenter.k8s.aws/v1", "EC2NodeClass"): _node_class("v1"),
    ("karpenter.k8s.aws/v1beta1", "EC2NodeClass"): _node_class("v1beta1"),
    ("karpenter.k8s.aws/v1alpha1", "AWSNodeTemplate"): _AWS_NODE_TEMPLATE,
}
