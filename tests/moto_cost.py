"""What the test process does to make moto and botocore cheaper without changing a byte of what the code
under test sends or receives. Installed once per process by tests/conftest.py, before any test module
imports moto's models; each saving says why its answers are the same as without it."""

from __future__ import annotations

import atexit
import copy
import gzip
import json
import os
import tempfile
import threading
from importlib import resources
from pathlib import Path
from typing import Any

from simulator.botocore_models import one_loader_per_process  # botocore only: moto is not imported yet

# EC2's catalogue answers: moto builds them from its static tables for the region and the request alone.
CATALOGUE_ACTIONS = frozenset({"DescribeSpotPriceHistory", "DescribeInstanceTypes", "DescribeInstanceTypeOfferings"})


def install() -> None:
    """Every saving below, once per process (moto's EC2 models read MOTO_AMIS_PATH when first imported)."""
    if "MOTO_AMIS_PATH" not in os.environ:
        os.environ["MOTO_AMIS_PATH"] = moto_base_images()
    one_loader_per_process()
    serialise_catalogue_answers_once()
    back_up_each_table_once_per_transaction()
    read_a_resources_tags_by_its_id()
    parse_timestamps_as_the_functions_do()


def moto_base_images() -> str:
    """moto's own base image catalogue (its amis.json: 44 images, both architectures), as a file for
    MOTO_AMIS_PATH. Without it every EC2 backend moto builds (at first use and at each reset, several per
    test) also creates the region's ~1,250 ECS-optimised and "latest" images, each with a snapshot and a
    volume: a third of a second of CPU per backend, for images no test looks at. The images the tests and the
    simulator pick (the first available one per architecture) come from this base list either way."""
    path = Path(tempfile.gettempdir()) / f"moto-amis-{os.getpid()}.json"
    path.write_bytes(gzip.decompress((resources.files("moto") / "ec2/resources/amis.json.gz").read_bytes()))
    atexit.register(path.unlink, missing_ok=True)
    return str(path)


def serialise_catalogue_answers_once() -> None:
    """moto turns each catalogue answer into XML again for every request: an unfiltered
    DescribeSpotPriceHistory (what the pricing adapter asks every spot TTL: 6,436 records in us-east-1, one
    page) costs a second of CPU to serialise, and a disruption or provisioner pass asks it once per fresh
    cache, which was most of a handler test's CPU. The XML is a function of the answer's content (its request
    id is a constant; the header's, added afterwards, stays fresh), so an answer equal to one already
    serialised gets the same bytes back: what botocore receives and parses is unchanged."""
    from moto.core.responses import ActionResult  # moto, only after install() has set MOTO_AMIS_PATH

    serialise = ActionResult.execute_result
    answers: dict[tuple[str, str, str], Any] = {}

    def execute_result(self: ActionResult, context: Any) -> Any:
        action = context.operation_model.name
        if type(self) is not ActionResult or action not in CATALOGUE_ACTIONS or isinstance(self.result, Exception):
            return serialise(self, context)
        # The answer's content (moto's InstanceType is a dict whose repr shows only its name).
        key = (context.serializer_class.__qualname__, action, json.dumps(self.result, default=repr))
        if key not in answers:
            answers[key] = serialise(self, context)
        status, headers, body = answers[key]
        return status, dict(headers), body

    execute_result.__wrapped__ = serialise  # type: ignore[attr-defined]  # tests/test_moto_cost.py compares
    ActionResult.execute_result = execute_result  # type: ignore[method-assign]


class _TableBackups:
    """Stands in for the ``copy`` module inside moto's DynamoDB backend. TransactWriteItems backs up the
    table before it writes, so that a cancelled transaction leaves it as it was; moto deep-copies the whole
    table once per *item* of the transaction (all before the first write, keeping the last copy): 100 copies
    of the table per full transaction, quadratic in the table's size (2,000 claims written 100 at a time made
    1.9 million item copies, 40 s of CPU). Within one transaction's call on this thread every copy of a
    table is the first one, which is equal to all the others; any other deep copy is made as before."""

    def __init__(self) -> None:
        self._local = threading.local()

    def deepcopy(self, value: Any, memo: dict[int, Any] | None = None) -> Any:
        from moto.dynamodb.models.table import Table  # moto, only after install() has set MOTO_AMIS_PATH

        backups: dict[int, tuple[Any, Any]] | None = getattr(self._local, "backups", None)
        if backups is None or not isinstance(value, Table):
            return copy.deepcopy(value, memo)
        if id(value) not in backups:  # the table itself is kept too, so that its id is not reused
            backups[id(value)] = (value, copy.deepcopy(value, memo))
        return backups[id(value)][1]

    def during(self, transaction: Any) -> Any:
        backups = self

        def transact_write_items(backend: Any, transact_items: list[dict[str, Any]]) -> None:
            backups._local.backups = {}
            try:
                transaction(backend, transact_items)
            finally:
                backups._local.backups = None

        return transact_write_items


def back_up_each_table_once_per_transaction() -> None:
    from moto.dynamodb import models  # moto, only after install() has set MOTO_AMIS_PATH

    if isinstance(models.copy, _TableBackups):
        return
    backups = _TableBackups()
    models.DynamoDBBackend.transact_write_items = backups.during(  # type: ignore[method-assign]
        models.DynamoDBBackend.transact_write_items)
    models.copy = backups  # type: ignore[assignment]


def read_a_resources_tags_by_its_id() -> None:
    """moto reads one EC2 resource's tags (for every instance it describes, and for every tag filter it
    evaluates) by scanning the tags of *every* resource of the region with a resource-id filter: quadratic in
    the resources, 55 % of listing 1,100 instances. The tags of one id are the entry of that id, in the same
    order and the same form (moto's ids hold none of the filter's wildcards, so its pattern matches that id
    alone); tests/test_moto_cost.py compares the two."""
    from moto.ec2.models.core import TaggedEC2Resource  # moto, only after install() has set MOTO_AMIS_PATH
    from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix  # the same

    def get_tags(self: Any) -> list[dict[str, str]]:
        if not self.id:
            return []
        tags = self.ec2_backend.tags.get(self.id) or {}  # .get: the backend's defaultdict gains no entry
        kind = EC2_PREFIX_TO_RESOURCE.get(get_prefix(self.id), "")
        return [{"resource_id": self.id, "key": key, "value": value, "resource_type": kind}
                for key, value in list(tags.items())]

    get_tags.__wrapped__ = TaggedEC2Resource.get_tags  # type: ignore[attr-defined]
    TaggedEC2Resource.get_tags = get_tags  # type: ignore[method-assign]


def parse_timestamps_as_the_functions_do() -> None:
    """Every botocore client of the test process parses response timestamps with the functions' own parser
    (``autoscaler.adapters.aws._calls.fast_timestamp``, which ``handlers/runtime.py`` and
    ``AwsCloud.from_session`` install on every deployed session), not with botocore's default (dateutil).
    Tests build their clients from the default session, which never had it: an unfiltered
    DescribeSpotPriceHistory (6,436 records, what the pricing adapter asks every spot TTL) then spent most of a
    disruption or provisioner test's CPU in dateutil. Each value parses to the same instant either way
    (tests/test_moto_cost.py compares them); clients now parse as the deployed ones do."""
    import botocore.parsers

    from autoscaler.adapters.aws._calls import fast_timestamp

    botocore.parsers.DEFAULT_TIMESTAMP_PARSER = fast_timestamp
