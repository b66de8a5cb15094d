"""The errors only the offline cluster raises, kept beside it: the suite's core never sees them,
and a run against a real cluster has none of them (the error tree is ``deploy_suite.errors``)."""

from __future__ import annotations

from deploy_suite.errors import SuiteError


class ClusterError(SuiteError):
    """The offline cluster could not be built, started, stopped or inspected."""


class ReconcileError(SuiteError):
    """What the real operator would return from Reconcile (offline replica): reported as state failed."""
