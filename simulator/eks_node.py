"""An EKS node as the EC2 instance, the EKS-optimised AMI's bootstrap and the kubelet make it, written from
their published definitions. It imports nothing from ``autoscaler``: the simulator's kubelet stand-in (and
the real-control-plane tests' kubelet) take a node's capacity, allocatable, labels and taints from here, so a
wrong formula or label in the product shows up as pods that do not fit or do not match, not as agreement.

Sources, each applied as the component that owns it applies it:

- EC2 instance data: ``DescribeInstanceTypes`` ``InstanceTypeInfo`` objects (``InstanceInfo.from_ec2``); the
  bundled copy is moto's real per-region data (``instance_infos``).
- Max pods, the EKS AMI's formula (``eni-max-pods`` / nodeadm ``CalcMaxPods``): ENIs of the default network
  card x (IPv4 addresses per ENI - 1) + 2. The kubelet's ``maxPods`` replaces it; ``podsPerCore`` caps it
  at ``podsPerCore`` x logical CPUs (kubelet: "the smaller of the two").
- kube-reserved, the EKS AMI's defaults (nodeadm ``withDefaultReservedResources``, bootstrap.sh): CPU
  6 % of the first core, 1 % of the second, 0.5 % of cores 3-4 and 0.25 % of the rest, each range's
  millicores truncated; memory 255Mi + 11Mi x max pods; ephemeral-storage 1Gi. nodeadm and bootstrap.sh
  compute the memory from the ENI max pods *before* the user's kubelet config is merged over it, so a
  ``maxPods`` override does not change the reservation; Bottlerocket computes it from its ``max-pods``
  setting. A ``kubeReserved`` entry replaces the default of that resource only (nodeadm merges maps).
- Hard eviction thresholds, the kubelet's defaults as the AMI writes them: ``memory.available`` 100Mi,
  ``nodefs.available`` 10 %; an ``evictionHard`` entry replaces that signal's threshold only (nodeadm's map
  merge); a percentage is of the node's capacity, truncated (kubelet ``GetThresholdQuantity``).
  ``evictionSoft`` does not change allocatable.
- Capacity: vCPUs; memory as the OS reports it, the EC2 figure less 7.5 % (Karpenter's documented
  ``VM_MEMORY_OVERHEAD_PERCENT`` default, the estimate every Karpenter-class planner works with); the root
  volume (20Gi, the EC2NodeClass default); max pods; NVIDIA GPUs (the device plugin's ``nvidia.com/gpu``).
- Allocatable = capacity - kube-reserved - system-reserved - hard eviction thresholds (Kubernetes
  "Reserve Compute Resources for System Daemons"), never below zero.
- Well-known labels: the kubelet's (``kubernetes.io/arch``, ``os``, ``hostname``), the cloud node
  controller's (instance type, zone, region, with their beta twins) and Karpenter's instance labels
  (``karpenter.k8s.aws/instance-*``), computed from the EC2 data as Karpenter's AWS provider documents them.
- Labels, taints and kubelet settings from user data, as the AMI's bootstrap reads it: AL2023 nodeadm
  ``NodeConfig`` documents (MIME parts, merged in order: ``kubelet.flags`` accumulate, ``kubelet.config``
  maps merge), AL2 ``/etc/eks/bootstrap.sh ... --kubelet-extra-args '...'`` and Bottlerocket TOML
  ``settings.kubernetes``.
"""

from __future__ import annotations

import base64
import binascii
import email.message
import email.parser
import email.policy
import functools
import gzip
import json
import math
import re
import shlex
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal

import yaml

MI = 2**20
GI = 2**30
VM_MEMORY_OVERHEAD = 0.075
DEFAULT_ROOT_VOLUME = 20 * GI
DEFAULT_EVICTION_HARD: Mapping[str, str] = {"memory.available": "100Mi", "nodefs.available": "10%"}

CPU, MEMORY, STORAGE, PODS, NVIDIA_GPU = "cpu", "memory", "ephemeral-storage", "pods", "nvidia.com/gpu"
_ARCH = {"x86_64": "amd64", "arm64": "arm64"}
NODECONFIG_CONTENT_TYPE = "application/node.eks.aws"


