"""Step 6's evidence reads the log of the run a container status showed terminated, even when the
real kubelet has restarted that container since (kind found it: docs/offline-cluster.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from deploy_suite.access.kube import KNOWN, Kube
from deploy_suite.procedure import evidence
from tests import fakekube
from tests.fakekube import FakeApi

NS = "demo"
REFUSED = "__main__.py: error: unrecognized arguments: --max-num-seqz 8"
WARN = "WARN dynamo_runtime::config: DYN_SYSTEM_ENABLED is deprecated"


@pytest.fixture
def fake() -> Iterator[tuple[FakeApi, Kube]]:
    with fakekube.installed() as (api, kube, _records):
        yield api, kube


def _terminated(container_id: str) -> dict[str, Any]:
    return {"name": "main", "restartCount": 0, "state": {"terminated": {"exitCode": 2, "reason": "Error",
                                                                        "containerID": container_id}}}


def _store(api: FakeApi, status: dict[str, Any]) -> None:
    pod = fakekube.pod("w-0", NS, phase="Running")
    pod["status"]["containerStatuses"] = [status]
    api.put(KNOWN["Pod"], pod)


def test_a_run_restarted_since_its_status_was_read_is_read_as_the_previous_one(fake: tuple[FakeApi, Kube]) -> None:
    api, kube = fake
    seen = _terminated("containerd://c1")  # what step 6 saw
    # Since then the kubelet restarted it: c1 is the last state, c2 runs and has begun to log.
    _store(api, {"name": "main", "restartCount": 1, "state": {"running": {}},
                 "lastState": {"terminated": {"exitCode": 2, "containerID": "containerd://c1"}}})
    api.logs[(NS, "w-0")] = f"{WARN}\n"
    api.previous_logs[(NS, "w-0")] = f"usage: __main__.py [-h]\n{REFUSED}\n"
    log, previous = evidence.terminated_log(kube, NS, "w-0", seen, False)
    assert REFUSED in log and previous is True


def test_a_terminated_run_that_is_still_current_is_read_as_it_is(fake: tuple[FakeApi, Kube]) -> None:
    api, kube = fake
    seen = _terminated("containerd://c1")
    _store(api, seen)
    api.logs[(NS, "w-0")] = f"{REFUSED}\n"
    api.previous_logs[(NS, "w-0")] = "an older run\n"
    log, previous = evidence.terminated_log(kube, NS, "w-0", seen, False)
    assert log == f"{REFUSED}\n" and previous is False
    assert [r for r in api.requests if r.query.get("previous") == "true"] == []  # read once, as before


def test_a_crash_loop_is_read_as_the_previous_run_directly(fake: tuple[FakeApi, Kube]) -> None:
    api, kube = fake
    api.previous_logs[(NS, "w-0")] = f"{REFUSED}\n"
    status = {"name": "main", "restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
    assert evidence.terminated_log(kube, NS, "w-0", status, True) == (f"{REFUSED}\n", True)
