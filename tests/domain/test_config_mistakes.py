"""The class of mistakes a new user makes in a cluster file (issue 17's 54 malformed files): each one is
reported, none is silently accepted, every problem carries the line it is on, and a file with several
planted errors reports all of them in one run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autoscaler import config as config_module
from autoscaler.config import ConfigError, check_cluster_file, load_cluster_config
from autoscaler.domain.errors import Problem
from autoscaler.source_file import parse_yaml

ROOT = Path(__file__).resolve().parents[2]
DEMO = (ROOT / "clusters" / "demo.yaml").read_text()
NP = "karpenter.sh/v1\n    kind: NodePool"
ROLE = "      role: eks-autoscaler-node-demo"
REQ = "            - key: kubernetes.io/os\n              operator: In\n              values: [\"linux\"]\n"


def _mutate(old: str, new: str) -> str:
    assert DEMO.count(old) == 1, f"{old!r} must occur once in demo.yaml"
    return DEMO.replace(old, new)


def _first_changed_line(text: str) -> int:
    for number, (a, b) in enumerate(zip(DEMO.splitlines(), text.splitlines(), strict=False), start=1):
        if a != b:
            return number
    return len(DEMO.splitlines()) + 1


def _requirement(key: str, values: str = '["x"]', operator: str = "In") -> tuple[str, str]:
    return REQ, REQ + f"            - key: {key}\n              operator: {operator}\n              values: {values}\n"


def _check(tmp_path: Path, text: str) -> list[Problem]:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return check_cluster_file(path)[1]


# (id, old, new, expected text, severity). The problem must be on the first line the mutation changed.
CASES: list[tuple[str, str, str, str, str]] = [
    ("typo requirments", "          requirements:", "          requirments:",
     "unknown field 'requirments'; did you mean 'requirements'?", "error"),
    ("negative cpu limit", "        cpu: 1000", "        cpu: -10",
     "-10 is negative; a quantity must be >= 0", "error"),
    ("negative memory limit", "        memory: 1000Gi", "        memory: -1Gi", "'-1Gi' is negative", "error"),
    ("limits.cpus", "        cpu: 1000", "        cpus: 1000", "unknown resource 'cpus'; did you mean 'cpu'?", "error"),
    ("limits not a quantity", "        cpu: 1000", "        cpu: lots", "'lots' is not a quantity", "error"),
    ("rate(1 minutes)", "  schedule: rate(10 minutes)\n  registrationTimeout",
     "  schedule: rate(1 minutes)\n  registrationTimeout", "write 'rate(1 minute)'", "error"),
    ("rate(5 minute)", "disruption:\n  schedule: rate(10 minutes)", "disruption:\n  schedule: rate(5 minute)",
     "write 'rate(5 minutes)'", "error"),
    ("cron(a b c d e f)", "disruption:\n  schedule: rate(10 minutes)", "disruption:\n  schedule: cron(a b c d e f)",
     "minutes field 'a' is not valid", "error"),
    ("cron both day fields", "disruption:\n  schedule: rate(10 minutes)", "disruption:\n  schedule: cron(0 * * * * *)",
     "exactly one of day-of-month and day-of-week must be '?'", "error"),
    ("cron five fields", "disruption:\n  schedule: rate(10 minutes)", "disruption:\n  schedule: cron(0 * * * ?)",
     "EventBridge cron takes 6 fields", "error"),
    ("provisioner on cron", "  schedule: rate(10 minutes)\n  registrationTimeout",
     "  schedule: cron(0 * * * ? *)\n  registrationTimeout", "the provisioner runs on a fixed schedule", "error"),
    ("instance-categroy", *_requirement("karpenter.k8s.aws/instance-categroy", '["c"]'),
     "did you mean 'karpenter.k8s.aws/instance-category'?", "error"),
    ("kubernetes.io/arc", *_requirement("kubernetes.io/arc", '["amd64"]'),
     "did you mean 'kubernetes.io/arch'?", "error"),
    ("topology zone typo", *_requirement("topology.kubernetes.io/zon", '["us-west-2a"]'),
     "did you mean 'topology.kubernetes.io/zone'?", "error"),
    ("instance-type typo", *_requirement("node.kubernetes.io/instance-typ", '["m5.large"]'),
     "did you mean 'node.kubernetes.io/instance-type'?", "error"),
    ("capacity_type typo", *_requirement("karpenter.sh/capacity_type", '["spot"]'),
     "did you mean 'karpenter.sh/capacity-type'?", "error"),
    ("m5.superlarge", *_requirement("node.kubernetes.io/instance-type", '["m5.superlarge"]'),
     "'m5.superlarge' is not an instance type in the bundled catalogue", "warning"),
    ("unknown family", *_requirement("karpenter.k8s.aws/instance-family", '["m55"]'),
     "'m55' is not an instance family", "warning"),
    ("unknown size", 'values: ["nano", "micro"', 'values: ["nanno", "micro"',
     "'nanno' is not an instance size in the bundled catalogue; did you mean 'nano'?", "warning"),
    ("label value with a space", "            intent: apps", "            intent: my apps",
     "'my apps' is not a valid label value", "error"),
    ("requirement value with a space", 'values: ["spot"]', 'values: ["spot "]', "'spot ' is not a valid label value",
     "error"),
    ("Karpenter field not implemented", ROLE, ROLE + "\n      instanceStorePolicy: RAID0",
     "is a Karpenter field this autoscaler does not implement", "warning"),
    ("capacity type value", 'values: ["spot"]', 'values: ["spots"]', "did you mean 'spot'?", "error"),
    ("reservation term typo", ROLE, ROLE + "\n      capacityReservationSelectorTerms:\n        - ids: cr-0123abc",
     "unknown field 'ids'; did you mean 'id'?", "error"),
    ("reservation id with tags", ROLE,
     ROLE + "\n      capacityReservationSelectorTerms:\n        - {id: cr-0123abc, tags: {team: ml}}",
     "'id' is mutually exclusive", "error"),
    ("reservation id shape", ROLE, ROLE + "\n      capacityReservationSelectorTerms:\n        - id: r-0123abc",
     "is not a capacity reservation id", "error"),
    ("reservation owner shape", ROLE,
     ROLE + "\n      capacityReservationSelectorTerms:\n        - {tags: {team: ml}, ownerID: '12345'}",
     "is not an AWS account id", "error"),
    ("reservation match criteria", ROLE,
     ROLE + "\n      capacityReservationSelectorTerms:\n        - instanceMatchCriteria: opne",
     "'opne' is not allowed; did you mean 'open'?", "error"),
    ("arch value", 'values: ["amd64"]', 'values: ["x86_64"]', "'x86_64' is not an architecture", "error"),
    ("windows os", 'values: ["linux"]', 'values: ["windows"]', "only linux nodes are launched", "error"),
    ("operator typo", *_requirement("example.com/team", '["a"]', operator="Exist"),
     "'Exist' is not allowed; did you mean 'Exists'?", "error"),
    ("Gt with a word", *_requirement("karpenter.k8s.aws/instance-cpu", '["many"]', operator="Gt"),
     "needs exactly one integer value", "error"),
    ("reserved template label", "            intent: apps", "            karpenter.sh/team: apps",
     "unknown label key 'karpenter.sh/team' in the reserved 'karpenter.sh/' family", "error"),
    ("duplicate region", "region: us-west-2\n", "region: us-west-2\nregion: eu-west-1\n",
     "duplicate key 'region' (first at line 5)", "error"),
    ("duplicate key in a NodePool",
     "          expireAfter: 720h", "          expireAfter: 720h\n          expireAfter: 1h",
     "duplicate key 'expireAfter'", "error"),
    ("v1beta1 kubelet in v1", "          expireAfter: 720h", "          kubelet:\n            maxPods: 20",
     "is a karpenter.sh/v1beta1 field: karpenter.sh/v1 moved kubelet to the EC2NodeClass", "error"),
    ("v1beta1 disruption.expireAfter in v1", "        consolidateAfter: 30s",
     "        consolidateAfter: 30s\n        expireAfter: 720h",
     "karpenter.sh/v1 moved it to spec.template.spec", "error"),
    ("v1beta1 policy name in v1", "consolidationPolicy: WhenEmpty", "consolidationPolicy: WhenUnderutilized",
     "karpenter.sh/v1 calls it 'WhenEmptyOrUnderutilized'", "error"),
    ("v1beta1 nodeClassRef.apiVersion in v1", "            group: karpenter.k8s.aws",
     "            apiVersion: karpenter.k8s.aws/v1", "is a karpenter.sh/v1beta1 field", "error"),
    ("v1 expireAfter in a v1beta1 NodePool",
     "apiVersion: " + NP, "apiVersion: karpenter.sh/v1beta1\n    kind: NodePool",
     "v1beta1 takes spec.disruption.expireAfter", "error"),
    ("unknown apiVersion", "apiVersion: " + NP, "apiVersion: karpenter.sh/v2\n    kind: NodePool",
     "did you mean 'karpenter.sh/v1 NodePool'?", "error"),
    ("windows alias", "        - alias: al2023@latest", "        - alias: windows2022@latest",
     "Windows nodes are not supported", "error"),
    ("windows amiFamily",
     "        - alias: al2023@latest", "        - id: ami-0123456789abcdef0\n      amiFamily: Windows2022",
     "'Windows2022' is a Windows family: Windows nodes are not supported", "error"),
    ("alias typo", "        - alias: al2023@latest", "        - alais: al2023@latest",
     "unknown field 'alais'; did you mean 'alias'?", "error"),
    ("bad alias family", "        - alias: al2023@latest", "        - alias: ubuntu@latest",
     "must be FAMILY@VERSION", "error"),
    ("selector typo", "      subnetSelectorTerms:\n        - tags:", "      subnetSelectorTerms:\n        - tag:",
     "unknown field 'tag'; did you mean 'tags'?", "error"),
    ("nodeClassRef name typo", "            name: default\n          requirements",
     "            nmae: default\n          requirements", "unknown field 'nmae'; did you mean 'name'?", "error"),
    ("missing node class", "            name: default\n          requirements",
     "            name: defualt\n          requirements", "'defualt' names no entry of nodeClasses", "error"),
    ("role mismatch", ROLE, "      role: SomeOtherRole",
     "is not the node role this stack lets the autoscaler pass", "error"),
    ("consolidateAfter words", "consolidateAfter: 30s", "consolidateAfter: 30 seconds", "is not a duration", "error"),
    ("expireAfter words", "          expireAfter: 720h", "          expireAfter: forever",
     "is not a duration", "error"),
    ("budget nodes", "        consolidateAfter: 30s", "        consolidateAfter: 30s\n        budgets:\n"
     "          - nodes: ten", "must be a node count or a percentage", "error"),
    ("weight too high", "      limits:\n        cpu", "      weight: 200\n      limits:\n        cpu",
     "above the maximum 100", "error"),
    ("top-level typo", "logRetentionDays: 30", "logRetentionDay: 30",
     "unknown key 'logRetentionDay'; did you mean 'logRetentionDays'?", "error"),
    ("nested typo", "  reaction: watcher", "  reactoin: watcher", "did you mean 'reaction'?", "error"),
    ("interruption value", "  rebalance: taint", "  rebalance: explode", "Input should be 'drain', 'taint' or 'ignore'",
     "error"),
    ("retention", "logRetentionDays: 30", "logRetentionDays: 31", "is not a CloudWatch Logs retention period", "error"),
    ("number as a tag value", ROLE, ROLE + "\n      tags:\n        team: 5", "must be a string, not the number 5",
     "error"),
    ("label value not a string", "            intent: apps", "            intent: yes",
     "must be a string, not a boolean", "error"),
    ("httpTokens typo", ROLE, ROLE + "\n      metadataOptions:\n        httpTokens: require",
     "'require' is not allowed; did you mean 'required'?", "error"),
    ("volume type", ROLE, ROLE + "\n      blockDeviceMappings:\n        - deviceName: /dev/xvda\n          ebs:\n"
     "            volumeType: gp4", "'gp4' is not allowed; did you mean", "error"),
    ("kubelet maxPods 0", ROLE, ROLE + "\n      kubelet:\n        maxPods: 0", "0 is below the minimum 1", "error"),
    ("budget schedule", "        consolidateAfter: 30s", "        consolidateAfter: 30s\n        budgets:\n"
     "          - nodes: '1'\n            schedule: 'at noon'\n            duration: 1h",
     "write a 5-field cron such as '0 9 * * mon-fri'", "error"),
    ("minValues 0", 'values: ["spot"]', 'values: ["spot"]\n              minValues: 0', "below the minimum 1", "error"),
    ("nodeRole typo", "  create: true", "  create: true\n  roleNmae: x", "did you mean 'roleName'?", "error"),
    ("taint effect", REQ, REQ + "          taints:\n            - key: a\n              effect: NoSchedul\n",
     "did you mean 'NoSchedule'?", "error"),
]


@pytest.mark.parametrize(("old", "new", "expected", "severity"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_mistake_is_reported_on_its_line(tmp_path: Path, old: str, new: str, expected: str,
                                              severity: str) -> None:
    # Given demo.yaml with one mistake planted
    text = _mutate(old, new)
    # When the file is checked
    problems = _check(tmp_path, text)
    # Then a problem of that severity names it, on the line that was changed (or below it)
    matching = [p for p in problems if expected in p.message and p.severity == severity]
    assert matching, [p.render("f") for p in problems]
    assert matching[0].line is not None and matching[0].line >= _first_changed_line(text) - 1, matching[0]
    if severity == "error":
        with pytest.raises(ConfigError):
            load_cluster_config(tmp_path / "cluster.yaml")


def test_a_warning_alone_does_not_stop_the_load(tmp_path: Path) -> None:
    # Given an instance type newer than the bundled catalogue
    path = tmp_path / "c.yaml"
    path.write_text(_mutate(*_requirement("node.kubernetes.io/instance-type", '["m5.superlarge"]')))
    # When / Then it loads, and the warning is still reported by the checker
    assert load_cluster_config(path).cluster_name == "demo"
    assert [p.severity for p in check_cluster_file(path)[1]] == ["warning"]


def test_seven_planted_errors_are_all_reported_at_once_with_lines(tmp_path: Path) -> None:
    # Given seven mistakes in different stages (YAML, cluster keys, NodePool, EC2NodeClass, schedule)
    text = DEMO
    for old, new in [("region: us-west-2\n", "region: us-west-2\nregion: eu-west-1\n"),
                     ("          requirements:", "          requirments:"),
                     ("        cpu: 1000", "        cpu: -10"),
                     ("        memory: 1000Gi", "        memorry: 1000Gi"),
                     ("        - alias: al2023@latest", "        - alias: windows2022@latest"),
                     ("  rebalance: taint", "  rebalance: explode"),
                     ("disruption:\n  schedule: rate(10 minutes)", "disruption:\n  schedule: rate(1 minutes)")]:
        text = text.replace(old, new)
    path = tmp_path / "seven.yaml"
    path.write_text(text)
    # When it is loaded once
    with pytest.raises(ConfigError) as exc:
        load_cluster_config(path)
    # Then all seven are in the one error, each as file:line: ...
    lines = str(exc.value).splitlines()
    assert len(lines) == 7, lines
    assert all(line.startswith(f"{path}:") and line.split(":")[1].isdigit() for line in lines), lines
    numbers = [int(line.split(":")[1]) for line in lines]
    assert sorted(numbers) == [6, 24, 39, 40, 52, 63, 74], lines


@pytest.mark.parametrize(("content", "expected", "parsed"), [
    (b"\x00\x01\x02" * 7_000_000, "the file is 21.0 MB, over the 5 MB limit", False),
    (b"\x89PNG\r\n\x1a\n\x00\x00", "the file is binary", False),
    (b"clusterName: caf\xe9\n", "not UTF-8 text", False),
    (b"", "the file must hold a mapping", True),
    (b"clusterName: [unclosed\n", "not valid YAML", True),
    (b"a:\n\tb: 1\n", "not valid YAML", True),
])
def test_unreadable_files_fail_fast_without_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        content: bytes, expected: str, parsed: bool) -> None:
    # Given a binary, oversized, non-UTF-8 or malformed file
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    # (the YAML parser is watched: "fast" means an oversized or binary file is refused before it is parsed,
    # which holds however busy the machine is, where a timing bound would not)
    parses: list[str] = []

    def watched_parse(text: str) -> Any:
        parses.append(text)
        return parse_yaml(text)
    monkeypatch.setattr(config_module, "parse_yaml", watched_parse)
    # When it is loaded
    with pytest.raises(ConfigError) as exc:
        load_cluster_config(path)
    # Then the message says what is wrong, and only a readable text of at most 5 MB reached the parser
    assert expected in str(exc.value)
    assert str(exc.value).startswith(str(path))
    assert len(parses) == int(parsed)
