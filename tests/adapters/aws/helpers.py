"""Helpers for the AWS adapter tests: a moto-backed region with a VPC, subnets and security groups;
public SSM parameters (which moto refuses to PutParameter under /aws/); capacity faults injected into
CreateFleet through botocore's event system; and the shared on-demand price data."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from autoscaler.adapters.aws.userdata import ClusterInfo
from autoscaler.domain.nodeclass import NodeClass, parse_node_class
from simulator.local import put_public_parameter

REGION = "us-east-1"
CLUSTER = ClusterInfo(
    name="prod",
    endpoint="https://ABCDEF0123456789.gr7.us-east-1.eks.amazonaws.com",
    certificate_authority="LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUMtest=",
    k8s_version="1.30",
    service_cidr="172.20.0.0/16",
)


def price_list_item(instance_type: str, usd: float, region: str = REGION) -> str:
    """One GetProducts PriceList entry, shaped like the real Price List JSON."""
    sku = f"SKU{abs(hash(instance_type)) % 10**8}"
    return json.dumps({
        "product": {"productFamily": "Compute Instance", "sku": sku,
                    "attributes": {"instanceType": instance_type, "regionCode": region, "operatingSystem": "Linux",
                                   "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used"}},
        "serviceCode": "AmazonEC2",
        "terms": {"OnDemand": {f"{sku}.JRTCKXETXF": {
            "priceDimensions": {f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                "unit": "Hrs", "pricePerUnit": {"USD": f"{usd:.10f}"},
                "description": f"${usd} per On Demand Linux {instance_type} Instance Hour"}},
            "sku": sku, "effectiveDate": "2024-01-01T00:00:00Z"}}},
    })


@dataclass
class Network:
    vpc_id: str
    subnets: dict[str, str]  # zone -> subnet id (the big one)
    small_subnets: dict[str, str]
    security_group: str
    other_group: str


def make_network(ec2: Any) -> Network:
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets, small = {}, {}
    for i, zone in enumerate(("us-east-1a", "us-east-1b", "us-east-1c")):
        big = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{16 * i}.0/20", AvailabilityZone=zone)["Subnet"]
        little = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{200 + i}.0/26", AvailabilityZone=zone)["Subnet"]
        for s in (big, little):
            ec2.create_tags(Resources=[s["SubnetId"]], Tags=[{"Key": "karpenter.sh/discovery", "Value": "prod"}])
        subnets[zone], small[zone] = big["SubnetId"], little["SubnetId"]
    untagged = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.100.0/22", AvailabilityZone="us-east-1d")["Subnet"]
    assert untagged["SubnetId"]
    sg = ec2.create_security_group(GroupName="nodes", Description="nodes", VpcId=vpc)["GroupId"]
    ec2.create_tags(Resources=[sg], Tags=[{"Key": "karpenter.sh/discovery", "Value": "prod"}])
    other = ec2.create_security_group(GroupName="other", Description="other", VpcId=vpc)["GroupId"]
    return Network(vpc_id=vpc, subnets=subnets, small_subnets=small, security_group=sg, other_group=other)


def node_class(name: str = "default", **spec: Any) -> NodeClass:
    base: dict[str, Any] = {
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "prod"}}],
        "instanceProfile": "KarpenterNodeInstanceProfile",
    }
    base.update(spec)
    return parse_node_class({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
                             "metadata": {"name": name}, "spec": base})


_BUILTIN: dict[str, str] = {}


def builtin_images(ec2: Any) -> dict[str, str]:
    """One of moto's built-in images per architecture (moto's RegisterImage ignores Architecture, so
    tests use its real catalogue images instead)."""
    if _BUILTIN:
        return dict(_BUILTIN)
    out: dict[str, str] = {}
    for img in ec2.describe_images(Owners=["amazon"])["Images"]:
        arch = {"x86_64": "amd64", "arm64": "arm64"}.get(img.get("Architecture", ""))
        if arch and arch not in out and img.get("State") == "available":
            out[arch] = img["ImageId"]
    _BUILTIN.update(out)  # moto's built-in images are the same in every mock: look them up once
    return out


def seed_eks_amis(ec2: Any, k8s: str = "1.30") -> dict[str, str]:
    """Point the public AL2023 / AL2 / Bottlerocket alias parameters at real images per architecture."""
    ids = builtin_images(ec2)
    for arch, ec2_arch in (("amd64", "x86_64"), ("arm64", "arm64")):
        suffix = "" if arch == "amd64" else "-arm64"
        for name in (
            f"/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{ec2_arch}/standard/recommended/image_id",
            f"/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2{suffix}/recommended/image_id",
            f"/aws/service/bottlerocket/aws-k8s-{k8s}/{ec2_arch}/latest/image_id",
        ):
            put_public_parameter(name, ids[arch])
    return ids


class _Http:
    status_code = 200
    headers: dict[str, str] = {}
    content = b""


@dataclass
class CapacityFault:
    """Makes CreateFleet report an error for chosen (instance type, zone) overrides, as EC2 does for
    insufficient capacity: those overrides are removed before moto sees the request and come back in
    the response's ``Errors``. Records every CreateFleet request it sees in ``requests``."""

    failing: dict[tuple[str, str], str] = field(default_factory=dict)  # (type, zone) -> error code
    only_capacity_type: str | None = None  # fail only this capacity type (None = all)
    requests: list[dict[str, Any]] = field(default_factory=list)
    _pending: list[dict[str, Any]] = field(default_factory=list)

    def install(self, ec2: Any) -> CapacityFault:
        ec2.meta.events.register("before-parameter-build.ec2.CreateFleet", self._before_build)
        ec2.meta.events.register("before-call.ec2.CreateFleet", self._before_call)
        ec2.meta.events.register("after-call.ec2.CreateFleet", self._after_call)
        return self

    def _before_build(self, params: dict[str, Any], **_: Any) -> None:
        self.requests.append(json.loads(json.dumps(params, default=str)))
        ct = params["TargetCapacitySpecification"]["DefaultTargetCapacityType"]
        self._pending = []
        if self.only_capacity_type not in (None, ct):
            return
        for config in params["LaunchTemplateConfigs"]:
            kept = []
            for ov in config["Overrides"]:
                code = self.failing.get((ov["InstanceType"], ov.get("AvailabilityZone", "")))
                if code:
                    self._pending.append({
                        "LaunchTemplateAndOverrides": {
                            "LaunchTemplateSpecification": config["LaunchTemplateSpecification"],
                            "Overrides": ov},
                        "Lifecycle": ct, "ErrorCode": code,
                        "ErrorMessage": f"There is no {ct} capacity for {ov['InstanceType']} in "
                                        f"{ov.get('AvailabilityZone')}.",
                    })
                else:
                    kept.append(ov)
            config["Overrides"] = kept
        params["LaunchTemplateConfigs"] = [c for c in params["LaunchTemplateConfigs"] if c["Overrides"]]

    def _before_call(self, params: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]] | None:
        if not any(k.startswith("LaunchTemplateConfigs") for k in params.get("body", {})):
            # Every override failed: answer as EC2 does, with errors and no instances.
            return _Http(), {"FleetId": "fleet-injected", "Instances": [], "Errors": self._drain()}
        return None

    def _after_call(self, parsed: dict[str, Any], **_: Any) -> None:
        if self._pending:
            parsed.setdefault("Errors", []).extend(self._drain())

    def _drain(self) -> list[dict[str, Any]]:
        out, self._pending = self._pending, []
        return out


def tags_of(raw: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in raw.get("Tags", ())}


def instances_by_id(ec2: Any, ids: list[str]) -> Iterator[dict[str, Any]]:
    for r in ec2.describe_instances(InstanceIds=ids)["Reservations"]:
        yield from r["Instances"]
