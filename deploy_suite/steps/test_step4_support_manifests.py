"""Step 4: model-cache, then model-download, then model-validate (when handed over)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy_suite import rollout
from deploy_suite.errors import StepFailure, WaitTimeout
from deploy_suite.kube import Kube
from deploy_suite.runstate import RunState


def test_step4_support_manifests(run: RunState, kube: Kube, namespace: str, manifests: dict[str, Path]) -> None:
    """Apply support manifests in order; Jobs named from metadata.name; PVCs reach Bound."""
    order = rollout.applied_support_order(manifests)
    if not order:
        pytest.skip("no support manifests handed over")
    t = run.settings.timeouts
    jobs: list[dict[str, object]] = []
    claims: list[str] = []
    for kind, path in order:
        kube.apply_file(path, namespace, display=run.rel(path))
        new_claims = rollout.claims_in(path)
        claims += new_claims
        try:
            # Claims that bind on their own are awaited now, before any Job waits on them;
            # WaitForFirstConsumer claims bind when their first pod is scheduled.
            rollout.wait_pvcs_bound(kube, namespace, rollout.immediate_claims(kube, namespace, new_claims),
                                    t.pvc_bound_s, on_progress=run.progress)
        except WaitTimeout as exc:
            raise StepFailure(f"model-cache PVC never bound: {exc}; fix the storage class or "
                                      "provisioner (a dependency: waiting longer does not help)",
                                      "dependency") from exc
        bound = t.job_download_s if kind != "model-validate" else t.job_validate_s
        for job in rollout.jobs_in(path):
            try:
                result = rollout.run_job(kube, namespace, job, kind, bound, run.deploy_root / "logs",
                                         on_progress=run.progress)
            except StepFailure as exc:
                run.ledger.add_diagnostic({"step": "step4_support_manifests", "job": job, "message": str(exc),
                                           "log_excerpt": exc.log_excerpt[-2000:],
                                           "log_file": run.rel(run.deploy_root / "logs" / f"job-{job}.log")})
                raise
            jobs.append(result.as_dict())
    phases = {c: ((kube.get_or_none("PersistentVolumeClaim", c, namespace) or {}).get("status") or {}).get("phase")
              for c in claims}
    run.add_evidence(applied=[run.rel(p) for _, p in order], jobs=jobs, pvcs=phases)
