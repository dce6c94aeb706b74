"""DescribeInstances at the speed a large simulation needs, with moto's answer.

moto renders every instance of a DescribeInstances answer through its model serializer and XML, and
botocore parses it back: about 20 ms per instance, so a 500-node cluster costs 10 s per call, and every
provisioner and disruption pass makes such calls. This stand-in answers at the boto3 boundary
(``before-call``) from moto's own state, in-process: moto's reservations in moto's order, filtered and
paginated as moto's DescribeInstances does, each instance the dict a real round trip through moto
produced, kept until something the answer shows changes (state, tags, security groups, lifecycle).

What it cannot reproduce exactly it leaves to moto: a filter other than ``tag:<key>``, ``tag-key``,
``instance-state-name`` and ``instance-id``, a wildcard value, unknown instance ids (moto's error), DryRun.
Every ``after-call`` hook (the simulation's virtual ``LaunchTime``) still runs on the answer.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from moto.core import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends

SUPPORTED_FILTERS = ("instance-state-name", "instance-id", "tag-key")


class _Http:
    status_code = 200
    headers: dict[str, str] = {}
    content = b""


def _key(instance: Any, tags: Mapping[str, str]) -> tuple[Any, ...]:
    """What moto's answer for an instance shows that can change after launch."""
    groups = tuple(sorted(str(getattr(g, "id", g)) for g in getattr(instance, "security_groups", ()) or ()))
    return (instance.id, instance._state.name, getattr(instance, "_reason", ""), tuple(sorted(tags.items())),
            groups, instance.lifecycle)


def _matches(instance: Any, tags: Mapping[str, str], filters: Mapping[str, list[str]]) -> bool:
    """EC2's filter semantics: filters ANDed, a filter's values ORed (exact values only; see supported)."""
    for name, values in filters.items():
        if name == "instance-state-name":
            ok = instance._state.name in values
        elif name == "instance-id":
            ok = instance.id in values
        elif name == "tag-key":
            ok = any(k in tags for k in values)
        else:  # tag:<key>
            ok = tags.get(name[4:]) in values
        if not ok:
            return False
    return True


