"""A fake more forgiving than the adapter is a defect, and the contract suite catches it: each test here plants
one forgiving variant of the service tests' fakes (``tests/app/fakes_cluster.py``, ``tests/app/fakes_cloud.py``,
``tests/app/fakes.py``)
and shows that the contract test holding that promise fails against it (as ``tests/test_layers.py`` plants
import violations), while the honest fake passes it."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import replace
from typing import Any

import pytest

from autoscaler.app.ports import NotFoundError
from autoscaler.domain.fleet import FleetError, FleetRequest, LaunchedInstance
from autoscaler.domain.models import CapacityType, EvictionResult
from simulator.kube_store import Store
from tests.adapters.contract import (
    test_cloud_port_contract,
    test_cluster_port_contract,
    test_eviction_contract,
    test_replacement_contract,
    test_writes_contract,
)
from tests.adapters.contract.conftest import Server
from tests.adapters.contract.test_cloud_port_contract import fake_region
from tests.adapters.contract.test_replacement_contract import fake_provisioner
from tests.app.fakes import Replacements
from tests.app.fakes_cloud import FakeCloud
from tests.app.fakes_cluster import FakeCluster


class IgnoresResourceVersion(FakeCluster):
    """Writes the node-state record whatever version it was read at (two writers could both take a node)."""

    def annotate_node(self, name: str, annotations: Mapping[str, str | None], *, resource_version: str = "") -> None:
        super().annotate_node(name, annotations)


class CreatesMissingNodes(FakeCluster):
    """Answers a write to a node that is gone as if it had worked."""

    def cordon(self, name: str) -> bool:
        try:
            return super().cordon(name)
        except NotFoundError:
            return True


class IgnoresBudgets(FakeCluster):
    """Evicts whatever the PodDisruptionBudgets say."""

    def evict(self, namespace: str, name: str, *, deadline: float, uid: str | None = None,
              grace_seconds: int | None = None, retry_blocked: bool = True) -> EvictionResult:
        self.store.delete("pods", namespace, name, grace_period_seconds=grace_seconds)
        return EvictionResult(f"{namespace}/{name}", "evicted")


class KeepsFinalizers(FakeCluster):
    """Deletes a node without releasing the finalizers it was asked to release."""

    def delete_node(self, name: str, *, release_finalizers: Collection[str] = ()) -> bool:
        return super().delete_node(name)


def _server(fake: type[FakeCluster]) -> Server:
    server = Server("fake", "", store=Store(graceful_deletion=True), fake=fake)
    server.create("/api/v1/namespaces", {"metadata": {"name": "strict"}})
    return server


@pytest.mark.parametrize(("fake", "contract"), [
    (IgnoresResourceVersion,
     test_writes_contract.test_issue33_item_14_a_conditional_annotation_write_takes_the_node_exactly_once),
    (CreatesMissingNodes,
     test_cluster_port_contract.test_writes_to_a_node_that_is_gone_raise_not_found_or_answer_false),
    (IgnoresBudgets, test_eviction_contract.test_eviction_under_a_budget_allows_then_refuses_with_429),
    (KeepsFinalizers, test_writes_contract.test_node_delete_waits_for_finalizers_and_releases_ours),
], ids=lambda v: getattr(v, "__name__", ""))
def test_a_forgiving_fake_fails_the_contract(fake: type[FakeCluster], contract: Callable[..., None]) -> None:
    arguments: dict[str, Any] = {"ns": "strict", "node_name": "node-strict"}
    names = contract.__code__.co_varnames[:contract.__code__.co_argcount]
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        contract(_server(fake), **{k: v for k, v in arguments.items() if k in names})
    # The honest fake passes the same test.
    contract(_server(FakeCluster), **{k: v for k, v in arguments.items() if k in names})


class IgnoresClientTokens(FakeCloud):
    """Launches again whenever asked: a retried launch would double the nodes."""

    def _create_fleet(self, request: FleetRequest, ct: CapacityType, attempt: int, candidates: list[tuple[str, str]],
                      count: int) -> tuple[list[LaunchedInstance], list[FleetError]]:
        self._answers.clear()
        return super()._create_fleet(request, ct, attempt, candidates, count)


class TerminatesAnything(FakeCloud):
    """Terminates instances whatever their tags (a managed node group's, another cluster's)."""

    def terminate(self, instance_ids: Iterable[str]) -> list[str]:
        ids = sorted(set(instance_ids) & set(self.instances))
        for iid in ids:
            self.instances[iid] = replace(self.instances[iid], state="shutting-down")
        return ids


class ForgetsCapacityErrors(FakeCloud):
    """Reports a capacity error but tries the same offering again at once."""

    def mark_unavailable(self, instance_type: str, zone: str, capacity_type: str) -> None:
        pass

    def unavailable(self) -> frozenset[tuple[str, str, str]]:
        return frozenset()


@pytest.mark.parametrize(("fake", "contract"), [
    (IgnoresClientTokens, test_cloud_port_contract.test_a_launch_sent_again_with_its_claim_launches_nothing_more),
    (IgnoresClientTokens,
     test_cloud_port_contract.test_a_launch_whose_answer_was_lost_is_uncertain_and_its_retry_answers_what_launched),
    (TerminatesAnything,
     test_cloud_port_contract.test_termination_refuses_an_instance_that_is_not_ours_and_terminates_nothing),
    (ForgetsCapacityErrors,
     test_cloud_port_contract.test_an_offering_without_capacity_is_reported_and_skipped_for_three_minutes),
], ids=lambda v: getattr(v, "__name__", ""))
def test_a_forgiving_cloud_fake_fails_the_contract(fake: type[FakeCloud], contract: Callable[..., None]) -> None:
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        contract(next(fake_region(fake)))
    contract(next(fake_region(FakeCloud)))


class SendsToAFunctionThatIsGone(Replacements):
    """Delivers the request whatever Lambda would answer: the caller never learns to retry."""

    def request_replacement(self, **request: Any) -> bool:
        self.refusing = None
        return super().request_replacement(**request)


class SendsWithoutAProvisioner(Replacements):
    """Reports a request sent when no provisioner function is configured."""

    def request_replacement(self, **request: Any) -> bool:
        super().request_replacement(**request)
        return True


@pytest.mark.parametrize(("fake", "contract"), [
    (SendsToAFunctionThatIsGone,
     test_replacement_contract.test_a_request_lambda_refuses_raises_a_typed_error_and_reaches_no_one),
    (SendsWithoutAProvisioner,
     test_replacement_contract.test_without_a_provisioner_nothing_is_sent_and_the_caller_is_told),
], ids=lambda v: getattr(v, "__name__", ""))
def test_a_forgiving_replacements_fake_fails_the_contract(fake: type[Replacements],
                                                          contract: Callable[..., None]) -> None:
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        contract(next(fake_provisioner(fake)))
    contract(next(fake_provisioner(Replacements)))
