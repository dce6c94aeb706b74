"""The simulator's kube-scheduler oracle (simulator/sim/scheduler.py), filter by filter, on raw
Kubernetes JSON, and its run against the API emulator's store (bind, PodScheduled=False)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from simulator.kube_store import Store
from simulator.sim.kube_scheduler import KubeScheduler
from simulator.sim.pod_resources import pod_requests, quantity, score_requests
from simulator.sim.scheduler import Snapshot, Volumes, feasible_nodes_to_find, schedule

Obj = dict[str, Any]


def node(name: str, *, cpu: str = "4", memory: str = "16Gi", pods: str = "110", zone: str = "us-east-1a",
         labels: dict[str, str] | None = None, taints: list[Obj] | None = None, unschedulable: bool = False) -> Obj:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "topology.kubernetes.io/zone": zone, **(labels or {})}},
            "spec": {"taints": taints or [], "unschedulable": unschedulable},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods}}}


def pod(name: str, *, cpu: str = "1", memory: str = "1Gi", labels: dict[str, str] | None = None,
        on: str | None = None, ns: str = "default", **spec: Any) -> Obj:
    body: Obj = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}], **spec}
    if on:
        body["nodeName"] = on
    return {"metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "spec": body, "status": {"phase": "Running" if on else "Pending"}}


def place(p: Obj, nodes: list[Obj], bound: list[Obj] | None = None, volumes: Volumes | None = None,
          strategy: Any = "LeastAllocated") -> str | None:
    decisions = schedule([p], Snapshot(nodes, bound or [], volumes), strategy=strategy)
    return decisions[0].node


@pytest.mark.parametrize(("text", "value"), [
    ("500m", Decimal("0.5")), ("2", Decimal(2)), ("1Gi", Decimal(2**30)), ("1.5G", Decimal(1_500_000_000)),
    ("2e3", Decimal(2000)), ("100Ki", Decimal(102_400)),
])
def test_quantities(text: str, value: Decimal) -> None:
    assert quantity(text) == value


def test_requests_take_the_largest_init_container_and_count_sidecars() -> None:
    # Given containers asking 1 CPU, a sidecar 0.5 and an init container 2 (which runs beside the sidecar)
    p = pod("a", cpu="1", initContainers=[
        {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
        {"name": "init", "resources": {"requests": {"cpu": "2"}}}])
    # Then the pod needs max(1 + 0.5, 2 + 0.5) CPU and one pod slot
    assert pod_requests(p)["cpu"] == Decimal("2.5")
    assert pod_requests(p)["pods"] == 1


@pytest.mark.parametrize(("case", "p", "nodes", "bound", "expected"), [
    ("fits", pod("p", cpu="3"), [node("n1")], [], "n1"),
    ("cpu full", pod("p", cpu="2"), [node("n1")], [pod("x", cpu="3", on="n1")], None),
    ("memory full", pod("p", memory="10Gi"), [node("n1", memory="8Gi")], [], None),
    ("pod slots full", pod("p", cpu="10m"), [node("n1", pods="1")], [pod("x", cpu="10m", on="n1")], None),
    ("extended resource missing", {**pod("p"), "spec": {"containers": [
        {"name": "g", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}, [node("n1")], [], None),
    ("second node has room", pod("p", cpu="2"), [node("n1"), node("n2")], [pod("x", cpu="3", on="n1")], "n2"),
])
def test_node_resources_fit(case: str, p: Obj, nodes: list[Obj], bound: list[Obj], expected: str | None) -> None:
    assert place(p, nodes, bound) == expected, case


@pytest.mark.parametrize(("case", "spec", "expected"), [
    ("nodeSelector", {"nodeSelector": {"intent": "apps"}}, "apps"),
    ("nodeSelector matching nothing", {"nodeSelector": {"intent": "none"}}, None),
    ("affinity In", {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "intent", "operator": "In", "values": ["apps"]}]}]}}}},
     "apps"),
    ("affinity NotIn", {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "intent", "operator": "NotIn", "values": ["apps"]}]}]}}}},
     "other"),
    ("terms are ORed", {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "intent", "operator": "In", "values": ["x"]}]},
                              {"matchExpressions": [{"key": "size", "operator": "Gt", "values": ["8"]}]}]}}}},
     "other"),
    ("matchFields on the name", {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["other"]}]}]}}}},
     "other"),
    ("empty term matches nothing", {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{}]}}}}, None),
])
def test_node_affinity_and_node_selector(case: str, spec: Obj, expected: str | None) -> None:
    nodes = [node("apps", labels={"intent": "apps", "size": "4"}), node("other", labels={"intent": "x", "size": "16"})]
    assert place(pod("p", **spec), nodes) == expected, case


UNREGISTERED = {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}
NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
BANANA = {"key": "fruit", "value": "banana", "effect": "NoSchedule"}


@pytest.mark.parametrize(("case", "taints", "tolerations", "expected"), [
    ("NoExecute registration taint blocks", [UNREGISTERED], [], None),
    ("NoSchedule not-ready taint blocks", [NOT_READY], [], None),
    ("PreferNoSchedule does not block", [{"key": "k", "effect": "PreferNoSchedule"}], [], "n1"),
    ("Equal toleration", [BANANA], [{"key": "fruit", "value": "banana", "effect": "NoSchedule"}], "n1"),
    ("wrong value", [BANANA], [{"key": "fruit", "value": "apple", "effect": "NoSchedule"}], None),
    ("Exists on key", [BANANA], [{"key": "fruit", "operator": "Exists"}], "n1"),
    ("wrong effect", [BANANA], [{"key": "fruit", "operator": "Exists", "effect": "NoExecute"}], None),
    ("tolerate everything", [BANANA, UNREGISTERED], [{"operator": "Exists"}], "n1"),
    ("one of two tolerated", [BANANA, NOT_READY], [{"key": "fruit", "operator": "Exists"}], None),
])
def test_taint_toleration(case: str, taints: list[Obj], tolerations: list[Obj], expected: str | None) -> None:
    assert place(pod("p", tolerations=tolerations), [node("n1", taints=taints)]) == expected, case


def test_cordoned_node_is_skipped_unless_tolerated() -> None:
    cordoned = [node("n1", unschedulable=True)]
    assert place(pod("p"), cordoned) is None
    toleration = [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]
    assert place(pod("p", tolerations=toleration), cordoned) == "n1"


def _with_port(p: Obj, port: int, protocol: str = "TCP") -> Obj:
    p["spec"]["containers"][0]["ports"] = [{"containerPort": port, "hostPort": port, "protocol": protocol}]
    return p


@pytest.mark.parametrize(("case", "existing", "expected"), [
    ("same host port taken", _with_port(pod("x", on="n1"), 8080), "n2"),
    ("other protocol is free", _with_port(pod("x", on="n1"), 8080, "UDP"), "n1"),
    ("other port is free", _with_port(pod("x", on="n1"), 9090), "n1"),
])
def test_node_ports(case: str, existing: Obj, expected: str) -> None:
    nodes = [node("n1", cpu="16", memory="64Gi"), node("n2", cpu="4")]  # n1 is emptier: preferred when it fits
    assert place(_with_port(pod("p"), 8080), nodes, [existing]) == expected, case


def _in_init(p: Obj, port: int, *, sidecar: bool) -> Obj:
    init: Obj = {"name": "proxy", "ports": [{"containerPort": port, "hostPort": port}]}
    if sidecar:
        init["restartPolicy"] = "Always"
    p["spec"]["initContainers"] = [init]
    return p


@pytest.mark.parametrize(("case", "existing", "wanted", "expected"), [
    ("a sidecar's port is held", _in_init(pod("x", on="n1"), 8080, sidecar=True), _with_port(pod("p"), 8080), "n2"),
    ("a sidecar's port is asked for", _with_port(pod("x", on="n1"), 8080), _in_init(pod("p"), 8080, sidecar=True),
     "n2"),
    ("a finished init container holds none", _in_init(pod("x", on="n1"), 8080, sidecar=False),
     _with_port(pod("p"), 8080), "n1"),
])
def test_node_ports_of_init_containers(case: str, existing: Obj, wanted: Obj, expected: str) -> None:
    # kube-scheduler's NodePorts counts restartable init containers' (sidecars') host ports (GetHostPorts)
    nodes = [node("n1", cpu="16", memory="64Gi"), node("n2", cpu="4")]
    assert place(wanted, nodes, [existing]) == expected, case


def test_volume_zone_follows_the_bound_volume() -> None:
    # Given a claim bound to a volume in us-east-1b
    volumes = Volumes.of(
        [{"metadata": {"name": "data", "namespace": "default"}, "spec": {"volumeName": "pv-1"}}],
        [{"metadata": {"name": "pv-1", "labels": {"topology.kubernetes.io/zone": "us-east-1b"}}, "spec": {}}])
    p = pod("p", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}])
    nodes = [node("a", zone="us-east-1a", cpu="8"), node("b", zone="us-east-1b")]
    # Then only the node in that zone can take the pod, and without it nothing can
    assert place(p, nodes, volumes=volumes) == "b"
    assert place(p, nodes[:1], volumes=volumes) is None
    # And an unbound claim (WaitForFirstConsumer) does not constrain the pod
    assert place(pod("q", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "other"}}]), nodes[:1],
                 volumes=volumes) == "a"


def test_volume_node_affinity() -> None:
    volumes = Volumes.of(
        [{"metadata": {"name": "data", "namespace": "default"}, "spec": {"volumeName": "pv-1"}}],
        [{"metadata": {"name": "pv-1"}, "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In",
                                   "values": ["us-east-1c"]}]}]}}}}])
    p = pod("p", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}])
    assert place(p, [node("a"), node("c", zone="us-east-1c")], volumes=volumes) == "c"


def spread(max_skew: int = 1, key: str = "topology.kubernetes.io/zone", **extra: Any) -> Obj:
    return {"topologySpreadConstraints": [{"maxSkew": max_skew, "topologyKey": key,
                                           "whenUnsatisfiable": "DoNotSchedule",
                                           "labelSelector": {"matchLabels": {"app": "web"}}, **extra}]}


def test_topology_spread_places_in_the_emptiest_zone_only_within_skew() -> None:
    # Given two web pods in zone a, none in b; node a is emptier (LeastAllocated would prefer it)
    nodes = [node("a", zone="us-east-1a", cpu="16"), node("b", zone="us-east-1b")]
    bound = [pod("w1", labels={"app": "web"}, on="a"), pod("w2", labels={"app": "web"}, on="b")]
    web = pod("p", labels={"app": "web"}, **spread())
    # When skew allows either zone, score decides: a
    assert place(web, nodes, bound) == "a"
    # When zone a already has one more, only b keeps skew <= 1
    bound.append(pod("w3", labels={"app": "web"}, on="a"))
    assert place(web, nodes, bound) == "b"


def test_topology_spread_other_cases() -> None:
    nodes = [node("a", zone="us-east-1a"), node("nolabel", zone="us-east-1b")]
    del nodes[1]["metadata"]["labels"]["topology.kubernetes.io/zone"]
    # A node without the topology key is not a candidate
    assert place(pod("p", labels={"app": "web"}, **spread()), nodes[1:]) is None
    # ScheduleAnyway constraints do not filter
    soft = spread()
    soft["topologySpreadConstraints"][0]["whenUnsatisfiable"] = "ScheduleAnyway"
    assert place(pod("p", labels={"app": "web"}, **soft), nodes[1:]) == "nolabel"
    # minDomains above the domain count makes the global minimum 0: a second pod in the one zone is refused
    bound = [pod("w1", labels={"app": "web"}, on="a")]
    assert place(pod("p", labels={"app": "web"}, **spread(minDomains=3)), nodes[:1], bound) is None
    assert place(pod("p", labels={"app": "web"}, **spread(maxSkew=2)), nodes[:1], bound) == "a"


def _anti(app: str, key: str = "kubernetes.io/hostname") -> Obj:
    return {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}]}}}


def _aff(app: str, key: str = "topology.kubernetes.io/zone") -> Obj:
    return {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}]}}}


def test_inter_pod_affinity_and_anti_affinity() -> None:
    nodes = [node("a", zone="us-east-1a", cpu="16"), node("b", zone="us-east-1b")]
    db = pod("db", labels={"app": "db"}, on="b")
    # Affinity: must share a zone with a db pod
    assert place(pod("p", **_aff("db")), nodes, [db]) == "b"
    # Affinity with no matching pod anywhere: unschedulable, unless the pod matches its own term
    assert place(pod("p", **_aff("db")), nodes, []) is None
    assert place(pod("p", labels={"app": "db"}, **_aff("db")), nodes, []) == "a"
    # Anti-affinity: never on a node with a web pod
    web = pod("w", labels={"app": "web"}, on="a")
    assert place(pod("p", **_anti("web")), nodes, [web]) == "b"
    # An existing pod's anti-affinity keeps matching pods off its node too
    guard = pod("g", labels={"app": "guard"}, on="a", **_anti("web"))
    assert place(pod("p", labels={"app": "web"}), nodes, [guard]) == "b"
    # Other namespaces are not selected by default
    assert place(pod("p", **_anti("web")), nodes[:1], [web | {"metadata": {**web["metadata"], "namespace": "x"}}]) \
        == "a"


def test_scoring_least_and_most_allocated() -> None:
    nodes = [node("busy", cpu="8"), node("idle", cpu="8")]
    bound = [pod("x", cpu="4", on="busy")]
    assert place(pod("p"), nodes, bound) == "idle"
    assert place(pod("p"), nodes, bound, strategy="MostAllocated") == "busy"


def test_requests_default_from_limits_and_pod_level_requests_replace_the_containers() -> None:
    # Given a container with only a limit, and a pod whose pod-level requests replace its containers' cpu
    limited = {**pod("a"), "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "3"}}}]}}
    pod_level = pod("b", cpu="1", resources={"requests": {"cpu": "3"}})
    # Then the API server's defaulting and PodRequests' rules are what the fit reads
    assert pod_requests(limited)["cpu"] == Decimal(3)
    assert pod_requests(pod_level)["cpu"] == Decimal(3) and pod_requests(pod_level)["memory"] == Decimal(2**30)


def test_the_score_counts_non_zero_requests_for_containers_without_one() -> None:
    # Given a container without a memory request and one without any request
    assert score_requests(pod("a", cpu="1", memory="0")) == {"cpu": Decimal(1), "memory": Decimal(0)}
    best_effort = {**pod("b"), "spec": {"containers": [{"name": "c"}]}}
    # Then the score counts 100m and 200Mi for what is missing (an explicit zero stays zero); the fit does not
    assert score_requests(best_effort) == {"cpu": Decimal("0.1"), "memory": Decimal(200 * 2**20)}
    assert "cpu" not in pod_requests(best_effort)
    # And a node holding only best-effort pods is not as empty as an idle one
    assert place(best_effort, [node("busy"), node("idle")], [{**best_effort, "spec": {
        **best_effort["spec"], "nodeName": "busy"}, "status": {"phase": "Running"}}]) == "idle"


def test_scores_tie_in_integers_and_ties_go_to_the_first_name() -> None:
    # Given two nodes whose float shares differ by less than one point of kube-scheduler's integer score
    nodes = [node("b-busier", cpu="4"), node("a-idle", cpu="4")]
    bound = [pod("x", cpu="10m", memory="0", on="b-busier")]
    snapshot = Snapshot(nodes, bound)
    scores = {info.name: Snapshot.score(pod("p", cpu="900m"), info, "LeastAllocated")
              for info in snapshot.nodes.values()}
    # Then both score the same (a tie kube-scheduler breaks at random), and the oracle takes the first name
    assert scores["a-idle"] == scores["b-busier"]
    assert place(pod("p", cpu="900m"), nodes, bound) == "a-idle"


def test_only_the_fit_score_separates_feasible_nodes() -> None:
    # An intentional simplification (the module's docstring): a PreferNoSchedule taint, preferred affinity
    # or balanced allocation would move kube-scheduler to the other node; the oracle scores the fit alone
    # and breaks the tie by name, still a node kube-scheduler deems feasible.
    nodes = [node("a", taints=[{"key": "k", "effect": "PreferNoSchedule"}]), node("b")]
    preferred = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                                             "values": ["b"]}]}}]}}
    assert place(pod("p", affinity=preferred), nodes) == "a"


def test_namespace_selectors_read_the_namespaces_labels() -> None:
    # Given a pod of namespace "data" (labelled team=db) on n1, and a pod whose anti-affinity selects team=db
    data_pod = {**pod("x", cpu="100m", memory="100Mi", on="n1"), "metadata": {"name": "x", "namespace": "data",
                                                                         "labels": {"app": "db"}}}
    term = {"topologyKey": "kubernetes.io/hostname", "namespaceSelector": {"matchLabels": {"team": "db"}},
            "labelSelector": {"matchLabels": {"app": "db"}}}
    incoming = pod("p", cpu="100m", affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        term]}})
    nodes = [node("n1", cpu="8", memory="32Gi"), node("n2", cpu="1", memory="2Gi")]
    namespaces = [{"metadata": {"name": "default"}}, {"metadata": {"name": "data", "labels": {"team": "db"}}}]
    # Then the oracle keeps away from n1 (n1 would otherwise win: it has more room)
    [decision] = schedule([incoming], Snapshot(nodes, [data_pod], namespaces=namespaces))
    assert decision.node == "n2"
    # And without the namespaces' labels a non-empty selector means the term's own namespace only
    [decision] = schedule([incoming], Snapshot(nodes, [data_pod]))
    assert decision.node == "n1"


def test_pods_placed_in_one_pass_see_each_other() -> None:
    # Given one 4-CPU node and three 2-CPU pods, the third does not fit after the first two
    decisions = schedule([pod(f"p{i}", cpu="2") for i in range(3)], Snapshot([node("n1")], []))
    assert [d.node for d in decisions] == ["n1", "n1", None]
    assert decisions[2].message.startswith("0/1 nodes are available")
    assert "Insufficient cpu" in decisions[2].message


def test_runs_against_the_store() -> None:
    # Given a Ready node still carrying the registration taint and two pending pods
    store = Store()
    store.create("nodes", node("n1", taints=[UNREGISTERED]))
    store.create("pods", pod("a"))
    store.create("pods", pod("b", tolerations=[{"operator": "Exists"}]))
    # When the scheduler runs
    KubeScheduler(store).run()
    # Then the tolerating pod is bound, the other is marked unschedulable with kube-scheduler's reason
    assert store.get("pods", "default", "b")["spec"]["nodeName"] == "n1"
    a = store.get("pods", "default", "a")
    assert "nodeName" not in a["spec"]
    cond = next(c for c in a["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert "untolerated taint {karpenter.sh/unregistered: NoExecute}" in cond["message"]
    # And running again without change writes nothing (no resourceVersion churn)
    before = store.resource_version
    KubeScheduler(store).run()
    assert store.resource_version == before


def test_replicas_with_one_spec_see_each_others_bindings() -> None:
    # Given three replicas of one spec (the answers for one signature are reused within a snapshot) and
    # two nodes with room for one each, the second node cordoned for nothing but the third replica
    nodes = [node("n1", cpu="1500m"), node("n2", cpu="1500m")]
    replicas = [pod(f"r{i}", cpu="1", labels={"app": "web"}) for i in range(3)]
    # When they are scheduled in one run
    decisions = schedule(replicas, Snapshot(nodes, []))
    # Then each binding is seen by the next replica: one per node, the third unschedulable for cpu
    assert [d.node for d in decisions] == ["n1", "n2", None]
    assert "2 Insufficient cpu" in decisions[2].message


def test_anti_affinity_of_a_replica_placed_in_the_same_run_repels_the_next() -> None:
    # Given two replicas that refuse to share a host, and two nodes with room for both on each
    term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}
    spec = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}
    replicas = [pod(f"db{i}", labels={"app": "db"}, **spec) for i in range(3)]
    # When they are scheduled in one run
    decisions = schedule(replicas, Snapshot([node("n1"), node("n2")], []))
    # Then one per node, and the third finds no node (the index of anti-affinity pods is kept up to date)
    assert sorted(d.node or "-" for d in decisions) == ["-", "n1", "n2"]


@pytest.mark.parametrize(("nodes", "expected"), [(5, 5), (99, 99), (100, 100), (200, 100), (500, 230),
                                                 (5000, 500), (10_000, 500)])
def test_feasible_nodes_to_find_is_kube_schedulers(nodes: int, expected: int) -> None:
    assert feasible_nodes_to_find(nodes) == expected


def test_large_clusters_score_the_nodes_found_from_where_the_last_search_stopped() -> None:
    # Given 200 empty nodes (kube-scheduler looks for 100 feasible ones) and two pods
    nodes = [node(f"n{i:03d}") for i in range(200)]
    snapshot = Snapshot(nodes, [])
    # When they are scheduled one after the other
    decisions = schedule([pod("a"), pod("b")], snapshot)
    # Then the first is placed among the first 100 nodes, the second among the next 100 (every node
    # scores the same when empty: the name breaks the tie within each search)
    assert [d.node for d in decisions] == ["n000", "n100"]
    assert snapshot.start == 0
