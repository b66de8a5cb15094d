"""Step 7: the OpenAI-compatible smoke test through a port-forward we own.

Three gates, as the spec writes them: reachability (any HTTP answer from ``/v1/models``, bound
30 x 2 s), model listed (``/v1/models`` lists the served model, bound 30 x 10 s, body saved to
``smoke/models_body.json``) and chat (exactly the spec's request, body saved to
``smoke/api_body.json``; success only if ``object == "chat.completion"``, ``choices`` is a
non-empty array and there is no ``error``). The bounds are the spec's; inside them we retry with
a short capped backoff instead of the reference's fixed 2 s / 10 s sleeps, so the harness reacts
as soon as the frontend does. The port-forward is re-established if it dies mid-test, and is
always stopped. ``smoke_test_artifact.json`` holds ``api_request``, ``api_response``, ``success``
(1 or 0) and both HTTP codes.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from deploy_suite import clock
from deploy_suite.errors import SuiteError, WaitTimeout
from deploy_suite.kube import Kube, Obj, PortForward
from deploy_suite.ledger import atomic_write_text

DEFAULT_PROMPT = "Simply output the phrase: NVIDIA Dynamo"
DIRECT_HEADER = "x-dynamo-worker-instance-id"
_INSTANCE_ID = re.compile(
    r"(?:instance[_ -]?id|worker[_ -]?id)[\"']?\s*[=:]\s*[\"']?(0x[0-9a-fA-F]+|[0-9]+|[0-9a-fA-F]{8,16})\b")


@dataclass(frozen=True)
class SmokeSettings:
    """Bounds from the spec (seconds); ``backoff_cap`` is how often we look inside them."""

    reach_attempts: int = 30
    reach_interval: float = 2.0
    list_attempts: int = 30
    list_interval: float = 10.0
    chat_timeout: float = 120.0
    backoff_cap: float = 0.25


@dataclass(frozen=True)
class Endpoint:
    kind: str  # "service" | "worker-pod"
    target: str  # "svc/<name>" | "pod/<name>"
    port: int = 8000
    worker_instance_id: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.target, "port": self.port,
                "worker_instance_id": self.worker_instance_id}


@dataclass
class SmokeResult:
    success: int = 0
    models_http_code: int | None = None
    api_http_code: int | None = None
    api_request: dict[str, Any] = field(default_factory=dict)
    api_response: Any = None
    gate: str = ""  # the gate that failed, or "" on success
    diagnosis: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    port_forward_restarts: int = 0

    def artifact(self) -> dict[str, Any]:
        return {"api_request": self.api_request, "api_response": self.api_response, "success": self.success,
                "models_http_code": self.models_http_code, "api_http_code": self.api_http_code}


def parse_instance_id(log_text: str) -> int | None:
    """The worker instance id from registration logs, as the decimal the header needs.

    gaie sidecars print it in hex (``0x85f0...`` or bare hex digits), the mocker in decimal; an
    all-digit value is read as decimal. The last registration in the log wins.
    """
    found = None
    for m in _INSTANCE_ID.finditer(log_text):
        raw = m.group(1)
        found = int(raw, 16) if raw.lower().startswith("0x") or not raw.isdigit() else int(raw)
    return found


def chat_request(served_model: str, prompt: str) -> dict[str, Any]:
    """Exactly the spec's request body."""
    return {"model": served_model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 100,
            "temperature": 0}


def find_endpoint(kube: Kube, namespace: str, dgd_name: str, direct_routing: bool,
                  frontend_service: str | None) -> Endpoint:
    """A frontend Service when there is one; otherwise (gaie) a ready worker pod's port 8000."""
    if frontend_service and kube.get_or_none("Service", frontend_service, namespace) is not None:
        return Endpoint("service", f"svc/{frontend_service}")
    pods, _ = kube.list_items("Pod", namespace, label_selector=f"nvidia.com/dynamo-graph-deployment-name={dgd_name}")
    workers = sorted((p for p in pods if _is_ready(p) and (p["metadata"].get("labels") or {}).get(
        "nvidia.com/dynamo-component-type") in {"worker", "decode", "main"}), key=lambda p: p["metadata"]["name"])
    if not workers:
        raise SuiteError(f"no frontend Service and no ready worker pod for DGD {dgd_name} in {namespace}")
    pod = workers[0]
    instance = None
    if direct_routing:
        for c in pod["spec"]["containers"]:
            instance = parse_instance_id(kube.pod_log(pod["metadata"]["name"], namespace, c["name"], tail=500))
            if instance is not None:
                break
    return Endpoint("worker-pod", f"pod/{pod['metadata']['name']}", worker_instance_id=instance)


