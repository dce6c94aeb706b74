"""Bound pods counted by label group (``existing_node.LabelGroups``): a selector is asked once per distinct
(namespace, labels), and the counts it gives are the per-pod counts (issue 34: at 24,000 bound pods the
per-pod questions were a quarter of a 50k-pod plan's CPU; ``benchmarks/plan_corpus.py`` shows plans unchanged)."""

from __future__ import annotations

import random

from autoscaler.domain.models import LabelSelector, Pod
from autoscaler.domain.scheduling.existing_node import LabelGroups
from autoscaler.domain.scheduling.pod_class import selects


def _pod(name: str, namespace: str, labels: dict[str, str]) -> Pod:
    return Pod(namespace=namespace, name=name, labels=labels, node_name="node-a")


def test_bound_pods_group_by_namespace_and_labels_and_count_as_the_pods_do() -> None:
    rng = random.Random(7)
    label_sets = [{"app": "web"}, {"app": "web", "tier": "front"}, {"tier": "front", "app": "web"}, {"app": "db"}, {}]
    pods = [_pod(f"p{i}", rng.choice(("default", "prod")), dict(rng.choice(label_sets))) for i in range(300)]
    rng.shuffle(pods)
    groups = LabelGroups()
    grouped = groups.of(pods)
    # label order does not matter; namespace does
    assert len(grouped) == len({(p.namespace, tuple(sorted(p.labels.items()))) for p in pods}) <= 8
    assert sum(count for _, _, count in grouped) == len(pods)
    # a second node's pods with the same labels share the group numbers
    again = groups.of([_pod("q", "prod", {"tier": "front", "app": "web"})])
    assert again[0][0] in {group for group, sample, _ in grouped
                           if sample.namespace == "prod" and dict(sample.labels) == {"app": "web", "tier": "front"}}
    for selector in (LabelSelector(match_labels=(("app", "web"),)), LabelSelector(match_labels=(("tier", "front"),)),
                     LabelSelector()):
        for namespaces in ((), ("prod",), ("default", "prod")):
            per_pod = sum(selects(selector, owner_namespace="default", candidate=pod, namespaces=namespaces)
                          for pod in pods)
            per_group = sum(count for _, sample, count in grouped
                            if selects(selector, owner_namespace="default", candidate=sample, namespaces=namespaces))
            assert per_group == per_pod
