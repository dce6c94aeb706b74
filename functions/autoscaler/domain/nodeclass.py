"""EC2NodeClass (``karpenter.k8s.aws/v1``, and ``v1beta1``) and the older AWSNodeTemplate
(``karpenter.k8s.aws/v1alpha1``), validated and converted to one model, ``NodeClass``.

The AWS adapter resolves its selector terms (subnets, security groups, AMIs, capacity reservations) and builds launch
templates from it; the scheduler reads its kubelet settings for allocatable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from autoscaler.domain.errors import ConfigError, describe_validation_error, manifest_header
from autoscaler.domain.ownership import EC2_TAG_LIMIT, OWN_TAG_COUNT, user_tag_count

AmiFamily = Literal["AL2023", "AL2", "Bottlerocket", "Custom", "Windows2019", "Windows2022"]
# docs/aws.md: the launch path builds Linux bootstrap user data only.
WINDOWS_UNSUPPORTED = ("Windows nodes are not supported (docs/aws.md: the autoscaler launches Linux nodes only); "
                       "use al2023@latest, al2@latest or bottlerocket@latest")
_ALIAS_FAMILIES = {"al2023": "AL2023", "al2": "AL2", "bottlerocket": "Bottlerocket"}


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class SelectorTerm(_Model):
    """A subnet / security-group selector term: by id, by name, or by tags (all must match)."""

    id: str | None = None
    name: str | None = None
    tags: dict[str, str] | None = None

    @model_validator(mode="after")
    def _one_way(self) -> SelectorTerm:
        if self.id and (self.tags or self.name):
            raise ValueError("a term selects by id alone, or by tags/name, not both")
        if not (self.id or self.tags or self.name):
            raise ValueError("a term needs id, name or tags")
        return self


class CapacityReservationSelectorTerm(_Model):
    """Karpenter v1's term: one reservation by ``id``, or every reservation carrying ``tags`` (``*`` matches
    any value), optionally of one account (``ownerID``) or match criteria. Terms are ORed."""

    id: str | None = Field(default=None, pattern=r"^cr-[0-9a-z]+$")
    tags: dict[str, str] | None = Field(default=None, max_length=20)
    owner_id: str | None = Field(default=None, alias="ownerID", pattern=r"^[0-9]{12}$")
    instance_match_criteria: Literal["open", "targeted"] | None = None

    @model_validator(mode="after")
    def _one_way(self) -> CapacityReservationSelectorTerm:
        if self.id and (self.tags or self.owner_id or self.instance_match_criteria):
            raise ValueError("'id' is mutually exclusive, cannot be set along with other fields in a capacity "
                             "reservation selector term; write {id: cr-...} alone, or select by tags")
        if not (self.id or self.tags or self.instance_match_criteria):
            raise ValueError("a capacity reservation selector term needs id, tags or instanceMatchCriteria "
                             "(e.g. {id: cr-0123456789abcdef0})")
        if any(not k or not v for k, v in (self.tags or {}).items()):
            raise ValueError("tags: empty tag keys or values aren't supported (write '*' to match any value)")
        return self


class AmiSelectorTerm(_Model):
    alias: str | None = None  # family@version: al2023@latest, al2023@v20240807, bottlerocket@latest
    id: str | None = None
    name: str | None = None
    owner: str | None = None
    tags: dict[str, str] | None = None
    ssm_parameter: str | None = Field(default=None, alias="ssmParameter")

    @field_validator("alias")
    @classmethod
    def _alias(cls, v: str | None) -> str | None:
        if v is None:
            return v
        family, _, version = v.partition("@")
        if family.lower().startswith("windows"):
            raise ValueError(f"alias {v!r}: {WINDOWS_UNSUPPORTED}")
        if family.lower() not in _ALIAS_FAMILIES or not version:
            raise ValueError(f"alias {v!r} must be FAMILY@VERSION with FAMILY one of {sorted(_ALIAS_FAMILIES)}")
        # EKS AMIs are pinned by date (v20240807); Bottlerocket by its release (v1.20.3).
        semver = family.lower() == "bottlerocket" and all(p.isdigit() for p in version[1:].split("."))
        if version != "latest" and not (version.startswith("v") and (version[1:].isdigit() or semver)):
            raise ValueError(f"alias {v!r}: version must be 'latest' or vYYYYMMDD (Bottlerocket: vX.Y.Z)")
        return v

    @property
    def alias_family(self) -> str | None:
        return _ALIAS_FAMILIES[self.alias.split("@")[0].lower()] if self.alias else None

    @property
    def alias_version(self) -> str | None:
        return self.alias.split("@", 1)[1] if self.alias else None


class KubeletConfiguration(_Model):
    """Kubelet settings that change allocatable and the node's join configuration."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=True)

    max_pods: int | None = Field(default=None, ge=1)
    pods_per_core: int | None = Field(default=None, ge=0)
    system_reserved: dict[str, str] | None = None
    kube_reserved: dict[str, str] | None = None
    eviction_hard: dict[str, str] | None = None
    eviction_soft: dict[str, str] | None = None
    cluster_dns: list[str] | None = Field(default=None, alias="clusterDNS")


