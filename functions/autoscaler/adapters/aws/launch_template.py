"""Launch templates: one per distinct content (node class, AMI, security groups, instance profile,
labels, taints, kubelet settings), named by a hash of that content and reused across invocations.
Also resolves the instance profile from ``instanceProfile`` or ``role``."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from autoscaler.adapters.aws._calls import Caller
from autoscaler.adapters.aws.ami import Ami
from autoscaler.adapters.aws.userdata import ClusterInfo, NodeJoin, render_user_data
from autoscaler.adapters.clock import SystemClock
from autoscaler.app.ports import Clock, CloudError, CloudNotFoundError
from autoscaler.domain.fleet import LaunchTemplateInfo
from autoscaler.domain.keys import NODECLASS_TAG
from autoscaler.domain.nodeclass import BlockDeviceMapping, NodeClass
from autoscaler.domain.ownership import ownership_tags
from autoscaler.domain.quantity import parse_quantity

LT_NAME_PREFIX = "eks-autoscaler"
# How often ``LaunchTemplates.list_known`` lists the cluster's templates again (a pass asks every time).
LISTING_TTL_SECONDS = 300.0
_GIB = 1024**3


@dataclass(frozen=True, slots=True)
class LaunchTemplateRef:
    name: str
    template_id: str
    architecture: str
    created: bool = False


def _default_block_devices(family: str) -> list[dict[str, Any]]:
    """EKS-optimised defaults, as Karpenter uses them: a 20 GiB encrypted gp3 root; Bottlerocket keeps
    a small OS volume and puts images and pods on a 20 GiB data volume."""
    ebs = {"VolumeSize": 20, "VolumeType": "gp3", "Encrypted": True, "DeleteOnTermination": True}
    if family == "Bottlerocket":
        return [
            {"DeviceName": "/dev/xvda", "Ebs": {**ebs, "VolumeSize": 4}},
            {"DeviceName": "/dev/xvdb", "Ebs": ebs},
        ]
    return [{"DeviceName": "/dev/xvda", "Ebs": ebs}]


def _block_device(bdm: BlockDeviceMapping, *, node_class: str) -> dict[str, Any]:
    out: dict[str, Any] = {"DeviceName": bdm.device_name}
    if bdm.ebs is None:
        return out
    e = bdm.ebs
    ebs: dict[str, Any] = {}
    if e.volume_size is not None:
        try:
            size = parse_quantity(e.volume_size)
        except ValueError as exc:
            raise ValueError(f"EC2NodeClass {node_class}: spec.blockDeviceMappings.ebs.volumeSize: {exc}") from exc
        ebs["VolumeSize"] = max(1, int(-(-size // _GIB)))  # round up to whole GiB
    for key, value in (("VolumeType", e.volume_type), ("Iops", e.iops), ("Throughput", e.throughput),
                       ("Encrypted", e.encrypted), ("KmsKeyId", e.kms_key_id),
                       ("DeleteOnTermination", e.delete_on_termination), ("SnapshotId", e.snapshot_id)):
        if value is not None:
            ebs[key] = value
    out["Ebs"] = ebs
    return out


def launch_template_data(
    *, node_class: NodeClass, ami: Ami, cluster: ClusterInfo, join: NodeJoin,
    security_group_ids: list[str], instance_profile: str,
) -> dict[str, Any]:
    """The CreateLaunchTemplate ``LaunchTemplateData`` (no instance type or subnet: those are fleet
    overrides)."""
    user_data = render_user_data(family=node_class.ami_family, cluster=cluster, join=join,
                                 user_data=node_class.user_data)
    mo = node_class.metadata_options
    data: dict[str, Any] = {
        "ImageId": ami.image_id,
        "IamInstanceProfile": {"Name": instance_profile},
        "UserData": base64.b64encode(user_data.encode()).decode(),
        "MetadataOptions": {
            "HttpEndpoint": mo.http_endpoint,
            "HttpTokens": mo.http_tokens,
            "HttpPutResponseHopLimit": mo.http_put_response_hop_limit,
            "HttpProtocolIpv6": mo.http_protocol_i_pv6,
            "InstanceMetadataTags": "disabled",
        },
        "BlockDeviceMappings": (
            [_block_device(b, node_class=node_class.name) for b in node_class.block_device_mappings]
            or _default_block_devices(node_class.ami_family)
        ),
        "Monitoring": {"Enabled": node_class.detailed_monitoring},
    }
    if node_class.associate_public_ip_address is None:
        data["SecurityGroupIds"] = list(security_group_ids)
    else:
        # The public-IP choice lives on the network interface, and then the groups must go there too.
        data["NetworkInterfaces"] = [{
            "DeviceIndex": 0, "AssociatePublicIpAddress": node_class.associate_public_ip_address,
            "Groups": list(security_group_ids),
        }]
    return data


def content_hash(data: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:20]


class LaunchTemplates:
    """Ensures a launch template exists for given content; remembers name -> id in the warm container."""

    def __init__(self, ec2: Any, *, cluster: ClusterInfo, clock: Clock | None = None) -> None:
        self._ec2 = Caller(ec2)
        self._cluster = cluster
        self._clock: Clock = clock or SystemClock()
        self._known: dict[str, str] = {}
        self._used: dict[str, float] = {}  # name -> epoch seconds of the last ensure() in this container
        # Parallel launches with the same content: one finds or creates the template, the others wait.
        self._guard = threading.Lock()
        self._creating: dict[str, threading.Lock] = {}
        self._listed_at: float | None = None  # monotonic time of the last full listing (``list_known``)

    @property
    def calls(self) -> dict[str, int]:
        return dict(self._ec2.calls)

    def name_for(self, data: Mapping[str, Any]) -> str:
        return f"{LT_NAME_PREFIX}/{self._cluster.name}/{content_hash(data)}"

    def ensure(self, data: Mapping[str, Any], *, node_class: NodeClass, architecture: str) -> LaunchTemplateRef:
        name = self.name_for(data)
        self._used[name] = self._clock.now()
        if name in self._known:
            return LaunchTemplateRef(name=name, template_id=self._known[name], architecture=architecture)
        with self._guard:
            lock = self._creating.setdefault(name, threading.Lock())
        with lock:
            if name in self._known:
                return LaunchTemplateRef(name=name, template_id=self._known[name], architecture=architecture)
            return self._find_or_create(name, data, node_class=node_class, architecture=architecture)

    def list_known(self) -> None:
        """Learn every template this cluster has (one paged DescribeLaunchTemplates, at most once per
        ``LISTING_TTL_SECONDS``): after it, a name it did not list is created without asking for it first.
        That is safe whenever the listing was taken: a template another container created since makes the
        create fail with AlreadyExists, which finds and uses theirs."""
        now = self._clock.monotonic()
        if self._listed_at is not None and now - self._listed_at < LISTING_TTL_SECONDS:
            return
        found = {t.name: t.template_id for t in self.owned()}
        with self._guard:
            for name, template_id in found.items():
                self._known.setdefault(name, template_id)
            self._listed_at = now

    def _find_or_create(self, name: str, data: Mapping[str, Any], *, node_class: NodeClass,
                        architecture: str) -> LaunchTemplateRef:
        existing = self._find(name) if self._listed_at is None else None
        if existing:
            self._known[name] = existing
            return LaunchTemplateRef(name=name, template_id=existing, architecture=architecture)
        tags = {**node_class.tags, **ownership_tags(self._cluster.name), NODECLASS_TAG: node_class.name}
        try:
            resp = self._ec2(
                "create_launch_template", LaunchTemplateName=name, LaunchTemplateData=dict(data),
                TagSpecifications=[{"ResourceType": "launch-template",
                                    "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())]}],
            )
        except CloudError as exc:
            # Another invocation created it between our describe and create: use theirs.
            if exc.code != "InvalidLaunchTemplateName.AlreadyExistsException":
                raise
            found = self._find(name)
            if not found:
                raise
            self._known[name] = found
            return LaunchTemplateRef(name=name, template_id=found, architecture=architecture)
        template_id = str(resp["LaunchTemplate"]["LaunchTemplateId"])
        self._known[name] = template_id
        return LaunchTemplateRef(name=name, template_id=template_id, architecture=architecture, created=True)

    def last_used(self, name: str) -> float | None:
        """When this container last launched with the template (None: not since it started)."""
        return self._used.get(name)

    def owned(self) -> list[LaunchTemplateInfo]:
        """Every launch template of this cluster's autoscaler: our name prefix and ownership tags."""
        filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in sorted(ownership_tags(self._cluster.name).items())]
        prefix = f"{LT_NAME_PREFIX}/{self._cluster.name}/"
        out = []
        for page in self._ec2.pages("describe_launch_templates", Filters=filters):
            for lt in page.get("LaunchTemplates", ()):
                name = str(lt.get("LaunchTemplateName", ""))
                created = lt.get("CreateTime")
                if name.startswith(prefix):
                    out.append(LaunchTemplateInfo(
                        name=name, template_id=str(lt["LaunchTemplateId"]),
                        created_at=created.timestamp() if isinstance(created, datetime) else 0.0))
        return sorted(out, key=lambda t: t.name)

    def delete(self, template_id: str) -> bool:
        """Delete one of our templates; False when it was already gone. The warm cache forgets it so the
        next launch with that content creates it again."""
        for name, known in list(self._known.items()):
            if known == template_id:
                del self._known[name]
                self._used.pop(name, None)
        try:
            self._ec2("delete_launch_template", LaunchTemplateId=template_id,
                      expected_errors=("InvalidLaunchTemplateId.NotFound",))
        except CloudNotFoundError:
            return False
        return True

    def _find(self, name: str) -> str | None:
        try:
            found = self._ec2(
                "describe_launch_templates", LaunchTemplateNames=[name],
                expected_errors=("InvalidLaunchTemplateName.NotFoundException",)).get("LaunchTemplates", ())
        except CloudNotFoundError:
            return None
        return str(found[0]["LaunchTemplateId"]) if found else None


