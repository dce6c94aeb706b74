"""Nominations (``app/nominations.py``): a pod placed on an existing node counts as there until it binds,
leaves, is recreated, its node goes, or the nomination expires."""

from __future__ import annotations

from autoscaler.app.nominations import Nominations
from autoscaler.domain.objects import pod_from_dict
from tests import kube_objects as k


def _pod(name: str, *, node: str | None = None, uid: str = "") -> object:
    raw = k.pod(name, node=node)
    raw["metadata"]["uid"] = uid or f"uid-{name}"
    return pod_from_dict(raw)


def test_a_nominated_pod_is_on_its_node_until_it_binds() -> None:
    noms = Nominations(seconds=60)
    a, b = _pod("a"), _pod("b")
    noms.remember({"default/a": "node-1", "default/b": "i-0123"}, {"default/a": a, "default/b": b},
                  {"node-1", "node-2"}, now=100.0)
    assert len(noms) == 1  # b went to an in-flight instance: its node claim holds it, not a nomination
    held = noms.apply([a, b], {"node-1", "node-2"}, now=130.0)
    assert [(p.name, p.node_name) for p in held] == [("a", "node-1"), ("b", None)]
    # kube-scheduler bound it (anywhere): the nomination is done
    assert [p.node_name for p in noms.apply([_pod("a", node="node-2")], {"node-1", "node-2"}, now=131.0)] == [
        "node-2"]
    assert len(noms) == 0


def test_a_nomination_ends_when_it_expires_the_node_goes_or_the_pod_is_recreated() -> None:
    for pods, nodes, now in (
        ([_pod("a")], {"node-1"}, 160.0),  # expired (nominated at 100 for 60 s)
        ([_pod("a")], {"node-2"}, 130.0),  # node-1 gone or leaving
        ([_pod("a", uid="uid-new")], {"node-1"}, 130.0),  # the same name, another pod
        ([], {"node-1"}, 130.0),  # the pod left
    ):
        noms = Nominations(seconds=60)
        noms.remember({"default/a": "node-1"}, {"default/a": _pod("a")}, {"node-1"}, now=100.0)
        assert all(p.node_name is None for p in noms.apply(pods, nodes, now=now))
        assert len(noms) == 0
