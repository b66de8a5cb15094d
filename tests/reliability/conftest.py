"""Reliability tests: full runs on the real offline cluster while faults are injected.

Each test gets a :class:`tests.support.Target` (a fresh namespace with the admin's prerequisites,
scratch space, kwok faults removed afterwards) and a ``faults_log``: every fault a test injects is
recorded there with its recovery time, and at teardown it is marked survived if the test passed.
With ``DEPLOY_SUITE_FAULT_LOG=<file>`` the records are appended to that file as JSON lines
(``bench/reliability_figures.py`` reads them).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy_suite_offline.cluster import OfflineCluster
from tests import support

_PASSED = pytest.StashKey[bool]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.when == "call":
        item.stash[_PASSED] = report.passed


@pytest.fixture
def target(offline_cluster: OfflineCluster, tmp_path: Path) -> Iterator[support.Target]:
    with support.admin_target(offline_cluster, tmp_path, "rel", support.Target) as target:
        yield target


@pytest.fixture
def faults_log(request: pytest.FixtureRequest) -> Iterator[list[support.FaultRecord]]:
    records: list[support.FaultRecord] = []
    yield records
    support.record_faults(request.node.name, request.node.originalname, records,
                          survived=bool(request.node.stash.get(_PASSED, False)))