class InstanceProfiles:
    """The instance profile for a node class: ``instanceProfile`` as given; for ``role`` (which the cluster
    file requires to be the stack's node role), ``deployed``: the profile the stack created or imported
    for that role (``nodeRole.instanceProfileName``, passed as ``AUTOSCALER_INSTANCE_PROFILE``), so nothing
    is created at run time and ``cdk destroy`` removes what the stack made. Without one (local runs,
    tests) a profile is created for the role, named ``<cluster>_<hash of role>``, as Karpenter does."""

    def __init__(self, iam: Any, *, cluster_name: str, deployed: str | None = None) -> None:
        self._iam = Caller(iam)
        self._cluster = cluster_name
        self._deployed = deployed
        self._known: dict[str, str] = {}
        self._lock = threading.Lock()  # launches run in parallel: one creation per profile

    @property
    def calls(self) -> dict[str, int]:
        return dict(self._iam.calls)

    def for_node_class(self, node_class: NodeClass) -> str:
        if node_class.instance_profile:
            return node_class.instance_profile
        if self._deployed:
            return self._deployed
        with self._lock:
            return self._ensure(str(node_class.role))

    def _ensure(self, role: str) -> str:
        if role in self._known:
            return self._known[role]
        role_name = role.rsplit("/", 1)[-1]  # an ARN or a plain name
        name = f"{self._cluster}_{hashlib.sha256(role_name.encode()).hexdigest()[:16]}"
        try:
            profile = self._iam("get_instance_profile", InstanceProfileName=name,
                                expected_errors=("NoSuchEntity",))["InstanceProfile"]
        except CloudNotFoundError:
            tags = [{"Key": k, "Value": v} for k, v in sorted(ownership_tags(self._cluster).items())]
            try:
                profile = self._iam("create_instance_profile", InstanceProfileName=name, Tags=tags,
                                    expected_errors=("EntityAlreadyExists",))["InstanceProfile"]
            except CloudError as exists:  # another container created it since our read: use it
                if exists.code != "EntityAlreadyExists":
                    raise
                profile = self._iam("get_instance_profile", InstanceProfileName=name)["InstanceProfile"]
        if not any(r.get("RoleName") == role_name for r in profile.get("Roles", ())):
            self._iam("add_role_to_instance_profile", InstanceProfileName=name, RoleName=role_name)
        self._known[role] = name
        return name
