"""Step 5: apply only applied_manifests/deploy.yaml (all its documents)."""

from __future__ import annotations

from pathlib import Path

from deploy_suite import experiment, rollout
from deploy_suite.dgd import load_dgd
from deploy_suite.kube import Kube
from deploy_suite.runstate import RunState


def test_step5_apply(run: RunState, kube: Kube, namespace: str, manifests: dict[str, Path]) -> None:
    """Apply the run-scoped DGD; record gpus_requested and the cleanup command."""
    budget = run.workload.max_failed_deploys
    spent = experiment.failed_attempts_so_far(run.exp_root)
    if budget is not None and spent >= budget:
        run.block("budget", f"failed-deploy budget exhausted: {spent} failed attempts recorded, "
                  f"budgets.max_failed_deploys is {budget:g}", "ask the user for more budget or stop the experiment")
    dgd = load_dgd(manifests["deploy"])
    applied = rollout.apply_deploy(kube, namespace, manifests["deploy"], run.rel(manifests["deploy"]))
    run.ledger.set_section("gpus_requested", dgd.total_gpus())
    run.ledger.add_cleanup_command(
        f"kubectl --context {kube.context} delete dynamographdeployment {dgd.name} -n {namespace}")
    run.add_evidence(applied=applied, gpus_requested=dgd.total_gpus(), failed_attempts_so_far=spent)
