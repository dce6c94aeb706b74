"""EC2NodeClass and AWSNodeTemplate manifests validate and convert to one NodeClass."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.domain.errors import ConfigError
from autoscaler.domain.nodeclass import parse_node_class, parse_node_classes
from autoscaler.domain.spec_hash import node_class_hash


def _v1(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "role": "KarpenterNodeRole-demo",
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
    }
    base.update(spec)
    return {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
            "spec": base}


def test_v1_node_class_with_alias() -> None:
    nc = parse_node_class(_v1(kubelet={"maxPods": 58}, tags={"team": "a"}))
    assert nc.ami_family == "AL2023"
    assert nc.ami_selector_terms[0].alias_version == "latest"
    assert nc.kubelet is not None and nc.kubelet.max_pods == 58
    assert nc.metadata_options.http_tokens == "required"
    assert nc.metadata_options.http_put_response_hop_limit == 1


def test_v1alpha1_aws_node_template_converts() -> None:
    nc = parse_node_class({
        "apiVersion": "karpenter.k8s.aws/v1alpha1", "kind": "AWSNodeTemplate", "metadata": {"name": "default"},
        "spec": {"subnetSelector": {"karpenter.sh/discovery": "demo"},
                 "securityGroupSelector": {"aws-ids": "sg-1,sg-2"}, "instanceProfile": "KarpenterNodeInstanceProfile"},
    })
    assert nc.ami_family == "AL2"
    assert nc.ami_selector_terms[0].alias == "al2@latest"
    assert nc.subnet_selector_terms[0].tags == {"karpenter.sh/discovery": "demo"}
    assert [t.id for t in nc.security_group_selector_terms] == ["sg-1", "sg-2"]
    assert nc.instance_profile == "KarpenterNodeInstanceProfile"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"role": None}, r"EC2NodeClass default: spec: .*exactly one of role and instanceProfile"),
        ({"instanceProfile": "x"}, r"exactly one of role and instanceProfile"),
        ({"subnetSelectorTerms": []}, r"spec\.subnetSelectorTerms: .*at least 1"),
        ({"amiSelectorTerms": [{"alias": "ubuntu@latest"}]}, r"spec\.amiSelectorTerms\.0\.alias"),
        ({"amiSelectorTerms": [{"alias": "al2023@v1.20.3"}]}, r"vYYYYMMDD"),  # semver is Bottlerocket's only
        ({"amiSelectorTerms": [{"alias": "al2023@latest"}, {"id": "ami-1"}]}, r"alias term cannot be combined"),
        ({"metadataOptions": {"httpTokens": "sometimes"}}, r"spec\.metadataOptions\.httpTokens"),
        ({"tags": {"karpenter.sh/nodepool": "x"}}, r"set by the autoscaler"),
        ({"subnetSelectorTerms": [{"id": "subnet-1", "tags": {"a": "b"}}]}, r"by id alone"),
        ({"capacityReservationSelectorTerms": [{"id": "cr-1", "tags": {"a": "b"}}]}, r"'id' is mutually exclusive"),
        ({"capacityReservationSelectorTerms": [{}]}, r"needs id, tags or instanceMatchCriteria"),
        ({"capacityReservationSelectorTerms": [{"id": "reservation-1"}]},
         r"spec\.capacityReservationSelectorTerms\.0\.id"),
        ({"capacityReservationSelectorTerms": [{"tags": {"a": ""}}]}, r"empty tag keys or values"),
    ],
)
def test_invalid_node_classes_name_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_node_class(_v1(**spec))


def test_capacity_reservation_terms_are_karpenter_v1_fields() -> None:
    # Given a v1 EC2NodeClass selecting reservations by id and by tags of one account
    terms = [{"id": "cr-0123456789abcdef0"}, {"tags": {"team": "ml", "purpose": "*"}, "ownerID": "123456789012"}]
    # When it is parsed
    nc = parse_node_class(_v1(capacityReservationSelectorTerms=terms))
    # Then both terms are kept as written, and the drift hash ignores them (as Karpenter's does)
    assert [t.id for t in nc.capacity_reservation_selector_terms] == ["cr-0123456789abcdef0", None]
    assert nc.capacity_reservation_selector_terms[1].owner_id == "123456789012"
    assert node_class_hash(nc) == node_class_hash(parse_node_class(_v1()))


def test_duplicate_names_rejected() -> None:
    with pytest.raises(ConfigError, match="defined twice"):
        parse_node_classes([_v1(), _v1()])


def test_aws_node_template_without_profile_uses_the_stack_role_or_says_what_is_missing() -> None:
    legacy = {"apiVersion": "karpenter.k8s.aws/v1alpha1", "kind": "AWSNodeTemplate", "metadata": {"name": "old"},
              "spec": {"subnetSelector": {"a": "b"}, "securityGroupSelector": {"a": "b"}}}
    assert parse_node_class(legacy, default_role="KarpenterNodeRole-demo").role == "KarpenterNodeRole-demo"
    with pytest.raises(ConfigError, match=r"AWSNodeTemplate old: spec\.instanceProfile is required"):
        parse_node_class(legacy)