def _is_ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


class _Forward:
    """Owns the port-forward; restarts it if it dies (bounded by the caller's gate)."""

    def __init__(self, kube: Kube, endpoint: Endpoint, namespace: str, kubectl: str) -> None:
        self.kube, self.endpoint, self.namespace, self.kubectl = kube, endpoint, namespace, kubectl
        self.pf: PortForward | None = None
        self.restarts = -1

    def url(self, timeout: float) -> str:
        if self.pf is None or not self.pf.alive():
            if self.pf is not None:
                self.pf.stop()
            self.pf = self.kube.port_forward(self.endpoint.target, self.namespace, self.endpoint.port,
                                             kubectl=self.kubectl)
            self.restarts += 1
            port = self.pf.wait_ready(timeout)
            return f"http://127.0.0.1:{port}"
        return f"http://127.0.0.1:{self.pf.local_port}"

    def stop(self) -> None:
        if self.pf is not None:
            self.pf.stop()


def _pause(seconds: float, stop: threading.Event | None = None) -> None:
    # Between HTTP probes (there is nothing to watch over HTTP): bounded, short, interruptible.
    (stop or threading.Event()).wait(seconds)


def run_smoke(kube: Kube, endpoint: Endpoint, namespace: str, served_model: str, deploy_root: Path,
              prompt: str = DEFAULT_PROMPT, settings: SmokeSettings | None = None,
              on_progress: Callable[[str], None] | None = None, kubectl: str = "kubectl") -> SmokeResult:
    s = settings or SmokeSettings()
    result = SmokeResult(api_request=chat_request(served_model, prompt))
    smoke_dir = deploy_root / "smoke"
    smoke_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("models_body.json", "api_body.json"):
        (smoke_dir / stale).unlink(missing_ok=True)  # a stale body must never satisfy a gate
    progress = on_progress or (lambda _m: None)
    fwd = _Forward(kube, endpoint, namespace, kubectl)
    started = clock.monotonic()
    try:
        with httpx.Client(timeout=httpx.Timeout(10.0, read=s.chat_timeout)) as http:
            # Gate 1: reachability; any HTTP answer means the forward works.
            base = _gate_reach(http, fwd, s, result, progress)
            result.timings["reachable_s"] = round(clock.monotonic() - started, 3)
            if base is None:
                return _finish(result, deploy_root, "reachability", "port-forward never became reachable within "
                               f"{s.reach_attempts} x {s.reach_interval:.0f}s")
            # Gate 2: the served model is listed (worker registration lags pod readiness).
            listed = _gate_listed(http, fwd, s, result, served_model, smoke_dir, progress)
            result.timings["model_listed_s"] = round(clock.monotonic() - started, 3)
            if not listed:
                return _finish(result, deploy_root, "model-listed", f"served model {served_model!r} never listed "
                               f"within {s.list_attempts} x {s.list_interval:.0f}s (last code "
                               f"{result.models_http_code})")
            # Gate 3: one chat completion, exactly the spec's request.
            headers = {"Content-Type": "application/json"}
            if endpoint.worker_instance_id is not None:
                headers[DIRECT_HEADER] = str(endpoint.worker_instance_id)
            resp = http.post(fwd.url(s.reach_interval * s.reach_attempts) + "/v1/chat/completions",
                             json=result.api_request, headers=headers)
            result.timings["chat_s"] = round(clock.monotonic() - started, 3)
            result.api_http_code = resp.status_code
            (smoke_dir / "api_body.json").write_bytes(resp.content)
            try:
                body = resp.json()
            except ValueError:
                body = {"raw": resp.text[:2000]}
            result.api_response = body
            return _judge(result, body, deploy_root, endpoint)
    except (httpx.HTTPError, WaitTimeout) as exc:
        return _finish(result, deploy_root, "transport", f"{type(exc).__name__}: {exc}")
    finally:
        result.port_forward_restarts = max(fwd.restarts, 0)
        fwd.stop()


