"""AMIs from an EC2NodeClass's ``amiSelectorTerms``: aliases through the public EKS / Bottlerocket
SSM parameters for the cluster's Kubernetes version and each architecture, or images found by id,
name, owner, tags or an SSM parameter through DescribeImages. Results are cached."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from autoscaler.adapters.aws._calls import Caller, TtlCache
from autoscaler.app.ports import Clock, CloudError, CloudNotFoundError
from autoscaler.domain.errors import ConfigError
from autoscaler.domain.models import InstanceType
from autoscaler.domain.nodeclass import AmiSelectorTerm, NodeClass

Arch = Literal["amd64", "arm64"]
# Accelerated EKS images: NVIDIA drivers ("nvidia") or the AWS Neuron SDK ("neuron", Inferentia/Trainium).
Variant = Literal["standard", "nvidia", "neuron"]
_EC2_ARCH: dict[str, Arch] = {"x86_64": "amd64", "arm64": "arm64"}
_ARCHES: tuple[Arch, ...] = ("amd64", "arm64")


@dataclass(frozen=True, slots=True)
class Ami:
    image_id: str
    architecture: Arch
    name: str = ""
    creation_date: str = ""
    source: str = ""  # the SSM parameter or selector it came from
    variant: str = ""  # "standard" / "nvidia" / "neuron" for alias images; "" = the user's image, any type

    @property
    def key(self) -> str:
        """Identifies the image among a node class's images (one launch template each)."""
        return f"{self.architecture}/{self.variant or 'any'}"


def variant_of(instance_type: InstanceType) -> Variant:
    """Which accelerated image an instance type needs."""
    if instance_type.gpu_count and instance_type.gpu_manufacturer.upper() == "NVIDIA":
        return "nvidia"
    if instance_type.category in ("inf", "trn"):
        return "neuron"
    return "standard"


def image_for(amis: Iterable[Ami], instance_type: InstanceType) -> Ami | None:
    """The image to run ``instance_type`` on: an alias image of its architecture and variant, or a
    user-selected image of its architecture. None when there is none (the type is not offered)."""
    want = variant_of(instance_type)
    for ami in amis:
        if ami.architecture == instance_type.architecture and ami.variant in ("", want):
            return ami
    return None


def alias_parameter(
    *, family: str, version: str, k8s_version: str, arch: Arch, variant: Variant = "standard",
) -> str | None:
    """The public SSM parameter holding the image id for an alias (``latest`` or pinned), or None when
    the family publishes no such image (e.g. AL2 GPU images exist for x86_64 only)."""
    ec2_arch = "x86_64" if arch == "amd64" else "arm64"
    if family == "AL2023":
        base = f"/aws/service/eks/optimized-ami/{k8s_version}/amazon-linux-2023/{ec2_arch}/{variant}"
        if version == "latest":
            return f"{base}/recommended/image_id"
        return f"{base}/amazon-eks-node-al2023-{ec2_arch}-{variant}-{k8s_version}-{version}/image_id"
    if family == "AL2":
        if variant != "standard":  # one GPU image (NVIDIA and Neuron), x86_64 only
            if arch != "amd64":
                return None
            base = f"/aws/service/eks/optimized-ami/{k8s_version}/amazon-linux-2-gpu"
            node = "amazon-eks-gpu-node"
        else:
            suffix = "" if arch == "amd64" else "-arm64"
            base = f"/aws/service/eks/optimized-ami/{k8s_version}/amazon-linux-2{suffix}"
            node = "amazon-eks-node" if arch == "amd64" else "amazon-eks-arm64-node"
        if version == "latest":
            return f"{base}/recommended/image_id"
        return f"{base}/{node}-{k8s_version}-{version}/image_id"
    if family == "Bottlerocket":
        pinned = "latest" if version == "latest" else version.removeprefix("v")
        # Bottlerocket's standard image carries the Neuron driver; NVIDIA needs the -nvidia variant.
        flavour = "-nvidia" if variant == "nvidia" else ""
        return f"/aws/service/bottlerocket/aws-k8s-{k8s_version}{flavour}/{ec2_arch}/{pinned}/image_id"
    raise ConfigError(f"amiSelectorTerms: alias family {family} is not supported for Linux nodes")


