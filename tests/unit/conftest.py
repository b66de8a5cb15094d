"""Fixtures the unit tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deploy_suite import clock


@pytest.fixture
def fake_clock() -> Iterator[clock.FakeClock]:
    """A FakeClock installed for the test: sleeps and deadlines run instantly."""
    fake = clock.FakeClock()
    previous = clock.install(fake)
    yield fake
    clock.install(previous)