class EbsSettings(_Model):
    volume_size: str | None = None  # "20Gi"
    volume_type: str | None = None
    iops: int | None = None
    throughput: int | None = None
    encrypted: bool | None = None
    kms_key_id: str | None = Field(default=None, alias="kmsKeyID")
    delete_on_termination: bool | None = None
    snapshot_id: str | None = Field(default=None, alias="snapshotID")


class BlockDeviceMapping(_Model):
    device_name: str
    ebs: EbsSettings | None = None
    root_volume: bool = False


class MetadataOptions(_Model):
    http_endpoint: Literal["enabled", "disabled"] = "enabled"
    http_protocol_i_pv6: Literal["enabled", "disabled"] = Field(default="disabled", alias="httpProtocolIPv6")
    http_put_response_hop_limit: int = Field(default=1, ge=1, le=64)
    http_tokens: Literal["required", "optional"] = "required"


class NodeClass(_Model):
    """The validated EC2NodeClass. ``name`` is metadata.name; the rest is ``spec``."""

    name: str
    ami_family: AmiFamily
    ami_selector_terms: tuple[AmiSelectorTerm, ...]
    subnet_selector_terms: tuple[SelectorTerm, ...]
    security_group_selector_terms: tuple[SelectorTerm, ...]
    role: str | None = None
    instance_profile: str | None = None
    user_data: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    kubelet: KubeletConfiguration | None = None
    block_device_mappings: tuple[BlockDeviceMapping, ...] = ()
    metadata_options: MetadataOptions = Field(default_factory=MetadataOptions)
    detailed_monitoring: bool = False
    associate_public_ip_address: bool | None = None
    capacity_reservation_selector_terms: tuple[CapacityReservationSelectorTerm, ...] = ()


class _V1Spec(_Model):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)

    ami_family: AmiFamily | None = None
    ami_selector_terms: list[AmiSelectorTerm] = Field(default_factory=list)
    subnet_selector_terms: list[SelectorTerm] = Field(min_length=1)
    security_group_selector_terms: list[SelectorTerm] = Field(min_length=1)
    role: str | None = None
    instance_profile: str | None = None
    user_data: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    kubelet: KubeletConfiguration | None = None
    block_device_mappings: list[BlockDeviceMapping] = Field(default_factory=list)
    metadata_options: MetadataOptions = Field(default_factory=MetadataOptions)
    detailed_monitoring: bool = False
    associate_public_ip_address: bool | None = Field(default=None, alias="associatePublicIPAddress")
    capacity_reservation_selector_terms: list[CapacityReservationSelectorTerm] = Field(default_factory=list,
                                                                                      max_length=30)

    @model_validator(mode="after")
    def _identity(self, info: ValidationInfo) -> _V1Spec:
        if self.ami_family in ("Windows2019", "Windows2022"):
            raise ValueError(f"amiFamily {self.ami_family!r}: {WINDOWS_UNSUPPORTED}")
        # Planning launches nothing, so it needs neither (the guides' AWSNodeTemplates name none).
        planning = bool((info.context or {}).get("planning"))
        if (self.role and self.instance_profile) or not (self.role or self.instance_profile or planning):
            raise ValueError("exactly one of role and instanceProfile must be set")
        aliases = [t for t in self.ami_selector_terms if t.alias]
        if aliases and len(self.ami_selector_terms) > 1:
            raise ValueError("amiSelectorTerms: an alias term cannot be combined with other terms")
        if not self.ami_selector_terms and self.ami_family in (None, "Custom"):
            raise ValueError("amiSelectorTerms is required (e.g. [{alias: al2023@latest}])")
        room = EC2_TAG_LIMIT - OWN_TAG_COUNT - 1
        if user_tag_count(self.tags) > room:
            raise ValueError(
                f"tags: {user_tag_count(self.tags)} tags, but EC2 allows {EC2_TAG_LIMIT} per instance, the "
                f"autoscaler writes {OWN_TAG_COUNT} of its own and needs at least one for the pods a node was "
                f"launched for: remove at least {user_tag_count(self.tags) - room} of them")
        for key in self.tags:
            if key.startswith(("kubernetes.io/cluster/", "karpenter.sh/nodepool", "karpenter.sh/nodeclaim",
                               "eks:eks-cluster-name", "karpenter.k8s.aws/ec2nodeclass")):
                raise ValueError(f"tags: {key!r} is set by the autoscaler and cannot be overridden")
        return self


def _family(spec: _V1Spec) -> AmiFamily:
    for term in spec.ami_selector_terms:
        if term.alias_family:
            family: Any = term.alias_family
            return family  # type: ignore[no-any-return]
    return spec.ami_family or "Custom"