class UserDataError(ValueError):
    """User data the bootstrap could not read (a node with it would never join)."""


# ----- EC2 instance data --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class InstanceInfo:
    """What an instance type's ``InstanceTypeInfo`` says about the node it becomes."""

    name: str
    architecture: str  # the Kubernetes name: amd64, arm64
    vcpus: int
    memory_mib: int
    enis: int  # of the default network card
    ipv4_per_eni: int
    gpus: int = 0
    gpu_manufacturer: str = ""
    gpu_name: str = ""
    gpu_memory_mib: int = 0
    hypervisor: str = ""
    cpu_manufacturer: str = ""
    local_nvme_gib: int = 0
    ebs_bandwidth_mbps: int = 0
    encryption_in_transit: bool = False

    @classmethod
    def from_ec2(cls, info: Mapping[str, Any]) -> InstanceInfo:
        name = str(info.get("InstanceType") or "")
        archs = (info.get("ProcessorInfo") or {}).get("SupportedArchitectures") or ()
        arch = next((_ARCH[a] for a in archs if a in _ARCH), None)
        vcpus = (info.get("VCpuInfo") or {}).get("DefaultVCpus")
        memory = (info.get("MemoryInfo") or {}).get("SizeInMiB")
        if not name or arch is None or not vcpus or not memory:
            raise ValueError(f"InstanceTypeInfo {name or '?'}: needs InstanceType, an x86_64 or arm64 "
                             "architecture, VCpuInfo.DefaultVCpus and MemoryInfo.SizeInMiB")
        net = info.get("NetworkInfo") or {}
        cards = {int(c.get("NetworkCardIndex", 0)): c for c in net.get("NetworkCards") or ()}
        default_card = cards.get(int(net.get("DefaultNetworkCardIndex") or 0))
        enis = (default_card or net).get("MaximumNetworkInterfaces") or net.get("MaximumNetworkInterfaces") or 1
        gpus = (info.get("GpuInfo") or {}).get("Gpus") or ()
        storage = info.get("InstanceStorageInfo") or {}
        nvme = storage.get("TotalSizeInGB") if storage.get("NvmeSupport", "unsupported") != "unsupported" else 0
        ebs = ((info.get("EbsInfo") or {}).get("EbsOptimizedInfo") or {}).get("MaximumBandwidthInMbps") or 0
        return cls(
            name=name, architecture=arch, vcpus=int(vcpus), memory_mib=int(memory), enis=int(enis),
            ipv4_per_eni=int(net.get("Ipv4AddressesPerInterface") or 1),
            gpus=sum(int(g.get("Count") or 0) for g in gpus),
            gpu_manufacturer=str(gpus[0].get("Manufacturer") or "") if gpus else "",
            gpu_name=str(gpus[0].get("Name") or "") if gpus else "",
            gpu_memory_mib=sum(int((g.get("MemoryInfo") or {}).get("SizeInMiB") or 0) for g in gpus),
            hypervisor=str(info.get("Hypervisor") or ""),
            cpu_manufacturer=str((info.get("ProcessorInfo") or {}).get("Manufacturer") or ""),
            local_nvme_gib=int(nvme or 0), ebs_bandwidth_mbps=int(ebs),
            encryption_in_transit=bool(net.get("EncryptionInTransitSupported")),
        )

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def size(self) -> str:
        return self.name.split(".", 1)[1] if "." in self.name else ""


def _moto_resources() -> Path:
    import moto  # noqa: PLC0415 - only for the path of its bundled EC2 data

    return Path(moto.__file__).parent / "ec2" / "resources"


@functools.cache
def _raw_instance_types() -> tuple[Mapping[str, Any], ...]:
    with gzip.open(_moto_resources() / "instance_types.json.gz", "rt", encoding="utf-8") as fh:
        return tuple(json.load(fh).values())


@functools.cache
def instance_infos() -> Mapping[str, InstanceInfo]:
    """Every instance type of EC2's data (moto's bundled copy of DescribeInstanceTypes) Kubernetes nodes
    can run on (x86_64 or arm64, not Mac), by name."""
    out: dict[str, InstanceInfo] = {}
    for raw in _raw_instance_types():
        archs = (raw.get("ProcessorInfo") or {}).get("SupportedArchitectures") or ()
        if str(raw.get("InstanceType", "")).startswith("mac") or not any(a in _ARCH for a in archs):
            continue
        info = InstanceInfo.from_ec2(raw)
        out[info.name] = info
    return out


