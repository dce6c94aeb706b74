"""User data that joins a node to the cluster with its NodePool's labels and taints, per AMI family:
AL2023 (a nodeadm NodeConfig in MIME multipart, merged with the user's own parts), Bottlerocket (TOML
settings merged with the user's TOML) and AL2 (bootstrap.sh). Custom AMIs get the user's data as is.
"""

from __future__ import annotations

import email.message
import email.parser
import email.policy
import ipaddress
import json
import shlex
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from autoscaler.domain.errors import ConfigError
from autoscaler.domain.models import Taint
from autoscaler.domain.nodeclass import KubeletConfiguration

_BOUNDARY = "//AUTOSCALER-BOUNDARY"
NODECONFIG_CONTENT_TYPE = "application/node.eks.aws"


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """What a node needs to join: the EKS cluster's name, API endpoint, CA (base64 PEM), Kubernetes
    version and service CIDR (for the cluster DNS address on AL2 / Bottlerocket)."""

    name: str
    endpoint: str
    certificate_authority: str
    k8s_version: str
    service_cidr: str = "10.100.0.0/16"

    @property
    def dns_ip(self) -> str:
        """kube-dns is the service CIDR's 10th address (EKS's convention)."""
        return str(ipaddress.ip_network(self.service_cidr, strict=False).network_address + 10)


@dataclass(frozen=True, slots=True)
class NodeJoin:
    """The per-node part of the user data: labels, taints and kubelet settings."""

    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    kubelet: KubeletConfiguration | None = None
    max_pods: int | None = None


def _taint_arg(t: Taint) -> str:
    return f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"


def _labels_arg(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _kubelet_config(join: NodeJoin, *, cluster_dns: list[str] | None = None) -> dict[str, Any]:
    """KubeletConfiguration fields (kubelet.config.k8s.io names) from the EC2NodeClass."""
    cfg: dict[str, Any] = {}
    kc = join.kubelet
    if kc is not None:
        cfg.update(kc.model_dump(by_alias=True, exclude_none=True))
    if join.max_pods is not None:
        cfg["maxPods"] = join.max_pods
    if cluster_dns and "clusterDNS" not in cfg:
        cfg["clusterDNS"] = cluster_dns
    return cfg


# --- AL2023 --------------------------------------------------------------------------------------

def nodeconfig(cluster: ClusterInfo, join: NodeJoin) -> dict[str, Any]:
    flags = []
    if join.labels:
        flags.append(f"--node-labels={_labels_arg(join.labels)}")
    if join.taints:
        flags.append(f"--register-with-taints={','.join(_taint_arg(t) for t in join.taints)}")
    kubelet: dict[str, Any] = {"flags": flags}
    config = _kubelet_config(join)
    if config:
        kubelet["config"] = config
    return {
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {
            "cluster": {
                "name": cluster.name,
                "apiServerEndpoint": cluster.endpoint,
                "certificateAuthority": cluster.certificate_authority,
                "cidr": cluster.service_cidr,
            },
            "kubelet": kubelet,
        },
    }


def _user_parts(user_data: str | None) -> list[tuple[str, str]]:
    """The user's own user data as (content type, body) parts; a MIME document keeps its parts."""
    if not user_data or not user_data.strip():
        return []
    text = user_data.strip()
    if text.startswith("MIME-Version") or text.lower().startswith("content-type: multipart"):
        msg = email.parser.Parser(policy=email.policy.default).parsestr(user_data)
        if not msg.is_multipart():
            raise ConfigError("EC2NodeClass spec.userData: MIME user data must be multipart/mixed")
        return [(part.get_content_type(), str(part.get_content())) for part in msg.iter_parts()
                if isinstance(part, email.message.EmailMessage)]
    if text.startswith("apiVersion: node.eks.aws") or '"kind": "NodeConfig"' in text:
        return [(NODECONFIG_CONTENT_TYPE, user_data)]
    return [("text/x-shellscript", user_data)]


def al2023_user_data(cluster: ClusterInfo, join: NodeJoin, user_data: str | None) -> str:
    """MIME multipart: the user's parts first, then ours. nodeadm merges NodeConfigs in order, so the
    cluster and registration settings we write are the ones that hold."""
    parts = _user_parts(user_data)
    parts.append((NODECONFIG_CONTENT_TYPE, yaml.safe_dump(nodeconfig(cluster, join), sort_keys=False)))
    return mime_multipart(parts)


def mime_multipart(parts: list[tuple[str, str]]) -> str:
    """A multipart/mixed document with plain-text parts (no transfer encoding), the shape cloud-init
    and nodeadm read and an operator can read in the console."""
    out = [f'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="{_BOUNDARY}"\n']
    for ctype, body in parts:
        out.append(f'--{_BOUNDARY}\nContent-Type: {ctype}; charset="us-ascii"\n\n{body.rstrip()}\n')
    out.append(f"--{_BOUNDARY}--\n")
    return "\n".join(out)


# --- Bottlerocket --------------------------------------------------------------------------------

def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))  # a TOML basic string is a JSON string


def _toml_key(k: str) -> str:
    return k if k.replace("-", "").replace("_", "").isalnum() else json.dumps(k)


