"""The offline clusters' CRD wait: Established is not enough, discovery must serve the kind too."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from deploy_suite import clock
from deploy_suite.access.watch import WaitState
from deploy_suite_offline import cluster
from deploy_suite_offline.errors import ClusterError

QUEUES = {"metadata": {"name": "queues.scheduling.run.ai"},
          "spec": {"group": "scheduling.run.ai", "names": {"plural": "queues"},
                   "versions": [{"name": "v2", "served": True}, {"name": "v1", "served": False}]},
          "status": {"conditions": [{"type": "Established", "status": "True"}]}}


class _LaggingDiscovery:
    """Established at once; the group's discovery document appears only after ``lag`` fresh reads."""

    def __init__(self, lag: int) -> None:
        self.lag = lag
        self.asked: list[tuple[str, bool]] = []

    def wait_for(self, _spec: Any, predicate: Any, **_kw: Any) -> WaitState:
        objs = {"queues.scheduling.run.ai": QUEUES}
        assert predicate(objs)[0]
        return WaitState(collections={"objects": objs})

    def group_resources(self, api_version: str, fresh: bool = False) -> list[dict[str, Any]]:
        self.asked.append((api_version, fresh))
        return [{"name": "queues"}] if len(self.asked) > self.lag else []


@pytest.fixture
def fake_clock(request: pytest.FixtureRequest) -> clock.FakeClock:
    fake = clock.FakeClock()
    request.addfinalizer(functools.partial(clock.install, clock.install(fake)))
    return fake


def test_wait_established_waits_for_discovery_of_every_served_version(fake_clock: clock.FakeClock) -> None:
    kube = _LaggingDiscovery(lag=3)
    cluster.wait_established(kube, ["queues.scheduling.run.ai"], timeout=10)  # type: ignore[arg-type]
    assert kube.asked == [("scheduling.run.ai/v2", True)] * 4  # fresh reads only; v1 is not served
    assert len(fake_clock.slept) == 3


def test_a_kind_discovery_never_serves_is_named(fake_clock: clock.FakeClock) -> None:
    kube = _LaggingDiscovery(lag=10**6)
    with pytest.raises(ClusterError, match=r"Established but not in discovery: scheduling\.run\.ai/v2"):
        cluster.wait_established(kube, ["queues.scheduling.run.ai"], timeout=2)  # type: ignore[arg-type]