def instance_info(name: str) -> InstanceInfo:
    try:
        return instance_infos()[name]
    except KeyError:
        raise KeyError(f"instance type {name!r} is not in EC2's instance data") from None


# ----- quantities -----------------------------------------------------------------------------------

_SUFFIX: dict[str, int | Decimal] = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
           "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "m": Decimal("0.001")}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def parse_quantity(value: str | int | float, *, millis: bool = False) -> int:
    """A Kubernetes quantity as an integer (bytes, or millicores with ``millis``), rounded up as the API does."""
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if not match or match.group(2) not in ("", *_SUFFIX):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 100Mi, 1Gi, 250m, 2)")
    try:
        number = Decimal(match.group(1)) * Decimal(_SUFFIX.get(match.group(2), 1))
    except InvalidOperation as exc:
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from exc
    return math.ceil(number * 1000) if millis else math.ceil(number)


def _format_cpu(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def _format_bytes(n: int) -> str:
    return f"{n // 1024}Ki" if n % 1024 == 0 else str(n)


def quantities(resources: Mapping[str, int]) -> dict[str, str]:
    """Resources as a Node's ``status.capacity`` / ``allocatable`` strings (CPU in cores or m, bytes in Ki)."""
    out = {}
    for name, amount in resources.items():
        if name == CPU:
            out[name] = _format_cpu(amount)
        elif name in (MEMORY, STORAGE):
            out[name] = _format_bytes(amount)
        else:
            out[name] = str(amount)
    return out


# ----- the kubelet's configuration ----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Kubelet:
    """The kubelet settings that shape a node's capacity (an EC2NodeClass ``spec.kubelet`` block, a
    KubeletConfiguration, kubelet flags), as the AMI's bootstrap hands them to the kubelet."""

    max_pods: int | None = None
    pods_per_core: int | None = None
    system_reserved: Mapping[str, str] = field(default_factory=dict)
    kube_reserved: Mapping[str, str] = field(default_factory=dict)
    eviction_hard: Mapping[str, str] = field(default_factory=dict)
    # Which max pods the default kube-reserved memory is computed from: "eni" (nodeadm, bootstrap.sh: the
    # instance's ENI max pods, before the user's maxPods is merged) or "max" (Bottlerocket: its max-pods).
    memory_reserve_from: Literal["eni", "max"] = "eni"

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> Kubelet:
        """From camelCase KubeletConfiguration / EC2NodeClass ``spec.kubelet`` fields; others are ignored."""
        config = config or {}

        def strings(key: str) -> dict[str, str]:
            raw = config.get(key) or {}
            if not isinstance(raw, Mapping):
                raise ValueError(f"kubelet {key}: a map of resource to quantity, got {raw!r}")
            return {str(k): str(v) for k, v in raw.items()}

        def count(key: str) -> int | None:
            raw = config.get(key)
            if raw is None:
                return None
            if isinstance(raw, bool) or not isinstance(raw, int | str) or not str(raw).isdigit():
                raise ValueError(f"kubelet {key}: a whole number, got {raw!r}")
            return int(raw)

        return cls(max_pods=count("maxPods"), pods_per_core=count("podsPerCore"),
                   system_reserved=strings("systemReserved"), kube_reserved=strings("kubeReserved"),
                   eviction_hard=strings("evictionHard"))

    def merged(self, over: Kubelet) -> Kubelet:
        """``over`` merged onto this (nodeadm: scalars replace, maps merge key by key)."""
        return replace(
            self,
            max_pods=over.max_pods if over.max_pods is not None else self.max_pods,
            pods_per_core=over.pods_per_core if over.pods_per_core is not None else self.pods_per_core,
            system_reserved={**self.system_reserved, **over.system_reserved},
            kube_reserved={**self.kube_reserved, **over.kube_reserved},
            eviction_hard={**self.eviction_hard, **over.eviction_hard},
        )


# ----- capacity and allocatable -------------------------------------------------------------------

def eni_max_pods(info: InstanceInfo) -> int:
    return info.enis * (info.ipv4_per_eni - 1) + 2


def max_pods(info: InstanceInfo, kubelet: Kubelet | None = None) -> int:
    kubelet = kubelet or Kubelet()
    pods = kubelet.max_pods if kubelet.max_pods is not None else eni_max_pods(info)
    if kubelet.pods_per_core:
        pods = min(pods, kubelet.pods_per_core * info.vcpus)
    return max(pods, 0)


def kube_reserved_cpu_millis(vcpus: int) -> int:
    """nodeadm's ranges: 6 % of core 1, 1 % of core 2, 0.5 % of cores 3-4, 0.25 % above, each truncated."""
    total = vcpus * 1000
    out = 0
    for start, end, basis_points in ((0, 1000, 600), (1000, 2000, 100), (2000, 4000, 50), (4000, total, 25)):
        if total > start:
            out += (min(total, end) - start) * basis_points // 10000
    return out


def kube_reserved_memory_mib(pods: int) -> int:
    return 255 + 11 * pods


def capacity(info: InstanceInfo, kubelet: Kubelet | None = None, *,
             root_volume_bytes: int | None = None) -> dict[str, int]:
    """What the kubelet reports as the node's ``status.capacity`` (CPU in millicores, bytes, pod count)."""
    out = {
        CPU: info.vcpus * 1000,
        MEMORY: (info.memory_mib - math.ceil(info.memory_mib * VM_MEMORY_OVERHEAD)) * MI,
        STORAGE: root_volume_bytes or DEFAULT_ROOT_VOLUME,
        PODS: max_pods(info, kubelet),
    }
    if info.gpus and info.gpu_manufacturer.lower() == "nvidia":
        out[NVIDIA_GPU] = info.gpus
    return out


def kube_reserved(info: InstanceInfo, kubelet: Kubelet | None = None) -> dict[str, int]:
    kubelet = kubelet or Kubelet()
    basis = eni_max_pods(info) if kubelet.memory_reserve_from == "eni" else max_pods(info, kubelet)
    out = {CPU: kube_reserved_cpu_millis(info.vcpus), MEMORY: kube_reserved_memory_mib(basis) * MI, STORAGE: GI}
    out.update(_resources(kubelet.kube_reserved))
    return out


def _resources(raw: Mapping[str, str]) -> dict[str, int]:
    return {k: parse_quantity(v, millis=k == CPU) for k, v in raw.items()}


def _threshold(value: str, total: int) -> int:
    if value.endswith("%"):
        return int(total * float(value[:-1]) / 100)
    return parse_quantity(value)


def eviction_hard(cap: Mapping[str, int], kubelet: Kubelet | None = None) -> dict[str, int]:
    """The hard eviction thresholds that allocatable keeps back: memory and the node filesystem."""
    signals = {**DEFAULT_EVICTION_HARD, **(kubelet.eviction_hard if kubelet else {})}
    out = {}
    if "memory.available" in signals:
        out[MEMORY] = _threshold(signals["memory.available"], cap[MEMORY])
    if "nodefs.available" in signals:
        out[STORAGE] = _threshold(signals["nodefs.available"], cap[STORAGE])
    return out


def allocatable(info: InstanceInfo, kubelet: Kubelet | None = None, *,
                root_volume_bytes: int | None = None) -> dict[str, int]:
    """The node's ``status.allocatable``: capacity less kube-reserved, system-reserved and hard eviction."""
    cap = capacity(info, kubelet, root_volume_bytes=root_volume_bytes)
    out = dict(cap)
    for held in (kube_reserved(info, kubelet), _resources(kubelet.system_reserved if kubelet else {}),
                 eviction_hard(cap, kubelet)):
        for name, amount in held.items():
            if name in out and name != PODS:
                out[name] -= amount
    return {k: max(v, 0) for k, v in out.items()}


# ----- labels --------------------------------------------------------------------------------------

def _category_generation(family: str) -> tuple[str, str]:
    match = re.match(r"^([a-z]+)(\d+)", family)
    if match:
        return match.group(1), match.group(2)
    return re.sub(r"[^a-z].*$", "", family), ""


def labels_for(info: InstanceInfo, *, zone: str, region: str, capacity_type: str,
               hostname: str | None = None) -> dict[str, str]:
    """The well-known labels of a node on this instance: the kubelet's, the cloud node controller's and
    Karpenter's instance labels (set only where the EC2 data has a value, as Karpenter sets them)."""
    category, generation = _category_generation(info.family)
    labels = {
        "kubernetes.io/arch": info.architecture,
        "beta.kubernetes.io/arch": info.architecture,
        "kubernetes.io/os": "linux",
        "beta.kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": info.name,
        "beta.kubernetes.io/instance-type": info.name,
        "topology.kubernetes.io/zone": zone,
        "failure-domain.beta.kubernetes.io/zone": zone,
        "topology.kubernetes.io/region": region,
        "failure-domain.beta.kubernetes.io/region": region,
        "karpenter.sh/capacity-type": capacity_type,
        "karpenter.k8s.aws/instance-category": category,
        "karpenter.k8s.aws/instance-family": info.family,
        "karpenter.k8s.aws/instance-size": info.size,
        "karpenter.k8s.aws/instance-cpu": str(info.vcpus),
        "karpenter.k8s.aws/instance-memory": str(info.memory_mib),
        "karpenter.k8s.aws/instance-encryption-in-transit-supported": str(info.encryption_in_transit).lower(),
    }
    if hostname:
        labels["kubernetes.io/hostname"] = hostname
    optional = {
        "karpenter.k8s.aws/instance-generation": generation,
        "karpenter.k8s.aws/instance-hypervisor": info.hypervisor,
        "karpenter.k8s.aws/instance-cpu-manufacturer": info.cpu_manufacturer.lower(),
        "karpenter.k8s.aws/instance-local-nvme": str(info.local_nvme_gib) if info.local_nvme_gib else "",
        "karpenter.k8s.aws/instance-ebs-bandwidth": str(info.ebs_bandwidth_mbps) if info.ebs_bandwidth_mbps else "",
    }
    if info.gpus:
        optional.update({
            "karpenter.k8s.aws/instance-gpu-count": str(info.gpus),
            "karpenter.k8s.aws/instance-gpu-name": info.gpu_name.lower(),
            "karpenter.k8s.aws/instance-gpu-manufacturer": info.gpu_manufacturer.lower(),
            "karpenter.k8s.aws/instance-gpu-memory": str(info.gpu_memory_mib),
        })
    labels.update({k: v for k, v in optional.items() if v})
    return labels


def capacity_type_of(ec2_instance: Mapping[str, Any]) -> str:
    """``karpenter.sh/capacity-type`` of a DescribeInstances instance: spot, reserved or on-demand."""
    if ec2_instance.get("InstanceLifecycle") == "spot":
        return "spot"
    if ec2_instance.get("CapacityReservationId"):
        return "reserved"
    return "on-demand"


# ----- user data -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Join:
    """What a node's user data tells its bootstrap: the AMI family it is written for, the labels and taints
    the kubelet registers with, and the kubelet settings."""

    family: Literal["AL2023", "AL2", "Bottlerocket", "none"]
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()
    kubelet: Kubelet = field(default_factory=Kubelet)


def _decoded(user_data: str | bytes) -> str:
    """Plain text: user data may come base64-encoded (as EC2 and launch templates hold it)."""
    raw = user_data.encode() if isinstance(user_data, str) else user_data
    stripped = raw.strip()
    if stripped and re.fullmatch(rb"[A-Za-z0-9+/=\s]+", stripped) and len(stripped) % 4 == 0:
        try:
            decoded = base64.b64decode(stripped, validate=False)
            text = decoded.decode("utf-8")
            if text.isprintable() or "\n" in text:
                return text
        except (binascii.Error, UnicodeDecodeError):
            pass
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return raw.decode("utf-8")


def _payload(part: email.message.EmailMessage) -> str:
    """A part's body as text, whatever its content type and transfer encoding."""
    body = part.get_payload(decode=True)
    return body.decode("utf-8") if isinstance(body, bytes) else str(part.get_payload())


def _parts(text: str) -> list[tuple[str, str]]:
    head = text.lstrip()
    if head.startswith("MIME-Version") or head.lower().startswith("content-type: multipart"):
        msg = email.parser.Parser(policy=email.policy.default).parsestr(text)
        if not msg.is_multipart():
            raise UserDataError("MIME user data must be multipart/mixed")
        return [(part.get_content_type(), _payload(part)) for part in msg.iter_parts()
                if isinstance(part, email.message.EmailMessage)]
    if head.startswith(("apiVersion: node.eks.aws", "---")) or '"kind": "NodeConfig"' in head:
        return [(NODECONFIG_CONTENT_TYPE, text)]
    if head.startswith("[settings"):
        return [("application/toml", text)]
    return [("text/x-shellscript", text)]


def _label_list(raw: str, where: str) -> dict[str, str]:
    out = {}
    for item in filter(None, (s.strip() for s in raw.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserDataError(f"{where}: label {item!r} is not key=value")
        out[key] = value
    return out


def _taint(item: str, where: str) -> dict[str, str]:
    spec, sep, effect = item.rpartition(":")
    key, _, value = spec.partition("=")
    if not sep or not key or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        raise UserDataError(f"{where}: taint {item!r} is not key[=value]:NoSchedule|PreferNoSchedule|NoExecute")
    return {"key": key, "value": value, "effect": effect} if value else {"key": key, "effect": effect}


def _taint_list(raw: str, where: str) -> list[dict[str, str]]:
    return [_taint(s.strip(), where) for s in raw.split(",") if s.strip()]


def _flag_pairs(raw: str) -> dict[str, str]:
    """``cpu=100m,memory=1Gi`` (kube-reserved style) or ``memory.available<100Mi`` (eviction style)."""
    out = {}
    for item in filter(None, (s.strip() for s in raw.split(","))):
        key, sep, value = item.partition("<") if "<" in item else item.partition("=")
        if not sep:
            raise UserDataError(f"kubelet flag value {item!r} is not name=quantity")
        out[key.strip()] = value.strip()
    return out


@dataclass
class _FlagState:
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    kubelet: Kubelet = field(default_factory=Kubelet)


def _apply_flags(flags: Iterable[str], state: _FlagState, where: str) -> None:
    """Kubelet command-line flags: the last occurrence of a flag wins, as with any Go flag set."""
    args = list(flags)
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            i += 1
            continue
        name, sep, value = arg[2:].partition("=")
        if not sep and i + 1 < len(args) and not args[i + 1].startswith("--"):
            value, i = args[i + 1], i + 1
        i += 1
        if name == "node-labels":
            state.labels = _label_list(value, where)
        elif name == "register-with-taints":
            state.taints = _taint_list(value, where)
        elif name == "max-pods":
            state.kubelet = replace(state.kubelet, max_pods=int(value))
        elif name == "pods-per-core":
            state.kubelet = replace(state.kubelet, pods_per_core=int(value))
        elif name == "kube-reserved":
            state.kubelet = replace(state.kubelet, kube_reserved=_flag_pairs(value))
        elif name == "system-reserved":
            state.kubelet = replace(state.kubelet, system_reserved=_flag_pairs(value))
        elif name == "eviction-hard":
            state.kubelet = replace(state.kubelet, eviction_hard=_flag_pairs(value))


def _nodeconfigs(body: str) -> list[Mapping[str, Any]]:
    try:
        docs = [d for d in yaml.safe_load_all(body) if d]
    except yaml.YAMLError as exc:
        raise UserDataError(f"a NodeConfig part is not YAML: {exc}") from exc
    out = []
    for doc in docs:
        if not isinstance(doc, Mapping) or doc.get("kind") != "NodeConfig":
            raise UserDataError("an application/node.eks.aws part holds something other than a NodeConfig")
        out.append(doc)
    return out


def _al2023(configs: list[Mapping[str, Any]]) -> Join:
    state = _FlagState()
    for doc in configs:
        kubelet = ((doc.get("spec") or {}).get("kubelet") or {})
        _apply_flags(kubelet.get("flags") or (), state, "NodeConfig spec.kubelet.flags")
        try:
            state.kubelet = state.kubelet.merged(Kubelet.from_config(kubelet.get("config")))
        except ValueError as exc:
            raise UserDataError(f"NodeConfig spec.kubelet.config: {exc}") from exc
    return Join("AL2023", state.labels, tuple(state.taints), state.kubelet)


def _al2(script: str) -> Join | None:
    for line in script.splitlines():
        if "/etc/eks/bootstrap.sh" not in line:
            continue
        args = shlex.split(line, comments=True)
        state = _FlagState()
        extra = ""
        for i, arg in enumerate(args):
            if arg == "--kubelet-extra-args" and i + 1 < len(args):
                extra = args[i + 1]
            elif arg.startswith("--kubelet-extra-args="):
                extra = arg.partition("=")[2]
        _apply_flags(shlex.split(extra), state, "bootstrap.sh --kubelet-extra-args")
        return Join("AL2", state.labels, tuple(state.taints), state.kubelet)
    return None


def _bottlerocket(text: str) -> Join:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserDataError(f"Bottlerocket user data is not TOML: {exc}") from exc
    k8s = (doc.get("settings") or {}).get("kubernetes") or {}
    taints = [_taint(f"{key}={v}" if not v.startswith(":") else f"{key}{v}", "settings.kubernetes.node-taints")
              for key, values in (k8s.get("node-taints") or {}).items()
              for v in ([values] if isinstance(values, str) else values)]
    kubelet = Kubelet(max_pods=k8s.get("max-pods"),
                      system_reserved={k: str(v) for k, v in (k8s.get("system-reserved") or {}).items()},
                      kube_reserved={k: str(v) for k, v in (k8s.get("kube-reserved") or {}).items()},
                      eviction_hard={k: str(v) for k, v in (k8s.get("eviction-hard") or {}).items()},
                      memory_reserve_from="max")
    labels = {str(k): str(v) for k, v in (k8s.get("node-labels") or {}).items()}
    return Join("Bottlerocket", labels, tuple(taints), kubelet)


def parse_user_data(user_data: str | bytes | None) -> Join:
    """Read user data as the EKS AMIs' bootstraps do; ``UserDataError`` names what they could not read."""
    if user_data is None:
        return Join("none")
    text = _decoded(user_data)
    if not text.strip():
        return Join("none")
    parts = _parts(text)
    configs = [c for ctype, body in parts if ctype == NODECONFIG_CONTENT_TYPE for c in _nodeconfigs(body)]
    if configs:
        return _al2023(configs)
    for ctype, body in parts:
        if ctype == "application/toml":
            return _bottlerocket(body)
        if ctype == "text/x-shellscript":
            join = _al2(body)
            if join is not None:
                return join
    if len(parts) == 1 and "[settings" in text:
        return _bottlerocket(text)
    return Join("none")


# ----- the node ------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class EksNode:
    """A node as it registers: its labels and taints, capacity and allocatable, and the kubelet settings."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, str], ...]
    capacity: Mapping[str, int]
    allocatable: Mapping[str, int]
    kubelet: Kubelet
    family: str

    def status(self) -> dict[str, dict[str, str]]:
        return {"capacity": quantities(self.capacity), "allocatable": quantities(self.allocatable)}


def node_from_user_data(user_data: str | bytes | None, info: InstanceInfo, *, name: str, zone: str,
                        region: str, capacity_type: str, root_volume_bytes: int | None = None) -> EksNode:
    """The node an instance of ``info`` becomes with this user data. The well-known labels describe the
    instance; user-data labels cannot change them (the kubelet and cloud node controller set their own;
    Karpenter's instance labels are the instance's) but add to them."""
    join = parse_user_data(user_data)
    labels = {**join.labels, **labels_for(info, zone=zone, region=region, capacity_type=capacity_type,
                                          hostname=name)}
    return EksNode(name=name, labels=labels, taints=join.taints,
                   capacity=capacity(info, join.kubelet, root_volume_bytes=root_volume_bytes),
                   allocatable=allocatable(info, join.kubelet, root_volume_bytes=root_volume_bytes),
                   kubelet=join.kubelet, family=join.family)
