"""Fixtures the unit tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy_suite import clock
from deploy_suite.plugins.lifecycle import Lifecycle
from deploy_suite.procedure.settings import Settings


@pytest.fixture
def fake_clock() -> Iterator[clock.FakeClock]:
    """A FakeClock installed for the test: sleeps and deadlines run instantly."""
    fake = clock.FakeClock()
    previous = clock.install(fake)
    yield fake
    clock.install(previous)


@pytest.fixture
def lifecycle(tmp_path: Path) -> Lifecycle:
    """A run's lifecycle at iteration 0 whose ledger is written under ``tmp_path``'s deployment directory."""
    settings = Settings(iteration=0, exp_root=tmp_path, workload=tmp_path / "w", workload_sha256="a" * 64,
                        dgd=tmp_path / "d", dgd_sha256="b" * 64, provenance="user-interviewer")
    state = Lifecycle.create(settings)
    (tmp_path / "artifacts" / "deploy-iter-000").mkdir(parents=True)
    state.attach_directory(tmp_path / "artifacts" / "deploy-iter-000", False, None)
    return state
