"""Step 3: retire the previous iteration's DGD (iteration > 0), by exact name, namespace, context."""

from __future__ import annotations

import pytest

from deploy_suite import experiment, ledger, rollout
from deploy_suite.kube import Kube
from deploy_suite.runstate import RunState


def test_step3_retire_previous(run: RunState, kube: Kube) -> None:
    """Delete only the previous DGD, wait for it and its pods to go, write torn_down_at there."""
    change = experiment.update_manifest_context(run.exp_root, kube.context)  # before the first mutation
    if change is not None:
        run.add_evidence(manifest_context_update=change)
    prev = run.previous
    if prev is None:
        pytest.skip("iteration 0: no previous iteration to retire")
    # The previous iteration's own context, as the spec writes it (PREVIOUS_KUBE_CONTEXT).
    prev_kube = kube if prev.kube_context == kube.context else Kube(
        prev.kube_context, run.settings.kubeconfig, on_command=run.record_command)
    result = rollout.retire_previous(prev_kube, prev.namespace, prev.dgd_name, run.settings.timeouts.retire_s,
                                     on_progress=run.progress)
    ledger.write_torn_down_at(prev.ledger_path, result.deleted_at)
    run.ledger.set_section("retired_previous", {**result.as_dict(), "ledger": run.rel(prev.ledger_path)})
    run.add_evidence(**result.as_dict())
