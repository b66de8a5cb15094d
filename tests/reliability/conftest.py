"""Reliability tests: full runs on the real offline cluster while faults are injected.

Cluster fixtures are the session-scoped ones of every cluster test (fixtures/cluster.py). Each test
gets a :class:`Target` (a fresh namespace with the admin's prerequisites, scratch space) and a
``faults_log``: every fault a test injects is recorded there with its recovery time, and at
teardown it is marked survived if the test passed. With ``DEPLOY_SUITE_FAULT_LOG=<file>`` the
records are appended to that file as JSON lines (``bench/reliability_figures.py`` reads them).
"""

from __future__ import annotations

import json
import os
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from deploy_suite.kube import Kube
from deploy_suite.offline import faults
from deploy_suite.offline.cluster import OfflineCluster
from fixtures.cluster import cluster_kube, offline_cluster, offline_clusters, scratch_namespace
from fixtures.experiments.make_experiment import Experiment
from tests.reliability import harness
from tests.reliability.harness import FaultRecord, SuiteProcess

__all__ = ["cluster_kube", "offline_cluster", "offline_clusters", "scratch_namespace"]

FAULT_LOG_ENV = "DEPLOY_SUITE_FAULT_LOG"
_PASSED = pytest.StashKey[bool]()


@dataclass
class Target:
    """One test's namespace on the offline cluster, its experiment space and its fault switches."""

    cluster: OfflineCluster
    kube: Kube  # the cluster admin's client, never the harness's
    namespace: str
    tmp: Path
    stages: list[faults.Fault] = field(default_factory=list)

    @property
    def kubeconfig(self) -> str:
        return self.cluster.info().kubeconfig

    def experiment(self, name: str = "scratch") -> Experiment:
        return harness.experiment(self.tmp / name, self.cluster.context, self.namespace)

    def suite(self, exp: Experiment, iteration: int = 0, handoff: Path | None = None,
              env: dict[str, str] | None = None) -> SuiteProcess:
        return SuiteProcess(exp, iteration, self.kubeconfig, self.tmp / "reports", handoff=handoff,
                            env=dict(env or {}))

    def slow(self, default: str, selector: list[faults.Expression], delay_s: float) -> None:
        """Make one pod transition take ``delay_s`` for the selected pods of this test (removed after)."""
        fault = harness.slow_stage(f"slow-{default}-{self.namespace}", default, selector, delay_s)
        faults.apply(self.kube, fault)
        self.stages.append(fault)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.when == "call":
        item.stash[_PASSED] = report.passed


@pytest.fixture
def target(offline_cluster: OfflineCluster, tmp_path: Path) -> Iterator[Target]:
    kube = offline_cluster.kube()
    target = Target(offline_cluster, kube, harness.admin_namespace(kube), tmp_path)
    try:
        yield target
    finally:
        for pid in harness.port_forwards(target.namespace):  # a failed test's orphan, never left running
            harness.kill_and_reap(pid)
        for fault in target.stages:
            faults.remove(kube, fault)  # cluster-scoped: never left behind for the next test
        kube.delete("Namespace", target.namespace)  # its DGDs, pods and serving processes go with it
        kube.close()


@pytest.fixture
def faults_log(request: pytest.FixtureRequest) -> Iterator[list[FaultRecord]]:
    records: list[FaultRecord] = []
    yield records
    survived = bool(request.node.stash.get(_PASSED, False))
    lines = [json.dumps({"test": request.node.name, **r.as_dict(survived)}) for r in records]
    if not lines and not survived:  # failed before it could record: still one fault, not survived
        lines = [json.dumps({"test": request.node.name, "scenario": request.node.originalname, "fault": "?",
                             "step": "?", "recovery_s": None, "survived": False})]
    path = os.environ.get(FAULT_LOG_ENV)
    if path and lines:
        with Path(path).open("a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