def _from_v1(name: str, spec: Mapping[str, Any], *, planning: bool = False) -> NodeClass:
    parsed = _V1Spec.model_validate(spec, context={"planning": planning})
    family = _family(parsed)
    terms = tuple(parsed.ami_selector_terms)
    if not terms:  # v1beta1 with amiFamily only: the family's latest image
        terms = (AmiSelectorTerm(alias=f"{family.lower()}@latest"),)
    return NodeClass(
        name=name, ami_family=family, ami_selector_terms=terms,
        subnet_selector_terms=tuple(parsed.subnet_selector_terms),
        security_group_selector_terms=tuple(parsed.security_group_selector_terms),
        role=parsed.role, instance_profile=parsed.instance_profile, user_data=parsed.user_data,
        tags=parsed.tags, kubelet=parsed.kubelet, block_device_mappings=tuple(parsed.block_device_mappings),
        metadata_options=parsed.metadata_options, detailed_monitoring=parsed.detailed_monitoring,
        associate_public_ip_address=parsed.associate_public_ip_address,
        capacity_reservation_selector_terms=tuple(parsed.capacity_reservation_selector_terms),
    )


def _legacy_selector(selector: Mapping[str, str], *, ids_key: str) -> list[dict[str, Any]]:
    """v1alpha1 selectors are one tag map, or a comma list of ids under ``aws-ids`` / ``aws::ids``."""
    ids = selector.get("aws-ids") or selector.get("aws::ids")
    if ids:
        return [{"id": i.strip()} for i in str(ids).split(",") if i.strip()]
    tags = {k: v for k, v in selector.items() if not k.startswith("aws::") and k != ids_key}
    return [{"tags": tags}] if tags else []


def _from_v1alpha1(name: str, spec: Mapping[str, Any], *, default_role: str | None, planning: bool) -> NodeClass:
    """AWSNodeTemplate: selectors are tag maps and the instance profile came from global settings."""
    converted: dict[str, Any] = {
        "subnetSelectorTerms": _legacy_selector(spec.get("subnetSelector") or {}, ids_key="aws-ids"),
        "securityGroupSelectorTerms": _legacy_selector(spec.get("securityGroupSelector") or {},
                                                       ids_key="aws-ids"),
    }
    family = spec.get("amiFamily") or "AL2"
    converted["amiFamily"] = family
    ami = spec.get("amiSelector") or {}
    if ami.get("aws::ids") or ami.get("aws-ids"):
        ids = str(ami.get("aws::ids") or ami.get("aws-ids"))
        converted["amiSelectorTerms"] = [{"id": i.strip()} for i in ids.split(",") if i.strip()]
    elif ami:
        term: dict[str, Any] = {}
        if ami.get("aws::name"):
            term["name"] = ami["aws::name"]
        if ami.get("aws::owners"):
            term["owner"] = ami["aws::owners"]
        tags = {k: v for k, v in ami.items() if not k.startswith("aws::")}
        if tags:
            term["tags"] = tags
        converted["amiSelectorTerms"] = [term]
    else:
        converted["amiSelectorTerms"] = [{"alias": f"{str(family).lower()}@latest"}]
    for key in ("instanceProfile", "userData", "tags", "blockDeviceMappings", "metadataOptions",
                "detailedMonitoring"):
        if key in spec:
            converted[key] = spec[key]
    if "instanceProfile" not in converted:
        # v1alpha1 took the profile from the global aws.defaultInstanceProfile setting.
        role = spec.get("role") or default_role
        if not role and not planning:
            raise ConfigError(f"AWSNodeTemplate {name}: spec.instanceProfile is required "
                              "(v1alpha1 took it from the global aws.defaultInstanceProfile setting)")
        if role:
            converted["role"] = role
    return _from_v1(name, converted, planning=planning)


def parse_node_class(obj: Mapping[str, Any], *, default_role: str | None = None, planning: bool = False) -> NodeClass:
    """Validate one EC2NodeClass / AWSNodeTemplate manifest; raise ConfigError naming the field.

    ``default_role`` is the node role used for an AWSNodeTemplate that names no instance profile.
    ``planning`` (``autoscaler plan``, which launches nothing): a node class may name neither a role nor an
    instance profile."""
    kind, api, name, subject, spec = manifest_header(obj, default_kind="EC2NodeClass",
                                                     default_api="karpenter.k8s.aws/v1")
    try:
        if kind == "AWSNodeTemplate" or api.endswith("/v1alpha1"):
            return _from_v1alpha1(name, spec, default_role=default_role, planning=planning)
        if kind != "EC2NodeClass":
            raise ConfigError(f"{subject}: kind must be EC2NodeClass or AWSNodeTemplate")
        if api not in ("karpenter.k8s.aws/v1", "karpenter.k8s.aws/v1beta1"):
            raise ConfigError(f"{subject}: apiVersion {api!r} is not karpenter.k8s.aws/v1 or v1beta1")
        return _from_v1(name, spec, planning=planning)
    except ValidationError as exc:
        raise describe_validation_error(subject, exc, path_prefix="spec.") from exc


def parse_node_classes(objs: Iterable[Mapping[str, Any]], *, default_role: str | None = None,
                       planning: bool = False) -> dict[str, NodeClass]:
    """Parse all node classes; duplicate names are an error."""
    out: dict[str, NodeClass] = {}
    for obj in objs:
        nc = parse_node_class(obj, default_role=default_role, planning=planning)
        if nc.name in out:
            raise ConfigError(f"EC2NodeClass {nc.name}: defined twice")
        out[nc.name] = nc
    return out
