"""A deployment refuses to run under pytest-xdist, in one line, before anything is written
(plugins/ledger.py, ``parallel_refusal``): its steps run in order in one process, and the ledger is one
file per iteration that steps run in parallel would race on."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from deploy_suite.fixtures.experiments.make_experiment import make_experiment
from deploy_suite.plugins.ledger import parallel_refusal


def _config(**attributes: Any) -> pytest.Config:
    return cast(pytest.Config, SimpleNamespace(option=SimpleNamespace(dist="no"), **attributes))


def test_a_deployment_under_xdist_is_refused_in_one_line_before_anything_is_written(
        pytester: pytest.Pytester, tmp_path: Path) -> None:
    exp = make_experiment(tmp_path / "scratch")
    before = sorted(p.name for p in exp.exp_root.iterdir())
    result = pytester.runpytest_subprocess("-n", "2", "--iter=0", f"--handoff={exp.handoff(0)}",
                                           f"--reports-dir={tmp_path / 'reports'}", timeout=120)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert errors == ["ERROR: a deployment cannot run under pytest-xdist (--dist load): its steps run in order in "
                      "one process, and their one ledger file per iteration would be raced on; fix: run it "
                      "without -n/--dist"], result.stderr.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    # No worker started a step: no deployment directory, no ledger, no report.
    assert sorted(p.name for p in exp.exp_root.iterdir()) == before
    assert not (tmp_path / "reports").exists()


def test_an_xdist_worker_is_refused_by_its_id() -> None:
    refusal = parallel_refusal(_config(workerinput={"workerid": "gw1"}))
    assert refusal is not None and refusal.startswith("a deployment cannot run in pytest-xdist worker gw1: ")


def test_a_run_in_one_process_is_not_refused() -> None:
    assert parallel_refusal(_config()) is None
    # Without pytest-xdist there is no ``dist`` option at all.
    assert parallel_refusal(cast(pytest.Config, SimpleNamespace(option=SimpleNamespace()))) is None