def _image_filters(term: AmiSelectorTerm) -> tuple[dict[str, Any], str]:
    params: dict[str, Any] = {}
    filters: list[dict[str, Any]] = [{"Name": "state", "Values": ["available"]}]
    if term.id:
        params["ImageIds"] = [term.id]
    if term.name:
        filters.append({"Name": "name", "Values": [term.name]})
    for key, value in (term.tags or {}).items():
        filters.append({"Name": "tag-key", "Values": [key]} if value == "*"
                       else {"Name": f"tag:{key}", "Values": [value]})
    if term.owner:
        params["Owners"] = [term.owner]
    elif term.name and not term.id:
        # Karpenter's rule: a name alone searches your own and Amazon's images, never the marketplace.
        params["Owners"] = ["self", "amazon"]
    params["Filters"] = filters
    return params, term.model_dump_json(exclude_none=True)


class AmiResolver:
    """Resolves a node class to at most one AMI per architecture (the newest match), cached ``ttl``
    seconds (default 1 h: new EKS AMIs appear weekly at most)."""

    def __init__(self, *, ssm: Any, ec2: Any, k8s_version: str, clock: Clock, ttl: float = 3600.0) -> None:
        self._ssm = Caller(ssm)
        self._ec2 = Caller(ec2)
        self._k8s = k8s_version
        self._cache: TtlCache[dict[str, Ami]] = TtlCache(clock=clock, ttl=ttl)

    @property
    def calls(self) -> dict[str, int]:
        return dict(self._ssm.calls + self._ec2.calls)

    def resolve(self, node_class: NodeClass, variants: Iterable[Variant] = ("standard",)) -> dict[str, Ami]:
        """``Ami.key`` -> AMI: the newest image per architecture (and, for aliases, per variant in
        ``variants``). Raises ConfigError naming the node class when nothing matches."""
        wanted = tuple(sorted(set(variants)))
        key = "|".join(t.model_dump_json() for t in node_class.ami_selector_terms) + f"|{wanted}"
        return self._cache.get_or_load(key, lambda: self._load(node_class, wanted))

    def _load(self, node_class: NodeClass, wanted: tuple[Variant, ...]) -> dict[str, Ami]:
        found: dict[str, Ami] = {}
        for term in node_class.ami_selector_terms:
            for ami in self._resolve_term(term, wanted):
                best = found.get(ami.key)
                if best is None or ami.creation_date > best.creation_date:
                    found[ami.key] = ami
        if not found:
            raise ConfigError(
                f"EC2NodeClass {node_class.name}: spec.amiSelectorTerms match no available image "
                f"(Kubernetes {self._k8s})"
            )
        return found

    def _resolve_term(self, term: AmiSelectorTerm, variants: tuple[Variant, ...]) -> list[Ami]:
        if term.alias:
            out = []
            for arch in _ARCHES:
                for variant in variants:
                    name = alias_parameter(family=str(term.alias_family), version=str(term.alias_version),
                                           k8s_version=self._k8s, arch=arch, variant=variant)
                    image_id = self._parameter(name) if name else None
                    if image_id:
                        out.append(Ami(image_id=image_id, architecture=arch, source=str(name), variant=variant))
            return out
        if term.ssm_parameter:
            image_id = self._parameter(term.ssm_parameter)
            if not image_id:
                return []
            return self._describe({"ImageIds": [image_id]}, source=term.ssm_parameter)
        params, source = _image_filters(term)
        return self._describe(params, source=source)

    def _parameter(self, name: str) -> str | None:
        try:
            found = self._ssm("get_parameter", Name=name, expected_errors=("ParameterNotFound",))
            return str(found["Parameter"]["Value"])
        except CloudNotFoundError:
            return None  # e.g. no arm64 build of this family: that architecture is simply absent

    def _describe(self, params: dict[str, Any], *, source: str) -> list[Ami]:
        try:
            images = self._ec2("describe_images", **params).get("Images", ())
        except CloudError as exc:
            if exc.code.startswith("InvalidAMIID"):
                return []
            raise
        out = []
        for img in images:
            arch = _EC2_ARCH.get(str(img.get("Architecture")))
            if arch is None or img.get("State", "available") != "available":
                continue
            out.append(Ami(image_id=img["ImageId"], architecture=arch, name=str(img.get("Name") or ""),
                           creation_date=str(img.get("CreationDate") or ""), source=source))
        return out
