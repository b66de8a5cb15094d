"""Step 7: the OpenAI-compatible smoke test through a port-forward we own.

:func:`plan` decides what to test (the served model, whether the worker needs the direct-routing
header, the endpoint); :func:`run` runs the three gates and returns a :class:`SmokeResult` that
records itself in the ledger. The gates, as docs/procedure.md lists them (step 7, "Chat gate"): reachability (any HTTP
answer from ``/v1/models``, bound 30 x 2 s), model listed (``/v1/models`` lists the served model,
bound 30 x 10 s, body saved to ``smoke/models_body.json``) and chat (one fixed request, body
saved to ``smoke/api_body.json``; success only if ``object == "chat.completion"``, ``choices`` is
a non-empty array and there is no ``error``). Inside the bounds we retry with a short capped
backoff instead of fixed 2 s / 10 s sleeps, so the harness reacts as soon as the frontend does.
The port-forward is re-established if it dies mid-test, and is always stopped.
``smoke_test_artifact.json`` holds ``api_request``, ``api_response``, ``success`` (1 or 0) and
both HTTP codes.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from deploy_suite import clock, yamlio
from deploy_suite.access.kube import Kube, Obj
from deploy_suite.constants import LABEL_COMPONENT_TYPE, LABEL_DGD_NAME
from deploy_suite.errors import KubeError, StepBlocked, StepFailure, SuiteError, WaitTimeout
from deploy_suite.judges import membership
from deploy_suite.model import dgd, discovery, frontend, podspec
from deploy_suite.procedure.context import StepContext
from deploy_suite.procedure.settings import DEFAULT_SMOKE_PROMPT, Timeouts
from deploy_suite.procedure.validate import Preflight
from deploy_suite.record.ledger import Ledger, atomic_write_text
from deploy_suite.vocab import BlockerClass, FailureCategory

DEFAULT_PROMPT = DEFAULT_SMOKE_PROMPT
DIRECT_HEADER = "x-dynamo-worker-instance-id"
# The header's name before the ``x-dynamo-`` prefix: frontends of that time read only it, newer ones
# read the prefixed name first and this one as an alias, so both are sent with the same id
# (docs/operator-generations.md, "The worker instance id").
DIRECT_HEADER_ALIAS = "x-worker-instance-id"
# Where a log line prints a worker instance id, and in which base (docs/operator-generations.md):
# the base is the line's format, never guessed from the digits (a hex id can be all digits).
_ID_KEY = r"(?:instance[_ -]?id|worker[_ -]?id|lease[_ -]?id)[\"']?\s*[=:]\s*[\"']?"
_INSTANCE_ID_FORMATS: tuple[tuple[re.Pattern[str], int], ...] = (
    # etcd/discovery keys and dyn:// endpoint paths end in the lease id in hex: ".../generate:1b70511b8908ec".
    (re.compile(r"(?:dyn://|instances/)[\w./-]*:([0-9a-fA-F]{6,16})\b"), 16),
    # An explicit 0x prefix.
    (re.compile(_ID_KEY + r"0x([0-9a-fA-F]+)\b", re.I), 16),
    # key=value fields print the u64 in decimal, unless the value carries hex letters.
    (re.compile(_ID_KEY + r"([0-9]+)\b(?![a-fA-F])", re.I), 10),
    (re.compile(_ID_KEY + r"((?=[0-9]*[a-fA-F])[0-9a-fA-F]{6,16})\b", re.I), 16),
    # "Workers ready: [7587887029837065570]", "... for worker 7587887029837065570": decimal.
    (re.compile(r"(?:Workers ready: \[|for worker )([0-9]+)\b"), 10),
)
# Lines naming an event channel (1.6.1: "Registering event channel: ...", "EventChannelInstanceId {...}").
_EVENT_CHANNEL = re.compile(r"event[ _]?channel", re.I)
_BODIES = ("models_body.json", "api_body.json")
ARTIFACT = "smoke_test_artifact.json"


# How often gates 1 and 2 look inside their bounds (the bounds are the ``smoke_*`` timeouts).
BACKOFF_CAP = 0.25


@dataclass(frozen=True)
class Endpoint:
    kind: str  # "service" | "worker-pod"
    target: str  # "svc/<name>" | "pod/<name>"
    port: int = 8000
    worker_instance_id: int | None = None
    instance_source: str = ""  # where the id was read: "dynamoworkermetadatas/<name>" or "log/<container>"

    def as_dict(self) -> dict[str, Any]:
        found: dict[str, Any] = {"worker_instance_id": self.worker_instance_id}
        if self.instance_source:
            found["worker_instance_id_source"] = self.instance_source
        return {"kind": self.kind, "target": self.target, "port": self.port, **found}


@dataclass(frozen=True)
class SmokePlan:
    """What step 7 tests, decided before any HTTP request."""

    namespace: str
    dgd_name: str
    served_model: str
    direct_routing: bool
    endpoint: Endpoint
    deploy_root: Path
    prompt: str = DEFAULT_PROMPT
    timeouts: Timeouts = field(default_factory=Timeouts)  # the gates read the smoke_* bounds
    kubectl: str = "kubectl"


@dataclass
class SmokeResult:
    """What the gates found; records the ``endpoint``, ``served_model`` and ``smoke`` sections."""

    success: int = 0
    models_http_code: int | None = None
    api_http_code: int | None = None
    api_request: dict[str, Any] = field(default_factory=dict)
    api_response: Any = None
    gate: str = ""  # the gate that failed, or "" on success
    diagnosis: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    port_forward_restarts: int = 0
    chat_attempts: int = 0  # chat requests gate 3 sent (more than one: the model was not routable yet)
    endpoint: Endpoint | None = None
    served_model: str | None = None
    artifact_path: str = ""  # EXP_ROOT-relative, set by run()
    body_paths: list[str] = field(default_factory=list)  # EXP_ROOT-relative bodies that exist

    def artifact(self) -> dict[str, Any]:
        return {"api_request": self.api_request, "api_response": self.api_response, "success": self.success,
                "models_http_code": self.models_http_code, "api_http_code": self.api_http_code}

    def record(self, ledger: Ledger) -> Mapping[str, Any]:
        ledger.set_section("endpoint", self.endpoint.as_dict() if self.endpoint is not None else None)
        ledger.set_section("served_model", self.served_model)
        ledger.set_section("smoke", {
            "success": self.success, "models_http_code": self.models_http_code,
            "api_http_code": self.api_http_code, "gate": self.gate, "diagnosis": self.diagnosis,
            "timings": self.timings, "port_forward_restarts": self.port_forward_restarts,
            "chat_attempts": self.chat_attempts, "artifact": self.artifact_path, "bodies": list(self.body_paths)})
        return {"success": self.success, "gate": self.gate or "all passed", **self.timings}


class Forwarding(Protocol):
    """What the smoke test needs of a running ``kubectl port-forward`` (``Kube.port_forward``)."""

    @property
    def local_port(self) -> int | None: ...

    def wait_ready(self, timeout: float) -> int: ...

    def alive(self) -> bool: ...

    def stop(self) -> None: ...


# --- step 7's two calls ------------------------------------------------------------------------


def plan(run: StepContext, kube: Kube) -> SmokePlan:
    """The served model, direct routing and the endpoint; the deploy copy is parsed once, here.

    The served model is ``--served-model``, else what step 2 found, else the DGD's first worker's;
    without one nothing can be tested (a blocker, not a failure).
    """
    path = run.manifests["deploy"]
    documents = yamlio.load_all(path)
    model = dgd.from_documents(documents, str(path))
    preflight = run.result(Preflight)
    served = run.settings.served_model or (preflight.served_model if preflight else None) or next(
        (c.served_model for c in model.components if c.is_worker and c.served_model), None)
    if not served:
        raise StepBlocked(BlockerClass.SERVED_MODEL,
                          "no served model name found in the DGD", "pass --served-model NAME")
    direct = direct_routing(model, documents)
    endpoint = find_endpoint(kube, run.namespace, model, direct, preflight.frontend_service if preflight else None)
    return SmokePlan(
        namespace=run.namespace, dgd_name=model.name, served_model=served, direct_routing=direct,
        endpoint=endpoint, deploy_root=run.deploy_root, prompt=run.settings.smoke_prompt,
        timeouts=run.settings.timeouts, kubectl=shutil.which("kubectl") or "kubectl")


def run(run: StepContext, kube: Kube, plan: SmokePlan, transport: httpx.BaseTransport | None = None) -> SmokeResult:
    """The three gates; a result that did not pass all three stops the step (recorded first): blocked,
    class ``smoke``, never a failed attempt (docs/procedure.md, "Outcomes")."""
    result = run_smoke(kube, plan, on_progress=run.recorder.progress, transport=transport)
    result.artifact_path = run.rel(plan.deploy_root / ARTIFACT)
    result.body_paths = [run.rel(plan.deploy_root / "smoke" / n) for n in _BODIES
                         if (plan.deploy_root / "smoke" / n).exists()]
    if not result.success:
        raise StepFailure(f"smoke test failed at the {result.gate} gate: {result.diagnosis}", FailureCategory.SMOKE,
                          evidence=result.body_paths, result=result)
    return result


# --- what to test --------------------------------------------------------------------------------


def direct_routing(model: dgd.Dgd, documents: Sequence[Any]) -> bool:
    """Whether requests must name a worker (``--router-mode direct`` / ``DYN_ROUTER_MODE=direct``).

    Read on each component's ``main`` container and on its frontend sidecar as the pod runs it
    (v1alpha1 ``frontendSidecar: {image, args, ...}`` included: the container the operator builds,
    docs/operator-generations.md); any other container-shaped mapping of the manifest is looked at too.
    """
    if any(frontend.router_mode(c.tokens, c.env) == "direct" for c in model.components):
        return True
    if any(c.frontend_sidecar is not None and c.frontend_sidecar.router_mode == "direct" for c in model.components):
        return True
    for container in (c for doc in documents for c in _containers(doc)):
        env = {str(e.get("name")): str(e.get("value")) for e in container.get("env") or []
               if isinstance(e, dict) and "value" in e}
        tokens = podspec.split_args([str(t) for t in [*(container.get("command") or []),
                                                  *(container.get("args") or [])]], env)
        if podspec.flag_value(tokens, ["--router-mode"]) == "direct" or env.get("DYN_ROUTER_MODE") == "direct":
            return True
    return False


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


def parse_instance_id(log_text: str) -> int | None:
    """The worker instance id from registration logs, as the decimal the header needs.

    Each line's format says the base (:data:`_INSTANCE_ID_FORMATS`): the same process prints one id
    in hex in a discovery key and in decimal in a key=value field. The last id in the log wins. A
    line about an event channel is skipped: its ``instance_id`` is the channel's, not the worker's
    (docs/operator-generations.md).
    """
    found: tuple[int, int] | None = None  # (offset in the log, id)
    offset = 0
    for line in log_text.splitlines(keepends=True):
        if not _EVENT_CHANNEL.search(line):
            for pattern, base in _INSTANCE_ID_FORMATS:
                for m in pattern.finditer(line):
                    if found is None or offset + m.start() >= found[0]:
                        found = (offset + m.start(), int(m.group(1), base))
        offset += len(line)
    return found[1] if found else None


def chat_request(served_model: str, prompt: str) -> dict[str, Any]:
    """The one chat request of gate 3 (fixed fields, so runs compare)."""
    return {"model": served_model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 100,
            "temperature": 0}


def find_endpoint(kube: Kube, namespace: str, model: dgd.Dgd, direct_routing: bool,
                  frontend_service: str | None) -> Endpoint:
    """A frontend Service when there is one; otherwise (gaie) port 8000 of a ready pod running a
    frontend sidecar (a decode or aggregated worker's before a prefill worker's), else of a ready
    worker pod. With direct routing, the instance id from that pod's logs, the sidecar's first."""
    if frontend_service and kube.get_or_none("Service", frontend_service, namespace) is not None:
        return Endpoint("service", f"svc/{frontend_service}")
    pods, _ = kube.list_items("Pod", namespace, label_selector=f"{LABEL_DGD_NAME}={model.name}")
    ready = sorted((p for p in pods if _is_ready(p)), key=lambda p: p["metadata"]["name"])
    candidates = [(p, c.frontend_sidecar.container) for c in model.sidecar_components() if c.frontend_sidecar
                  for p in ready if membership.belongs(p, model.name, c.name)]
    types = {p["metadata"]["name"]: (p["metadata"].get("labels") or {}).get(LABEL_COMPONENT_TYPE) for p in ready}
    candidates += sorted(((p, "") for p in ready if types[p["metadata"]["name"]] in dgd.WORKER_TYPES),
                         key=lambda found: types[found[0]["metadata"]["name"]] == "prefill")
    if not candidates:
        raise SuiteError(f"no frontend Service and no ready worker pod (with a frontend sidecar or not) for DGD "
                         f"{model.name} in {namespace}")
    pod, sidecar = candidates[0]
    instance, source = _discovered_instance(kube, namespace, pod) if direct_routing else (None, "")
    if direct_routing and instance is None:
        names = [str(c["name"]) for c in pod["spec"]["containers"]]
        for name in sorted(names, key=lambda n: n != sidecar):
            instance = parse_instance_id(kube.pod_log(pod["metadata"]["name"], namespace, name, tail=500))
            if instance is not None:
                source = f"log/{name}"
                break
    return Endpoint("worker-pod", f"pod/{pod['metadata']['name']}", worker_instance_id=instance,
                    instance_source=source if instance is not None else "")


def _discovered_instance(kube: Kube, namespace: str, pod: Obj) -> tuple[int | None, str]:
    """The id of the pod's worker as Kubernetes discovery publishes it (the pod's
    ``DynamoWorkerMetadata``), or None: no such CRD or object (etcd discovery, older operators) or
    no right to list it; the registration logs are read then."""
    try:
        objs, _ = kube.list_items(discovery.KIND, namespace)
    except KubeError:
        return None, ""
    instances = discovery.generate_instances(objs, pod)
    if not instances:
        return None, ""
    ident, name = instances[0]
    return ident, f"{discovery.PLURAL}/{name}"


def _is_ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


# --- the gates -----------------------------------------------------------------------------------


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


class _Forward:
    """Owns the port-forward; restarts it if it dies (bounded by the caller's gate)."""

    def __init__(self, kube: Kube, endpoint: Endpoint, namespace: str, kubectl: str) -> None:
        self.kube, self.endpoint, self.namespace, self.kubectl = kube, endpoint, namespace, kubectl
        self.pf: Forwarding | None = None
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

    def renew(self) -> None:
        """Replace a forward that is alive but whose tunnel is dead: after "lost connection to pod"
        kubectl keeps listening and drops every connection; only a new process recovers."""
        self.stop()
        self.pf = None


# Consecutive connections kubectl accepted and then dropped before the forward is renewed.
DEAD_TUNNEL_AFTER = 5


def run_smoke(kube: Kube, plan: SmokePlan, *, on_progress: Callable[[str], None] | None = None,
              transport: httpx.BaseTransport | None = None) -> SmokeResult:
    """The three gates against ``plan.endpoint``; ``transport`` replaces the network (unit tests)."""
    s, endpoint, served_model, deploy_root = plan.timeouts, plan.endpoint, plan.served_model, plan.deploy_root
    result = SmokeResult(api_request=chat_request(served_model, plan.prompt), endpoint=endpoint,
                         served_model=served_model)
    smoke_dir = deploy_root / "smoke"
    smoke_dir.mkdir(parents=True, exist_ok=True)
    for stale in _BODIES:
        (smoke_dir / stale).unlink(missing_ok=True)  # a stale body must never satisfy a gate
    progress = on_progress or (lambda _m: None)
    fwd = _Forward(kube, endpoint, plan.namespace, plan.kubectl)
    started = clock.monotonic()
    try:
        with httpx.Client(timeout=httpx.Timeout(10.0, read=s.smoke_request_timeout_s), transport=transport) as http:
            # Gate 1: reachability; any HTTP answer means the forward works.
            base = _gate_reach(http, fwd, s, result, progress)
            result.timings["reachable_s"] = round(clock.monotonic() - started, 3)
            if base is None:
                return _finish(result, deploy_root, "reachability", "port-forward never became reachable within "
                               f"{s.smoke_reach_attempts} x {s.smoke_reach_interval_s:.0f}s")
            # Gate 2: the served model is listed (worker registration lags pod readiness).
            listed = _gate_listed(http, fwd, s, result, served_model, smoke_dir=smoke_dir, progress=progress)
            result.timings["model_listed_s"] = round(clock.monotonic() - started, 3)
            if not listed:
                return _finish(result, deploy_root, "model-listed", f"served model {served_model!r} never listed "
                               f"within {s.smoke_models_attempts} x {s.smoke_models_interval_s:.0f}s (last code "
                               f"{result.models_http_code})")
            # Gate 3: one chat completion (asked again only while the model is not routable yet).
            headers = {"Content-Type": "application/json"}
            if endpoint.worker_instance_id is not None:
                headers[DIRECT_HEADER] = headers[DIRECT_HEADER_ALIAS] = str(endpoint.worker_instance_id)
            body = _gate_chat(http, fwd, s, result, headers, smoke_dir=smoke_dir, progress=progress)
            result.timings["chat_s"] = round(clock.monotonic() - started, 3)
            return _judge(result, body, deploy_root, endpoint)
    except (httpx.HTTPError, WaitTimeout) as exc:
        return _finish(result, deploy_root, "transport", f"{type(exc).__name__}: {exc}")
    finally:
        result.port_forward_restarts = max(fwd.restarts, 0)
        fwd.stop()


def _gate_reach(http: httpx.Client, fwd: _Forward, s: Timeouts, result: SmokeResult,
                progress: Callable[[str], None]) -> str | None:
    poll = clock.Poll(s.smoke_reach_attempts * s.smoke_reach_interval_s, cap=BACKOFF_CAP)
    dropped = 0
    for _ in poll:
        try:
            base = fwd.url(max(1.0, poll.remaining()))
            resp = http.get(base + "/v1/models")
            result.models_http_code = resp.status_code
            return base
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            dropped += 1
            progress(f"smoke: waiting for the port-forward ({type(exc).__name__})")
            if dropped >= DEAD_TUNNEL_AFTER:
                progress("smoke: the port-forward accepts connections but drops them; restarting it")
                fwd.renew()
                dropped = 0
        except (httpx.HTTPError, WaitTimeout) as exc:
            dropped = 0
            progress(f"smoke: waiting for the port-forward ({type(exc).__name__})")
    return None


def _gate_listed(http: httpx.Client, fwd: _Forward, s: Timeouts, result: SmokeResult, served_model: str, *,
                 smoke_dir: Path, progress: Callable[[str], None]) -> bool:
    for _ in clock.Poll(s.smoke_models_attempts * s.smoke_models_interval_s, cap=BACKOFF_CAP):
        try:
            resp = http.get(fwd.url(s.smoke_reach_interval_s * s.smoke_reach_attempts) + "/v1/models")
            result.models_http_code = resp.status_code
            (smoke_dir / "models_body.json").write_bytes(resp.content)
            if 200 <= resp.status_code < 300:
                listing = resp.json()
                data = listing.get("data") if isinstance(listing, dict) else None
                ids = [m.get("id") for m in data or [] if isinstance(m, dict)]
                if served_model in ids:
                    return True
                progress(f"smoke: /v1/models lists {ids or 'nothing'}; waiting for {served_model}")
            else:
                progress(f"smoke: /v1/models answered {resp.status_code}")
        except (httpx.HTTPError, ValueError, WaitTimeout) as exc:
            progress(f"smoke: /v1/models not answering ({type(exc).__name__}); re-establishing")
    return False


def _not_ready_yet(code: int, body: Any) -> bool:
    """What a frontend answers while a listed model is not routable yet (docs/operator-generations.md):
    503 "Model not ready", or a 500, or a 404 "not found" for seconds right after registration."""
    if code in {500, 503}:
        return True
    return code == 404 and any(w in json.dumps(body).lower() for w in ("not ready", "not found"))


def _gate_chat(http: httpx.Client, fwd: _Forward, s: Timeouts, result: SmokeResult, headers: dict[str, str], *,
               smoke_dir: Path, progress: Callable[[str], None]) -> Any:
    """The chat request; repeated with backoff for at most ``s.smoke_chat_not_ready_s`` seconds while the
    answer says the model is not routable yet (each answer counted in ``result.chat_attempts``)."""
    poll = clock.Poll(s.smoke_chat_not_ready_s, first=0.25, cap=4.0, at_least_once=True)
    body: Any = None
    for _ in poll:
        resp = http.post(fwd.url(s.smoke_reach_interval_s * s.smoke_reach_attempts) + "/v1/chat/completions",
                         json=result.api_request, headers=headers)
        result.api_http_code = resp.status_code
        result.chat_attempts += 1
        (smoke_dir / "api_body.json").write_bytes(resp.content)
        try:
            body = resp.json()
        except ValueError:
            body = {"raw": resp.text[:2000]}
        result.api_response = body
        if not _not_ready_yet(resp.status_code, body) or poll.expired():
            return body
        progress(f"smoke: chat answered {resp.status_code} ({json.dumps(body)[:120]}); the listed model may not "
                 "be routable yet, asking again")
    return body  # not reached: the poll ends only after an answer judged above


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
        if _not_ready_yet(code, body):
            return _finish(result, deploy_root, "chat", f"the served model is listed but chat still answered HTTP "
                           f"{code} after {result.chat_attempts} requests: a worker registered but cannot serve "
                           f"({text})")
        return _finish(result, deploy_root, "chat", f"chat endpoint answered HTTP {code}: {text}")
    # The procedure's check is jq's `(.error | not)`: only null, false or no key pass. An empty
    # string, 0 or {} is truthy in jq, so `error: ""` fails the gate (Python's `not` would pass it).
    error = body.get("error") if isinstance(body, dict) else None
    ok = isinstance(body, dict) and body.get("object") == "chat.completion" and isinstance(
        body.get("choices"), list) and len(body["choices"]) > 0 and (error is None or error is False)
    if not ok:
        return _finish(result, deploy_root, "chat", "chat response failed the structural check (object "
                       "chat.completion, non-empty choices, no error): " + json.dumps(body)[:300])
    result.success = 1
    return _finish(result, deploy_root, "", "")


def _finish(result: SmokeResult, deploy_root: Path, gate: str, diagnosis: str) -> SmokeResult:
    result.gate = gate
    result.diagnosis = diagnosis
    _write_json(deploy_root / ARTIFACT, result.artifact())
    return result
