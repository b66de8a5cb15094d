"""The worker instance ids a pod's DynamoWorkerMetadata publishes (deploy_suite/model/discovery.py)."""

from __future__ import annotations

from typing import Any

import pytest

from deploy_suite.model import discovery

POD = {"metadata": {"name": "w-0", "uid": "u-1"}}


def meta(name: str, endpoints: dict[str, Any], owners: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "ownerReferences": owners if owners is not None else
                         [{"kind": "Pod", "name": "w-0", "uid": "u-1"}]},
            "spec": {"data": {"endpoints": endpoints}}}


def ep(component: str, ident: Any, endpoint: str = "generate", kind: str | None = "Endpoint") -> dict[str, Any]:
    entry = {"component": component, "endpoint": endpoint, "instance_id": ident}
    return entry | ({"type": kind} if kind else {})


def test_a_decode_worker_comes_before_a_prefill_one_and_each_id_once() -> None:
    objs = [meta("w-0-prefill", {"p": ep("prefill", 3)}),
            meta("w-0", {"b": ep("backend", 2), "c": ep("backend", 2), "k": ep("backend", 8, "clear_kv_blocks")})]
    assert discovery.generate_instances(objs, POD) == [(2, "w-0"), (3, "w-0-prefill")]


@pytest.mark.parametrize(("ident", "expected"), [(12, [(12, "w-0")]), ("18446744073709551615",
                                                 [(18446744073709551615, "w-0")]),
                                                 ("0x1f", []), (-1, []), (True, []), (None, [])])
def test_an_instance_id_is_a_u64_as_a_number_or_decimal_text(ident: Any, expected: list[tuple[int, str]]) -> None:
    assert discovery.generate_instances([meta("w-0", {"k": ep("backend", ident)})], POD) == expected


def test_an_event_channel_or_another_endpoint_is_not_a_worker() -> None:
    objs = [meta("w-0", {"e": ep("backend", 4, kind="EventChannel"), "m": ep("backend", 5, "load_metrics")})]
    assert discovery.generate_instances(objs, POD) == []


@pytest.mark.parametrize(("obj", "owned"), [
    (meta("w-0", {}), True),
    (meta("w-0", {}, [{"kind": "Pod", "name": "w-0", "uid": "u-old"}]), False),  # a previous pod of that name
    (meta("x", {}, [{"kind": "Pod", "name": "w-1", "uid": "u-2"}]), False),
    (meta("w-0", {}, []), True),  # no owner: named after the pod
    (meta("w-9", {}, []), False),
    (meta("w-0", {}, [{"kind": "ReplicaSet", "name": "w", "uid": "u-1"}]), True),
])
def test_ownership_is_the_pods_uid_or_without_owners_its_name(obj: dict[str, Any], owned: bool) -> None:
    assert discovery.owned_by(obj, POD) is owned


def test_without_a_pod_uid_the_owner_name_decides() -> None:
    assert discovery.owned_by(meta("w-0", {}), {"metadata": {"name": "w-0"}})
