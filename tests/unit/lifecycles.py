"""A run's lifecycle as the ledger plugin drives it, for unit tests of the steps' logic."""

from __future__ import annotations

from deploy_suite.plugins.lifecycle import Lifecycle
from deploy_suite.procedure.settings import Settings


def started(settings: Settings, step: str) -> Lifecycle:
    """A new run's lifecycle with ``step`` begun (its context is what the step's logic receives)."""
    lifecycle = Lifecycle.create(settings)
    lifecycle.begin_step(step)
    return lifecycle