def _gate_reach(http: httpx.Client, fwd: _Forward, s: SmokeSettings, result: SmokeResult,
                progress: Callable[[str], None]) -> str | None:
    deadline = clock.monotonic() + s.reach_attempts * s.reach_interval
    delay = 0.05
    while clock.monotonic() < deadline:
        try:
            base = fwd.url(max(1.0, deadline - clock.monotonic()))
            resp = http.get(base + "/v1/models")
            result.models_http_code = resp.status_code
            return base
        except (httpx.HTTPError, WaitTimeout) as exc:
            progress(f"smoke: waiting for the port-forward ({type(exc).__name__})")
        _pause(min(delay, max(0.0, deadline - clock.monotonic())))
        delay = min(delay * 2, s.backoff_cap)
    return None


def _gate_listed(http: httpx.Client, fwd: _Forward, s: SmokeSettings, result: SmokeResult, served_model: str,
                 smoke_dir: Path, progress: Callable[[str], None]) -> bool:
    deadline = clock.monotonic() + s.list_attempts * s.list_interval
    delay = 0.05
    while clock.monotonic() < deadline:
        try:
            resp = http.get(fwd.url(s.reach_interval * s.reach_attempts) + "/v1/models")
            result.models_http_code = resp.status_code
            (smoke_dir / "models_body.json").write_bytes(resp.content)
            if 200 <= resp.status_code < 300:
                ids = [m.get("id") for m in (resp.json().get("data") or []) if isinstance(m, dict)]
                if served_model in ids:
                    return True
                progress(f"smoke: /v1/models lists {ids or 'nothing'}; waiting for {served_model}")
            else:
                progress(f"smoke: /v1/models answered {resp.status_code}")
        except (httpx.HTTPError, ValueError, WaitTimeout) as exc:
            progress(f"smoke: /v1/models not answering ({type(exc).__name__}); re-establishing")
        _pause(min(delay, max(0.0, deadline - clock.monotonic())))
        delay = min(delay * 2, s.backoff_cap)
    return False


def _judge(result: SmokeResult, body: Any, deploy_root: Path, endpoint: Endpoint) -> SmokeResult:
    code = result.api_http_code or 0
    if not 200 <= code < 300:
        text = json.dumps(body)[:300]
        if code == 400 and endpoint.kind == "worker-pod" and endpoint.worker_instance_id is None:
            return _finish(result, deploy_root, "chat", f"chat endpoint answered 400 ({text}): the direct-routing "
                           f"header {DIRECT_HEADER} is missing (no worker instance id found in the registration "
                           "logs); the deployment itself may be fine")
        if code == 400 and "direct routing" in text.lower():
            return _finish(result, deploy_root, "chat", f"chat endpoint answered 400 naming direct routing: the "
                           f"{DIRECT_HEADER} header is missing or wrong")
        return _finish(result, deploy_root, "chat", f"chat endpoint answered HTTP {code}: {text}")
    ok = isinstance(body, dict) and body.get("object") == "chat.completion" and isinstance(
        body.get("choices"), list) and len(body["choices"]) > 0 and not body.get("error")
    if not ok:
        return _finish(result, deploy_root, "chat", "chat response failed the structural check (object "
                       "chat.completion, non-empty choices, no error): " + json.dumps(body)[:300])
    result.success = 1
    return _finish(result, deploy_root, "", "")


def _finish(result: SmokeResult, deploy_root: Path, gate: str, diagnosis: str) -> SmokeResult:
    result.gate = gate
    result.diagnosis = diagnosis
    _write_json(deploy_root / "smoke_test_artifact.json", result.artifact())
    return result
