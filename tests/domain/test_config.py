"""The cluster file model: the example loads, every bad field is named with its file, the runtime file
round-trips, and the domain parsers are picked up when they exist."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from autoscaler import config as cfg
from autoscaler.config import ConfigError, ProvisionerConfig, load_cluster_config, parse_cluster_config

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "clusters" / "demo.yaml"
SOURCE = "clusters/demo.yaml"


@pytest.fixture
def raw() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(DEMO.read_text())
    return data


def test_demo_reproduces_the_karpenter_getting_started_setup() -> None:
    config = load_cluster_config(DEMO, source=SOURCE)
    assert (config.cluster_name, config.region) == ("demo", "us-west-2")
    pool = config.node_pools[0]
    assert pool["spec"]["template"]["metadata"]["labels"] == {"intent": "apps"}
    requirements = {r["key"]: r for r in pool["spec"]["template"]["spec"]["requirements"]}
    assert requirements["karpenter.sh/capacity-type"]["values"] == ["spot"]
    size = requirements["karpenter.k8s.aws/instance-size"]
    assert size["operator"] == "NotIn" and size["values"] == ["nano", "micro", "small", "medium", "large"]
    assert pool["spec"]["limits"]["cpu"] == 1000
    assert pool["spec"]["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"}
    node_class = config.node_classes[0]["spec"]
    assert node_class["amiSelectorTerms"] == [{"alias": "al2023@latest"}]
    assert node_class["role"] == config.node_role_name == "eks-autoscaler-node-demo"
    assert node_class["subnetSelectorTerms"] == node_class["securityGroupSelectorTerms"] == [
        {"tags": {"karpenter.sh/discovery": "demo"}}]


def test_defaults() -> None:
    config = load_cluster_config(DEMO)
    assert config.interruption.model_dump() == {
        "spot_interruption": "drain", "rebalance": "taint", "scheduled_change": "drain", "state_change": "drain",
        "asg_lifecycle": "drain",
        "batch_size": 10, "max_concurrency": 10, "timeout_seconds": 120,
        # NTH parity: off unless asked for (deleteLocalData on, as NTH's default)
        "cordon_only": False, "dry_run": False, "pod_termination_grace_period": None,
        "node_termination_grace_period": None, "exclude_node_labels": {}, "delete_local_data": True,
        "delete_finished_pods": False}
    # The demo reacts through the watcher; the provisioner's own schedule is the 10-minute safety pass.
    assert config.provisioner.mode == "watcher" and not config.provisioner.dry_run
    assert (config.provisioner.period_seconds, config.provisioner.watch_seconds,
            config.provisioner.timeout_seconds) == (600, 0, 60)
    assert config.vpc is None and config.node_role.create and not config.rbac.cluster_admin
    assert config.log_retention_days == 30


@pytest.mark.parametrize(("given", "mode", "schedule", "watch_seconds"), [
    ({}, "watcher", "rate(10 minutes)", 0),
    ({"reaction": "watch"}, "watch", "rate(1 minute)", 50),
    ({"reaction": "scheduled"}, "scheduled", "rate(1 minute)", 0),
    ({"watchMode": True}, "watch", "rate(1 minute)", 50),  # the key reaction replaced still works
    ({"watchMode": False}, "scheduled", "rate(1 minute)", 0),
    ({"reaction": "watcher", "schedule": "rate(10 minutes)"}, "watcher", "rate(10 minutes)", 0),
])
def test_reaction_picks_the_schedule_and_watch(given: dict[str, Any], mode: str, schedule: str,
                                               watch_seconds: int) -> None:
    # Given a provisioner section / Then the reaction in effect, its default schedule and the watch window
    cfg = ProvisionerConfig.model_validate(given)
    assert (cfg.mode, cfg.schedule_expression, cfg.watch_seconds) == (mode, schedule, watch_seconds)


@pytest.mark.parametrize(("given", "memory"), [
    ({}, 1769),  # woken by the watcher: billed only while it runs, so one full vCPU for a CPU-bound pass
    ({"reaction": "scheduled"}, 1769),
    ({"reaction": "watch"}, 1024),  # billed for the whole watch
    ({"reaction": "watch", "memoryMb": 2048}, 2048),
    ({"memoryMb": 512}, 512),
])
def test_the_memory_defaults_per_reaction(given: dict[str, Any], memory: int) -> None:
    assert ProvisionerConfig.model_validate(given).memory == memory


@pytest.mark.parametrize(("given", "message"), [
    ({"reaction": "webhook"}, "Input should be 'watcher', 'watch' or 'scheduled'"),
    ({"reaction": "watcher", "watchMode": True}, "watchMode: true contradicts reaction: watcher; watchMode is "
                                                 "replaced by reaction: remove watchMode"),
    ({"batchIdleSeconds": 15}, "batchIdleSeconds: 15 is longer than batchMaxSeconds: 10; the idle window must fit"),
    ({"batchMaxSeconds": 0}, "Input should be greater than 0"),
])
def test_reaction_is_validated_strictly(given: dict[str, Any], message: str) -> None:
    # Given a wrong reaction / Then the error says what is wrong and what to write
    with pytest.raises(ValidationError, match=re.escape(message)):
        ProvisionerConfig.model_validate(given)


def _set(data: dict[str, Any], path: str, value: Any) -> None:
    keys: list[Any] = [int(k) if k.isdigit() else k for k in path.replace("[", ".").replace("]", "").split(".")]
    target: Any = data
    for key in keys[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[keys[-1]]
    else:
        target[keys[-1]] = value


_DELETE = object()


@pytest.mark.parametrize(("path", "value", "message"), [
    ("nodePools[0].spec.limits.cpu", "lots", "NodePool default: spec.limits.cpu: 'lots' is not a quantity"),
    ("nodePools[0].spec.limits.memory", "1Zi", "NodePool default: spec.limits.memory: '1Zi' is not a quantity"),
    ("nodePools[0].kind", "Provisioner2",
     "Provisioner2 default: apiVersion/kind 'karpenter.sh/v1 Provisioner2' is not supported"),
    ("nodePools[0].metadata.name", "", "NodePool <unnamed>: metadata.name: must not be empty"),
    ("nodePools[0].spec.template.spec.nodeClassRef.name", "other",
     "NodePool default: spec.template.spec.nodeClassRef.name: 'other' names no entry of nodeClasses"),
    ("nodeClasses[0].spec.role", "SomeRole", "EC2NodeClass default: spec.role: 'SomeRole' is not the node role"),
    ("nodeClasses[0].apiVersion", "karpenter.sh/v1", "EC2NodeClass default: apiVersion/kind"),
    ("clusterName", "bad name!", "clusterName: String should match pattern"),
    ("region", "mars", "region: String should match pattern"),
    ("interruption.rebalance", "explode", "interruption.rebalance: Input should be 'drain', 'taint' or 'ignore'"),
    ("interruption.spotInterruption", "taint", "interruption.spotInterruption: Input should be 'drain' or 'ignore'"),
    ("interruption.maxConcurrency", 1, "interruption.maxConcurrency: Input should be greater than or equal to 2"),
    ("provisioner.schedule", "cron(* * * * ? *)", "provisioner.schedule: 'cron(* * * * ? *)': the provisioner runs"),
    ("provisioner.registrationTimeout", "soon", "provisioner.registrationTimeout: 'soon' is not a duration"),
    ("disruption.schedule", "hourly", "disruption.schedule: 'hourly' is not an EventBridge schedule"),
    ("provisioner.watchMod", True, "provisioner.watchMod: unknown key 'watchMod'; did you mean 'watchMode'?"),
    ("vpc", {"vpcId": "vpc-0123456789abcdef0", "subnetIds": ["subnet-1"], "securityGroupIds": []},
     "vpc.subnetIds: not subnet ids"),
    ("vpc", {"vpcId": "vpc-0123456789abcdef0", "subnetIds": ["subnet-0123456789abcdef0"],
             "securityGroupIds": ["subnet-0123456789abcdef0"]}, "vpc.securityGroupIds: not security group ids"),
    ("nodeRole", {"create": True, "roleArn": "arn:aws:iam::123456789012:role/x"},
     "nodeRole: give either create: true or an existing roleArn"),
    ("nodeRole", {"create": False}, "nodeRole: create: false needs roleArn"),
    ("logRetentionDays", 31, "logRetentionDays: 31 is not a CloudWatch Logs retention period"),
    ("alarms", {"email": "not-an-address"}, "alarms.email: String should match pattern"),
    ("nodePools", [], "nodePools: List should have at least 1 item"),
    ("nodeClasses", _DELETE, "nodeClasses: Field required"),
])
def test_errors_name_the_file_and_the_field(raw: dict[str, Any], path: str, value: Any, message: str) -> None:
    _set(raw, path, value)
    with pytest.raises(ConfigError) as exc:
        parse_cluster_config(raw, source=SOURCE)
    assert any(line.startswith(f"{SOURCE}: ") for line in str(exc.value).splitlines())
    assert f"{SOURCE}: {message}" in str(exc.value), str(exc.value)


def test_every_problem_is_reported_at_once(raw: dict[str, Any]) -> None:
    raw["region"] = "x"
    raw["provisioner"]["schedule"] = "never"
    with pytest.raises(ConfigError) as exc:
        parse_cluster_config(raw, source=SOURCE)
    assert len(exc.value.problems) == 2


def test_duplicate_names_are_rejected(raw: dict[str, Any]) -> None:
    raw["nodePools"].append(copy.deepcopy(raw["nodePools"][0]))
    with pytest.raises(ConfigError, match=r"nodePools\[1\]\.metadata\.name: 'default' is defined twice"):
        parse_cluster_config(raw, source=SOURCE)


def test_v1alpha5_provisioner_limits_are_checked(raw: dict[str, Any]) -> None:
    raw["nodePools"] = [{"apiVersion": "karpenter.sh/v1alpha5", "kind": "Provisioner", "metadata": {"name": "p"},
                         "spec": {"providerRef": {"name": "default"}, "limits": {"resources": {"cpu": "x"}}}}]
    with pytest.raises(ConfigError, match=r"Provisioner p: spec\.limits\.resources\.cpu: 'x'"):
        parse_cluster_config(raw, source=SOURCE)


@pytest.mark.parametrize(("content", "message"), [
    ("- just\n- a list\n", "the file must hold a mapping"),
    ("clusterName: [unclosed\n", "not valid YAML"),
])
def test_unreadable_files(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_cluster_config(path)
    with pytest.raises(ConfigError, match="cannot read the file"):
        load_cluster_config(tmp_path / "missing.yaml")


def test_runtime_config_round_trips_through_the_bundled_json(tmp_path: Path) -> None:
    config = load_cluster_config(DEMO)
    path = tmp_path / "cluster.json"
    path.write_text(config.to_json())
    assert json.loads(path.read_text())["clusterName"] == "demo"  # camelCase, as in the cluster file
    assert cfg.load_runtime_config(path) == config
    assert cfg.load_runtime_config(environ={cfg.ENV_CONFIG_FILE: str(path)}) == config


def test_runtime_config_missing_or_bad(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the runtime configuration"):
        cfg.load_runtime_config(environ={cfg.ENV_CONFIG_FILE: str(tmp_path / "none.json")})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"clusterName": "demo"}))
    with pytest.raises(ConfigError, match=r"bad\.json: region: Field required"):
        cfg.load_runtime_config(bad)


def test_runtime_config_defaults_to_the_file_in_the_asset() -> None:
    with pytest.raises(ConfigError) as exc:
        cfg.load_runtime_config(environ={})
    assert exc.value.source == str(cfg.BUNDLED_CONFIG)
    assert cfg.BUNDLED_CONFIG.parent.name == "autoscaler"


def test_deployment_env() -> None:
    env = cfg.load_deployment_env({cfg.ENV_QUEUE_URL: "https://sqs/q", cfg.ENV_PROVISIONER_FUNCTION: "fn"})
    assert (env.queue_url, env.provisioner_function, env.node_role_arn) == ("https://sqs/q", "fn", None)


def test_node_pool_semantics_are_checked_by_the_domain_parser(raw: dict[str, Any]) -> None:
    raw["nodePools"][0]["spec"]["template"]["spec"]["requirements"] = [
        {"key": "karpenter.sh/capacity-type", "operator": "Near", "values": ["spot"]}]
    with pytest.raises(ConfigError, match=r"NodePool default: spec\.template\.spec\.requirements\[0\]\.op"):
        parse_cluster_config(raw, source=SOURCE)


def test_node_class_semantics_are_checked_by_the_domain_parser(raw: dict[str, Any]) -> None:
    raw["nodeClasses"][0]["spec"]["amiSelectorTerms"] = [{"alias": "ubuntu@latest"}]
    with pytest.raises(ConfigError, match=r"EC2NodeClass \S+: spec\.amiSelectorTerms\[0\]\.alias"):
        parse_cluster_config(raw, source=SOURCE)


def test_rate_and_duration_helpers() -> None:
    assert cfg.rate_seconds("rate(5 minutes)") == 300
    assert cfg.rate_seconds("rate(1 hour)") == 3600
    assert cfg.rate_seconds("cron(0 * * * ? *)") is None
    assert cfg.duration_seconds("1h30m") == 5400
    assert cfg.duration_seconds("30s") == 30
