"""Step 7: the OpenAI-compatible smoke test through a port-forward we own."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_suite import smoke
from deploy_suite.dgd import flag_value, load_dgd, split_args
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
                                                             for e in c.env) for c in dgd.components) or \
        _sidecar_direct_routing(manifests["deploy"])
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


def _containers(node: Any) -> Iterator[dict[str, Any]]:
    """Every container-shaped mapping (name + command/args/env) anywhere in the manifest."""
    if isinstance(node, dict):
        if "name" in node and any(k in node for k in ("command", "args", "env")):
            yield node
        for value in node.values():
            yield from _containers(value)
    elif isinstance(node, list):
        for value in node:
            yield from _containers(value)


def _sidecar_direct_routing(path: Path) -> bool:
    """Direct routing set on a container other than ``main`` (the gaie frontend sidecar): the DGD
    model reads only ``main``, but the spec says direct-routing *sidecars* need the instance id."""
    for doc in yaml.safe_load_all(path.read_text()):
        for c in _containers(doc):
            env = {str(e.get("name")): str(e.get("value")) for e in c.get("env") or []
                   if isinstance(e, dict) and "value" in e}
            tokens = split_args([str(t) for t in [*(c.get("command") or []), *(c.get("args") or [])]], env)
            if flag_value(tokens, ["--router-mode"]) == "direct" or env.get("DYN_ROUTER_MODE") == "direct":
                return True
    return False
