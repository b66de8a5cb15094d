"""Step 2: read-only validation gates and GPU capacity (``deploy_suite.validate``).

Nothing is mutated on the cluster; compatibility patches touch only the run-scoped copies and
are recorded with their reason. Any blocker stops the run before step 3.
"""

from __future__ import annotations

from pathlib import Path

from deploy_suite import experiment, validate
from deploy_suite.inputs import contract_dgd_candidates
from deploy_suite.kube import Kube
from deploy_suite.runstate import RunState


def test_step2_validate(run: RunState, kube: Kube, namespace: str, manifests: dict[str, Path]) -> None:
    """Namespace, CRDs, dry-run, secrets by name, PVCs, images, pinned knobs, GPU ceiling, capacity."""
    prev = run.previous
    baseline = next((p for p in contract_dgd_candidates(run.workload.dgd_path, run.exp_root) if p.is_file()), None)
    live, live_names = experiment.other_live_gpus(run.exp_root, run.deploy_root, prev.root if prev else None)
    workload = dict(run.workload.data)
    if run.settings.storage_class:  # --storage-class overrides the workload's
        workload["kubernetes"] = {**(workload.get("kubernetes") or {}), "storage_class": run.settings.storage_class}
    report = validate.validate(kube, validate.ValidationInputs(
        namespace=namespace, deploy_path=manifests["deploy"],
        support_paths={k: v for k, v in manifests.items() if k != "deploy"},
        baseline_dgd_path=baseline, workload=workload, display_root=run.exp_root,
        retiring=(prev.namespace, prev.dgd_name) if prev and prev.kube_context == kube.context else None,
        other_live_gpus=live))
    for patch in report.patches:
        run.ledger.add_patch(patch.file, patch.change, patch.reason)
    for limitation in report.limitations:
        run.ledger.add_limitation(limitation)
    run.ledger.set_section("gpus_requested", report.gpus_requested)
    run.ledger.set_section("frontend_service", report.frontend_service)
    run.ledger.set_section("served_model", run.settings.served_model or report.served_model)
    run.ledger.set_section("capacity", report.capacity)
    run.ledger.set_section("preflight", {
        **report.evidence, "warnings": report.warnings, "limitations": report.limitations,
        "other_live_dgds": live_names, "capacity": (report.capacity or {}).get("capacity"),
        "pinned_ok": not any(b.cls == "pinned" for b in report.blockers),
        "blockers": [b.cls for b in report.blockers]})
    run.add_evidence(capacity=(report.capacity or {}).get("capacity"), blockers=len(report.blockers),
                     patches=len(report.patches), warnings=report.warnings)
    for blocker in report.blockers[:-1]:
        run.ledger.add_blocker(run.current or "step2_validate", blocker.cls, blocker.message, blocker.fix)
    if report.blockers:
        last = report.blockers[-1]
        run.block(last.cls, last.message if len(report.blockers) == 1 else
                  f"{last.message} (and {len(report.blockers) - 1} more blocker(s) in the ledger)", last.fix)
