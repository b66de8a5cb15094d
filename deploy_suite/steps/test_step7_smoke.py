"""Step 7: the OpenAI-compatible smoke test through a port-forward we own."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from deploy_suite import smoke
from deploy_suite.dgd import load_dgd
from deploy_suite.kube import Kube
from deploy_suite.runstate import RunState


def test_step7_smoke(run: RunState, kube: Kube, namespace: str, manifests: dict[str, Path]) -> None:
    """Reachability, model listed, one chat completion; smoke_test_artifact.json written."""
    dgd = load_dgd(manifests["deploy"])
    served = run.settings.served_model or run.ledger.data.get("served_model") or next(
        (c.served_model for c in dgd.components if c.is_worker and c.served_model), None)
    if not served:
        run.block("served-model", "no served model name found in the DGD", "pass --served-model NAME")
    direct = any(c.flag("--router-mode") == "direct" or any(e.name == "DYN_ROUTER_MODE" and e.value == "direct"
                                                             for e in c.env) for c in dgd.components)
    endpoint = smoke.find_endpoint(kube, namespace, dgd.name, direct, run.ledger.data.get("frontend_service"))
    t = run.settings.timeouts
    settings = smoke.SmokeSettings(t.smoke_reach_attempts, t.smoke_reach_interval_s, t.smoke_models_attempts,
                                   t.smoke_models_interval_s, t.smoke_request_timeout_s)
    result = smoke.run_smoke(kube, endpoint, namespace, served, run.deploy_root, run.settings.smoke_prompt,
                             settings, on_progress=run.progress, kubectl=shutil.which("kubectl") or "kubectl")
    run.ledger.set_section("endpoint", endpoint.as_dict())
    run.ledger.set_section("served_model", served)
    run.ledger.set_section("smoke", {
        "success": result.success, "models_http_code": result.models_http_code,
        "api_http_code": result.api_http_code, "gate": result.gate, "diagnosis": result.diagnosis,
        "timings": result.timings, "port_forward_restarts": result.port_forward_restarts,
        "artifact": run.rel(run.deploy_root / "smoke_test_artifact.json"),
        "bodies": [run.rel(run.deploy_root / "smoke" / n) for n in ("models_body.json", "api_body.json")
                   if (run.deploy_root / "smoke" / n).exists()]})
    run.add_evidence(success=result.success, gate=result.gate or "all passed", **result.timings)
    if not result.success:
        pytest.fail(f"smoke test failed at the {result.gate} gate: {result.diagnosis}", pytrace=False)