class FastDescribeInstances:
    """Installed on a boto3 session's events; ``lock`` is the lock moto's server applies requests under
    (moto's state is read here between requests, never during one)."""

    def __init__(self, region: str, lock: threading.Lock, client: Callable[[], Any]) -> None:
        self.region, self.lock, self._client = region, lock, client
        self._instances: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}  # id -> (key, moto's dict)
        self._reservations: dict[str, dict[str, Any]] = {}  # id -> moto's reservation fields but Instances
        self._local = threading.local()
        self.answered = 0  # calls answered here (the rest went to moto)
        self.learned = 0  # instance answers fetched from moto (new or changed instances)

    def user_data(self, instance_id: str) -> str | None:
        """The instance's user data as DescribeInstanceAttribute(userData) answers it (base64), read from
        moto's state: the simulated kubelet asks once per instance it boots, 500 of them in a large run, and
        the round trip through moto's XML costs more than the rest of the registration."""
        with self.lock:
            backend = ec2_backends[DEFAULT_ACCOUNT_ID][self.region]
            for reservation in backend.reservations.values():
                for instance in reservation.instances:
                    if instance.id == instance_id:
                        value = instance.user_data
                        return None if value is None else str(value)
        client: Any = self._client()
        answer = client.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        return (answer.get("UserData") or {}).get("Value")

    def install(self, events: Any) -> FastDescribeInstances:
        # before-call sees the serialized request; the API parameters are taken as the call is built.
        events.register("before-parameter-build.ec2.DescribeInstances", self._remember)
        events.register("before-call.ec2.DescribeInstances", self._answer)
        return self

    def _remember(self, params: dict[str, Any], **_: Any) -> None:
        self._local.params = dict(params)

    def _answer(self, **_: Any) -> tuple[Any, dict[str, Any]] | None:
        params: dict[str, Any] = getattr(self._local, "params", None) or {}
        self._local.params = None
        if getattr(self._local, "bypass", False) or params.get("DryRun"):
            return None
        filters: dict[str, list[str]] = {}
        for f in params.get("Filters") or ():
            name, values = str(f.get("Name", "")), [str(v) for v in f.get("Values") or ()]
            if name in filters or any("*" in v or "?" in v for v in values) or not (
                    name in SUPPORTED_FILTERS or (name.startswith("tag:") and len(name) > 4)):
                return None
            filters[name] = values
        ids = list(params.get("InstanceIds") or ())
        if (ids and params.get("MaxResults") is not None) or len(set(ids)) != len(ids):
            return None  # moto's (and EC2's) parameter errors
        with self.lock:
            chosen = self._select(ids, filters)
        if chosen is None:
            return None
        if params.get("NextToken") and params["NextToken"] not in {rid for rid, _ in chosen}:
            return None
        reservations, token = self._page(chosen, params)
        answer = self._render(reservations)
        if answer is None:
            return None
        self.answered += 1
        parsed: dict[str, Any] = {"Reservations": answer, "ResponseMetadata": {
            "RequestId": str(uuid.uuid4()), "HTTPStatusCode": 200, "HTTPHeaders": {}, "RetryAttempts": 0}}
        if token:
            parsed["NextToken"] = token
        return _Http(), parsed

    def _select(self, ids: list[str], filters: Mapping[str, list[str]]
                ) -> list[tuple[str, list[tuple[Any, tuple[Any, ...]]]]] | None:
        """moto's reservations (in its order) with the instances the request selects, and each
        instance's key; None when an id is unknown (moto answers the error)."""
        backend = ec2_backends[DEFAULT_ACCOUNT_ID][self.region]
        if not backend.reservations:
            return None  # nothing to gain (or moto runs in another process): moto answers
        tag_store = backend.tags
        wanted = set(ids)
        seen: set[str] = set()
        out: list[tuple[str, list[tuple[Any, tuple[Any, ...]]]]] = []
        for reservation in list(backend.reservations.values()):
            kept = []
            for instance in reservation.instances:
                if wanted and instance.id not in wanted:
                    continue
                seen.add(instance.id)
                tags = dict(tag_store.get(instance.id, {}))
                if _matches(instance, tags, filters):
                    kept.append((instance, _key(instance, tags)))
            if kept:
                out.append((reservation.id, kept))
        if wanted - seen:
            return None
        return out

    @staticmethod
    def _page(chosen: list[Any], params: Mapping[str, Any]) -> tuple[list[Any], str | None]:
        """moto's paging: by reservations, ``MaxResults`` (default 100), the token the last one's id."""
        ids = [rid for rid, _ in chosen]
        token = params.get("NextToken")
        start = ids.index(token) + 1 if token else 0
        size = int(params.get("MaxResults") or 100)
        page = chosen[start:start + size]
        return page, (page[-1][0] if len(chosen) > start + size else None)

    def _render(self, page: Iterable[tuple[str, list[tuple[Any, tuple[Any, ...]]]]]) -> list[dict[str, Any]] | None:
        page = list(page)
        stale = [inst.id for _, kept in page for inst, key in kept
                 if self._instances.get(inst.id, ((),))[0] != key]
        if stale:
            self._refresh(stale)
        out = []
        for rid, kept in page:
            header = self._reservations.get(rid)
            if header is None:
                return None
            instances = []
            for inst, key in kept:
                cached = self._instances.get(inst.id)
                if cached is None or cached[0] != key:
                    return None  # changed while moto answered: let moto answer this call
                # A fresh top level per answer (the after-call hooks set LaunchTime there); the nested
                # parts are shared, as nothing downstream writes into them.
                instances.append(dict(cached[1]))
            out.append({**header, "Instances": instances})
        return out

    def _refresh(self, ids: list[str]) -> None:
        """One round trip through moto for the instances whose answer is not known yet."""
        self._local.bypass = True
        try:
            client = self._client()
            pages = []
            for start in range(0, len(ids), 500):
                token = None
                while True:  # moto pages by 100 reservations even when asked for instance ids
                    page = client.describe_instances(InstanceIds=ids[start:start + 500],
                                                     **({"NextToken": token} if token else {}))
                    pages.append(page)
                    token = page.get("NextToken")
                    if not token:
                        break
            for parsed in pages:
                with self.lock:
                    backend = ec2_backends[DEFAULT_ACCOUNT_ID][self.region]
                    current = {i.id: i for r in backend.reservations.values() for i in r.instances}
                    for reservation in parsed.get("Reservations") or ():
                        self._reservations[reservation["ReservationId"]] = {
                            k: v for k, v in reservation.items() if k != "Instances"}
                        for raw in reservation.get("Instances") or ():
                            inst = current.get(raw["InstanceId"])
                            if inst is not None:
                                tags = dict(backend.tags.get(inst.id, {}))
                                self._instances[inst.id] = (_key(inst, tags), raw)
                                self.learned += 1
        finally:
            self._local.bypass = False