def dump_toml(doc: Mapping[str, Any], prefix: str = "") -> str:
    """A small TOML writer for settings trees (tables, strings, numbers, bools, arrays)."""
    lines = [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in doc.items() if not isinstance(v, Mapping)]
    out = "\n".join(lines) + ("\n" if lines else "")
    for k, v in doc.items():
        if isinstance(v, Mapping):
            name = f"{prefix}.{_toml_key(k)}" if prefix else _toml_key(k)
            body = dump_toml(v, name)
            out += f"\n[{name}]\n{body}" if any(not isinstance(x, Mapping) for x in v.values()) else body
    return out


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(base.get(k), dict):
            _deep_merge(base[k], v)
        else:
            base[k] = v
    return base


def bottlerocket_user_data(cluster: ClusterInfo, join: NodeJoin, user_data: str | None) -> str:
    try:
        doc: dict[str, Any] = tomllib.loads(user_data or "")
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"EC2NodeClass spec.userData: Bottlerocket user data is not valid TOML: {exc}") from exc
    taints: dict[str, list[str]] = {}
    for t in join.taints:
        taints.setdefault(t.key, []).append(f"{t.value}:{t.effect}")
    k8s: dict[str, Any] = {
        "cluster-name": cluster.name,
        "api-server": cluster.endpoint,
        "cluster-certificate": cluster.certificate_authority,
        "cluster-dns-ip": cluster.dns_ip,
    }
    kc = join.kubelet
    max_pods = join.max_pods or (kc.max_pods if kc else None)
    if max_pods:
        k8s["max-pods"] = max_pods
    if kc is not None:
        if kc.cluster_dns:
            k8s["cluster-dns-ip"] = kc.cluster_dns[0]
        for ours, theirs in (("system-reserved", kc.system_reserved), ("kube-reserved", kc.kube_reserved),
                             ("eviction-hard", kc.eviction_hard)):
            if theirs:
                k8s[ours] = dict(theirs)
    if join.labels:
        k8s["node-labels"] = dict(join.labels)
    if taints:
        k8s["node-taints"] = taints
    # The user's settings are kept; cluster identity, labels and taints are ours (merged into theirs).
    return dump_toml(_deep_merge(doc, {"settings": {"kubernetes": k8s}}))


# --- AL2 -----------------------------------------------------------------------------------------

# bootstrap.sh writes these hard eviction thresholds into the kubelet's config; a kubelet map flag replaces
# the config's whole map, so a flag states them all, the EC2NodeClass's values over these.
_AL2_EVICTION_HARD = {"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%"}


def _al2_reservation_flags(kc: KubeletConfiguration | None) -> list[str]:
    """The EC2NodeClass's pods per core and reservations as kubelet flags (bootstrap.sh has no options for
    them): what the planner subtracts is what the kubelet holds back. A ``--kube-reserved`` flag replaces
    bootstrap.sh's whole computed map, so a resource it does not name is not reserved at all: such a node has
    more room than planned, never less (CPU cannot be named for every instance type one template serves)."""
    if kc is None:
        return []
    flags = [f"--pods-per-core={kc.pods_per_core}"] if kc.pods_per_core else []
    if kc.kube_reserved:
        flags.append(f"--kube-reserved={_pairs(kc.kube_reserved, '=')}")
    if kc.system_reserved:
        flags.append(f"--system-reserved={_pairs(kc.system_reserved, '=')}")
    if kc.eviction_hard:
        flags.append(f"--eviction-hard={_pairs({**_AL2_EVICTION_HARD, **kc.eviction_hard}, '<')}")
    return flags


def _pairs(values: Mapping[str, str], separator: str) -> str:
    return ",".join(f"{k}{separator}{v}" for k, v in sorted(values.items()))


def al2_user_data(cluster: ClusterInfo, join: NodeJoin, user_data: str | None) -> str:
    extra = []
    if join.labels:
        extra.append(f"--node-labels={_labels_arg(join.labels)}")
    if join.taints:
        extra.append(f"--register-with-taints={','.join(_taint_arg(t) for t in join.taints)}")
    kc = join.kubelet
    max_pods = join.max_pods or (kc.max_pods if kc else None)
    if max_pods:
        extra.append(f"--max-pods={max_pods}")
    extra += _al2_reservation_flags(kc)
    dns = kc.cluster_dns[0] if kc and kc.cluster_dns else cluster.dns_ip
    args = [
        "/etc/eks/bootstrap.sh", cluster.name,
        "--apiserver-endpoint", cluster.endpoint,
        "--b64-cluster-ca", cluster.certificate_authority,
        "--dns-cluster-ip", dns,
    ]
    if max_pods:
        # Otherwise bootstrap.sh derives max pods from the instance type's ENIs, which is what the
        # planner assumes too; one template serves many types, so we cannot write a number per type.
        args += ["--use-max-pods", "false"]
    args += ["--kubelet-extra-args", " ".join(extra)]
    script = "#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log | logger -t user-data -s 2>/dev/console) 2>&1\n"
    script += " ".join(shlex.quote(a) for a in args) + "\n"
    return mime_multipart([*_user_parts(user_data), ("text/x-shellscript", script)])


def render_user_data(*, family: str, cluster: ClusterInfo, join: NodeJoin, user_data: str | None) -> str:
    """The user data (plain text, not yet base64) for a node of this AMI family."""
    if family == "AL2023":
        return al2023_user_data(cluster, join, user_data)
    if family == "Bottlerocket":
        return bottlerocket_user_data(cluster, join, user_data)
    if family == "AL2":
        return al2_user_data(cluster, join, user_data)
    if family == "Custom":
        return user_data or ""
    raise ConfigError(f"EC2NodeClass spec.amiFamily: {family} nodes are not supported by this autoscaler")
