"""What the suite's plugins keep in pytest's stash (``config.stash`` / ``item.stash``), in one place
so that the plugins import these keys and not each other."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy_suite.procedure.settings import Settings

from .lifecycle import Lifecycle

SETTINGS_KEY = pytest.StashKey[Settings]()  # options -> ledger
REPORT_PATHS_KEY = pytest.StashKey[dict[str, Path]]()  # options -> report: {"html": ..., "junit": ...}
RUN_KEY = pytest.StashKey[Lifecycle]()  # ledger -> report, fixtures (the run's lifecycle)
STEP_KEY = pytest.StashKey[str]()  # an item's registry step, set by ledger
STEP_IDS_KEY = pytest.StashKey[bool]()  # options: the installed steps' test ids rooted where the package lives
LEDGER_ERROR_KEY = pytest.StashKey[str]()  # a ledger that could not be written, shown by report
