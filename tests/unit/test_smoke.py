"""Step 7's library (deploy_suite.procedure.smoke) at our own boundary: no cluster, no network, no sleeping.

HTTP goes through ``httpx.MockTransport`` (a handler scripts the frontend), the port-forward and
the Kubernetes reads are small fakes, and a :class:`deploy_suite.clock.FakeClock` is installed so
that the gates' retries and bounds run instantly and their timings are exact.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from deploy_suite import clock, yamlio
from deploy_suite.constants import LABEL_COMPONENT_TYPE, LABEL_DGD_NAME
from deploy_suite.errors import Forbidden, KubeError, NotFound, StepBlocked, StepFailure, SuiteError, WaitTimeout
from deploy_suite.model.dgd import parse_dgd
from deploy_suite.procedure import smoke
from deploy_suite.procedure.context import StepContext
from deploy_suite.procedure.settings import Settings, Timeouts
from deploy_suite.record import ledger as ledger_mod
from tests.unit import lifecycles

MODEL = "qwen3"
SMALL = Timeouts(smoke_reach_attempts=5, smoke_reach_interval_s=1.0, smoke_models_attempts=3,
                 smoke_models_interval_s=1.0)
OK_CHAT = {"id": "c1", "object": "chat.completion", "choices": [{"index": 0, "message": {"content": "NVIDIA Dynamo"}}]}
Handler = Callable[[httpx.Request], httpx.Response]


# ------------------------------------------------------------------ fakes


@dataclass
class FakeForward:
    """A port-forward: ready at once (or never), alive until stopped or killed."""

    port: int
    ready: bool = True
    local_port: int | None = None
    dead: bool = False
    stops: int = 0

    def wait_ready(self, timeout: float) -> int:
        if not self.ready:
            self.dead = True  # kubectl never printed its port: PortForward stops it
            raise WaitTimeout("kubectl port-forward to listen", timeout, "no output")
        self.local_port = self.port
        return self.port

    def alive(self) -> bool:
        return not self.dead

    def stop(self) -> None:
        self.stops += 1
        self.dead = True


@dataclass
class FakeKube:
    """The few Kube calls step 7 makes: Service lookup, pod list, pod logs, port-forward."""

    forwards: list[FakeForward] = field(default_factory=lambda: [FakeForward(40001)])
    services: set[str] = field(default_factory=set)
    pods: list[dict[str, Any]] = field(default_factory=list)
    logs: dict[tuple[str, str], str] = field(default_factory=dict)
    discovery: list[dict[str, Any]] | KubeError = field(default_factory=lambda: NotFound("no such kind"))
    started: list[FakeForward] = field(default_factory=list)
    forward_calls: list[tuple[str, str, int, str]] = field(default_factory=list)

    def port_forward(self, target: str, namespace: str, remote_port: int, local_port: int = 0,
                     kubectl: str = "kubectl") -> FakeForward:
        self.forward_calls.append((target, namespace, remote_port, kubectl))
        index = len(self.started)
        forward = self.forwards[index] if index < len(self.forwards) else FakeForward(40001 + index)
        self.started.append(forward)
        return forward

    def get_or_none(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        assert kind == "Service"
        return {"metadata": {"name": name}} if name in self.services else None

    def list_items(self, kind: str, namespace: str | None = None,
                   label_selector: str | None = None) -> tuple[list[dict[str, Any]], str]:
        if kind == "DynamoWorkerMetadata":
            if isinstance(self.discovery, KubeError):
                raise self.discovery
            return self.discovery, "1"
        assert kind == "Pod"
        assert label_selector is not None
        wanted = label_selector.split("=", 1)[1]
        return [p for p in self.pods if p["metadata"]["labels"].get(LABEL_DGD_NAME) == wanted], "1"

    def pod_log(self, name: str, namespace: str, container: str | None = None, tail: int = 50) -> str:
        return self.logs.get((name, container or ""), "")


def pod(name: str, ctype: str = "worker", ready: bool = True, dgd_name: str = "demo",
        containers: tuple[str, ...] = ("main",)) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {LABEL_DGD_NAME: dgd_name, LABEL_COMPONENT_TYPE: ctype}},
            "spec": {"containers": [{"name": c} for c in containers]},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


class Frontend:
    """A scripted OpenAI frontend: ``/v1/models`` answers in turn (the last repeats), one chat answer."""

    def __init__(self, models: list[Any] | None = None,
                 chat: httpx.Response | list[httpx.Response] | None = None) -> None:
        self.models = models if models is not None else [listing(MODEL)]
        self.chat = chat if chat is not None else httpx.Response(200, json=OK_CHAT)  # a list: in turn, the last repeats
        self.requests: list[httpx.Request] = []
        self.models_calls = 0
        self.on_models: Callable[[int], None] = lambda _n: None

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path == "/v1/models":
            answer = self.models[min(self.models_calls, len(self.models) - 1)]
            self.models_calls += 1
            self.on_models(self.models_calls)
            if isinstance(answer, Exception):
                raise answer
            return answer if isinstance(answer, httpx.Response) else httpx.Response(200, json=answer)
        assert request.url.path == "/v1/chat/completions"
        if isinstance(self.chat, list):
            return self.chat[min(len(self.chats) - 1, len(self.chat) - 1)]
        return self.chat

    @property
    def chats(self) -> list[httpx.Request]:
        return [r for r in self.requests if r.url.path == "/v1/chat/completions"]


def listing(*ids: str) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": i, "object": "model"} for i in ids]}


def refused() -> httpx.ConnectError:
    return httpx.ConnectError("connection refused")


SERVICE = smoke.Endpoint("service", "svc/demo-frontend")


def go(tmp_path: Path, frontend: Handler, kube: FakeKube | None = None, endpoint: smoke.Endpoint = SERVICE,
       settings: Timeouts = SMALL, progress: list[str] | None = None) -> smoke.SmokeResult:
    lines = progress if progress is not None else []
    plan = smoke.SmokePlan("ns", "demo", MODEL, False, endpoint, tmp_path, "say hi", settings, "/bin/kubectl")
    return smoke.run_smoke(kube or FakeKube(), plan, on_progress=lines.append,  # type: ignore[arg-type]
                           transport=httpx.MockTransport(frontend))


def artifact(tmp_path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((tmp_path / smoke.ARTIFACT).read_text())
    return data


# ------------------------------------------------------------------ all three gates pass


def test_all_gates_pass_and_the_artifact_and_bodies_are_written(tmp_path: Path, fake_clock: clock.FakeClock) -> None:
    frontend, kube = Frontend(), FakeKube()
    result = go(tmp_path, frontend, kube)
    assert (result.success, result.gate, result.diagnosis) == (1, "", "")
    assert (result.models_http_code, result.api_http_code) == (200, 200)
    assert result.timings == {"reachable_s": 0.0, "model_listed_s": 0.0, "chat_s": 0.0}
    assert result.port_forward_restarts == 0 and fake_clock.slept == []
    # The one chat request, its fields fixed; no direct-routing header without an instance id.
    chat = frontend.chats[0]
    assert json.loads(chat.content) == {"model": MODEL, "messages": [{"role": "user", "content": "say hi"}],
                                        "max_tokens": 100, "temperature": 0}
    assert smoke.DIRECT_HEADER not in chat.headers and chat.headers["content-type"] == "application/json"
    assert str(chat.url) == "http://127.0.0.1:40001/v1/chat/completions"
    assert artifact(tmp_path) == {"api_request": json.loads(chat.content), "api_response": OK_CHAT, "success": 1,
                                  "models_http_code": 200, "api_http_code": 200}
    assert json.loads((tmp_path / "smoke" / "models_body.json").read_text()) == listing(MODEL)
    assert json.loads((tmp_path / "smoke" / "api_body.json").read_text()) == OK_CHAT
    # The port-forward we own went to the endpoint's port with the given kubectl, and was stopped.
    assert kube.forward_calls == [("svc/demo-frontend", "ns", 8000, "/bin/kubectl")]
    assert kube.started[0].stops == 1


def test_stale_bodies_from_an_earlier_run_never_satisfy_a_gate(tmp_path: Path, fake_clock: clock.FakeClock) -> None:
    (tmp_path / "smoke").mkdir()
    (tmp_path / "smoke" / "api_body.json").write_text(json.dumps(OK_CHAT))
    (tmp_path / "smoke" / "models_body.json").write_text(json.dumps(listing(MODEL)))
    result = go(tmp_path, Frontend(models=[refused()]))
    assert result.gate == "reachability"
    assert not (tmp_path / "smoke" / "api_body.json").exists()
    assert not (tmp_path / "smoke" / "models_body.json").exists()


# ------------------------------------------------------------------ gate 1: reachability


def test_reachability_retries_with_capped_backoff_until_an_answer(tmp_path: Path,
                                                                    fake_clock: clock.FakeClock) -> None:
    lines: list[str] = []
    frontend = Frontend(models=[refused(), refused(), refused(), refused(), refused(), listing(MODEL)])
    result = go(tmp_path, frontend, progress=lines)
    assert result.success == 1
    assert fake_clock.slept == [0.05, 0.1, 0.2, 0.25, 0.25]
    assert result.timings["reachable_s"] == 0.85
    assert lines.count("smoke: waiting for the port-forward (ConnectError)") == 5


def test_any_http_answer_passes_reachability(tmp_path: Path, fake_clock: clock.FakeClock) -> None:
    frontend = Frontend(models=[httpx.Response(503), listing(MODEL)])
    result = go(tmp_path, frontend)
    assert result.success == 1 and frontend.models_calls == 2
    assert fake_clock.slept == []  # gate 2 asked again at once: reachability needs no pause


def test_reachability_gives_up_at_its_bound(tmp_path: Path, fake_clock: clock.FakeClock) -> None:
    frontend = Frontend(models=[refused()])
    result = go(tmp_path, frontend)
    assert (result.success, result.gate) == (0, "reachability")
    assert result.diagnosis == "port-forward never became reachable within 5 x 1s"
    assert result.timings == {"reachable_s": 5.0} and sum(fake_clock.slept) == pytest.approx(5.0)
    assert frontend.chats == [] and result.models_http_code is None
    assert artifact(tmp_path)["success"] == 0 and artifact(tmp_path)["api_response"] is None


def test_a_port_forward_that_never_listens_is_restarted_within_the_bound(tmp_path: Path,
                                                                          fake_clock: clock.FakeClock) -> None:
    lines: list[str] = []
    kube = FakeKube(forwards=[FakeForward(40001, ready=False), FakeForward(40002)])
    result = go(tmp_path, Frontend(), kube, progress=lines)
    assert result.success == 1 and result.port_forward_restarts == 1
    assert lines == ["smoke: waiting for the port-forward (WaitTimeout)"]
    assert kube.started[0].dead and kube.started[1].stops == 1
    assert fake_clock.slept == [0.05]


def test_a_forward_that_accepts_but_drops_every_connection_is_renewed(tmp_path: Path,
                                                                        fake_clock: clock.FakeClock) -> None:
    # kubectl after "lost connection to pod": still listening, every connection closed unanswered.
    lines: list[str] = []
    drops = [httpx.RemoteProtocolError("Server disconnected without sending a response.")] * smoke.DEAD_TUNNEL_AFTER
    kube = FakeKube(forwards=[FakeForward(40001), FakeForward(40002)])
    result = go(tmp_path, Frontend(models=[*drops, listing(MODEL)]), kube,
                settings=Timeouts(smoke_models_attempts=5, smoke_models_interval_s=1.0, smoke_request_timeout_s=5.0),
                progress=lines)
    assert result.success == 1 and result.port_forward_restarts == 1
    assert kube.started[0].stops == 1 and len(kube.started) == 2
    assert "smoke: the port-forward accepts connections but drops them; restarting it" in lines


# ------------------------------------------------------------------ gate 2: the model is listed


def test_a_model_listed_late_passes_and_the_wait_is_timed(tmp_path: Path, fake_clock: clock.FakeClock) -> None:
    lines: list[str] = []
    frontend = Frontend(models=[listing(), listing(), listing("other"), listing("other", MODEL)])
    result = go(tmp_path, frontend, progress=lines)
    assert result.success == 1
    # Gate 1's answer is not reused by gate 2: it asks again, then three more times.
    assert frontend.models_calls == 4 and fake_clock.slept == [0.05, 0.1]
    assert result.timings == {"reachable_s": 0.0, "model_listed_s": 0.15, "chat_s": 0.15}
    assert lines == ["smoke: /v1/models lists nothing; waiting for qwen3",
                     "smoke: /v1/models lists ['other']; waiting for qwen3"]
    assert json.loads((tmp_path / "smoke" / "models_body.json").read_text()) == listing("other", MODEL)


def test_a_model_never_listed_fails_gate_2_and_no_chat_is_sent(tmp_path: Path, fake_clock: clock.FakeClock) -> None:
    frontend = Frontend(models=[listing()])
    result = go(tmp_path, frontend)
    assert (result.success, result.gate) == (0, "model-listed")
    assert result.diagnosis == "served model 'qwen3' never listed within 3 x 1s (last code 200)"
    assert result.timings["model_listed_s"] == pytest.approx(3.0)
    assert frontend.chats == [] and result.api_http_code is None
    assert artifact(tmp_path) == {"api_request": smoke.chat_request(MODEL, "say hi"), "api_response": None,
                                  "success": 0, "models_http_code": 200, "api_http_code": None}
    assert json.loads((tmp_path / "smoke" / "models_body.json").read_text()) == listing()
    assert not (tmp_path / "smoke" / "api_body.json").exists()


@pytest.mark.parametrize(("bad", "line"), [
    (httpx.Response(503, text="warming up"), "smoke: /v1/models answered 503"),
    (httpx.Response(200, text="<html>not json</html>"),
     "smoke: /v1/models not answering (JSONDecodeError); re-establishing"),
    (httpx.Response(200, json=["not", "an", "object"]), "smoke: /v1/models lists nothing; waiting for qwen3"),
    (refused(), "smoke: /v1/models not answering (ConnectError); re-establishing"),
])
def test_gate_2_keeps_asking_through_errors_and_odd_bodies(tmp_path: Path, fake_clock: clock.FakeClock,
                                                           bad: Any, line: str) -> None:
    lines: list[str] = []
    frontend = Frontend(models=[listing(), listing(), bad, listing(MODEL)])
    result = go(tmp_path, frontend, progress=lines)
    assert result.success == 1 and result.models_http_code == 200
    assert lines == ["smoke: /v1/models lists nothing; waiting for qwen3", line]
    assert fake_clock.slept == [0.05, 0.1]


def test_a_port_forward_that_dies_mid_test_is_restarted(tmp_path: Path, fake_clock: clock.FakeClock) -> None:
    kube = FakeKube(forwards=[FakeForward(40001), FakeForward(40002)])
    frontend = Frontend(models=[listing(), listing(MODEL)])

    def kill_first(calls: int) -> None:
        if calls == 1:
            kube.started[0].dead = True  # kubectl exited after answering gate 1

    frontend.on_models = kill_first
    result = go(tmp_path, frontend, kube)
    assert result.success == 1 and result.port_forward_restarts == 1
    assert [r.url.port for r in frontend.requests] == [40001, 40002, 40002]
    assert [f.stops for f in kube.started] == [1, 1]  # the dead one and the last one both stopped


# ------------------------------------------------------------------ gate 3: one chat completion


@pytest.mark.parametrize(("answer", "diagnosis"), [
    (httpx.Response(500, json={"error": {"message": "boom"}}),
     'the served model is listed but chat still answered HTTP 500 after '),
    (httpx.Response(401, json={"error": {"message": "no"}}), 'chat endpoint answered HTTP 401: {"error": '),
    (httpx.Response(200, json={"object": "chat.completion", "error": {"message": "bad"}, "choices": [{}]}),
     "structural check"),
    (httpx.Response(200, json={"object": "chat.completion"}), "structural check"),
    (httpx.Response(200, json={"object": "chat.completion", "choices": []}), "structural check"),
    (httpx.Response(200, json={"object": "text_completion", "choices": [{}]}), "structural check"),
    (httpx.Response(200, json=[OK_CHAT]), "structural check"),
    (httpx.Response(400, json={"message": "bad request"}), "chat endpoint answered HTTP 400"),
])
def test_the_chat_gate_judges_the_answer(tmp_path: Path, fake_clock: clock.FakeClock, answer: httpx.Response,
                                         diagnosis: str) -> None:
    result = go(tmp_path, Frontend(chat=answer))
    assert (result.success, result.gate) == (0, "chat")
    assert diagnosis in result.diagnosis
    assert result.api_http_code == answer.status_code and result.api_response == answer.json()
    assert json.loads((tmp_path / "smoke" / "api_body.json").read_text()) == answer.json()
    assert artifact(tmp_path)["api_response"] == answer.json() and artifact(tmp_path)["success"] == 0


# The procedure's structural check is `jq -e '... and (.error | not)'`. jq's `not` is true only for
# null and false: `"" | not`, `0 | not` and `{} | not` are false, so `error: ""` fails the procedure's
# check, as issue 13 says (`jq -n '"" | not'` prints false), where Python's `not ""` let it pass. The gate
# does what jq does: these cases pin that decision, each checked against jq's own answer when jq exists.
JQ_CHECK = '.object == "chat.completion" and (.choices | type == "array" and length > 0) and (.error | not)'


@pytest.mark.parametrize(("error", "passes"), [
    (None, True), (False, True), ("", False), (0, False), ({}, False), ([], False), ("boom", False),
], ids=["null", "false", "empty-string", "zero", "empty-object", "empty-list", "message"])
def test_the_chat_gate_judges_error_like_the_procedures_jq_check(tmp_path: Path, fake_clock: clock.FakeClock,
                                                                 error: Any, passes: bool) -> None:
    body = {**OK_CHAT, "error": error}
    jq = shutil.which("jq")
    if jq is not None:  # the procedure's own check, as its reference sequence runs it
        verdict = subprocess.run([jq, "-e", JQ_CHECK], input=json.dumps(body), capture_output=True, text=True,
                                 check=False)
        assert (verdict.returncode == 0) is passes, verdict
    result = go(tmp_path, Frontend(chat=httpx.Response(200, json=body)))
    assert result.success == (1 if passes else 0)
    if not passes:
        assert result.gate == "chat" and "structural check" in result.diagnosis


def test_a_chat_answer_that_is_not_json_is_kept_raw(tmp_path: Path, fake_clock: clock.FakeClock) -> None:
    result = go(tmp_path, Frontend(chat=httpx.Response(200, text="Internal hiccup")))
    assert result.gate == "chat" and "structural check" in result.diagnosis
    assert result.api_response == {"raw": "Internal hiccup"}
    assert (tmp_path / "smoke" / "api_body.json").read_text() == "Internal hiccup"


def test_a_dropped_chat_request_fails_the_transport_gate(tmp_path: Path, fake_clock: clock.FakeClock) -> None:
    frontend = Frontend()

    def drop(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/chat/completions":
            raise httpx.ReadTimeout("read timed out")
        return frontend(request)

    kube = FakeKube()
    result = go(tmp_path, drop, kube)
    assert (result.success, result.gate) == (0, "transport")
    assert result.diagnosis == "ReadTimeout: read timed out"
    assert artifact(tmp_path)["api_http_code"] is None and kube.started[0].stops == 1


def test_the_direct_routing_header_names_the_worker_instance(tmp_path: Path, fake_clock: clock.FakeClock) -> None:
    frontend = Frontend()
    endpoint = smoke.Endpoint("worker-pod", "pod/w-0", worker_instance_id=9633226347216541456)
    assert go(tmp_path, frontend, endpoint=endpoint).success == 1
    # Both names: older frontends read only the unprefixed one.
    assert frontend.chats[0].headers[smoke.DIRECT_HEADER] == "9633226347216541456"
    assert frontend.chats[0].headers["x-worker-instance-id"] == "9633226347216541456"


def test_a_400_without_the_instance_id_blames_the_missing_header(tmp_path: Path,
                                                                  fake_clock: clock.FakeClock) -> None:
    answer = httpx.Response(400, json={"code": 400, "message": "missing header"})
    result = go(tmp_path, Frontend(chat=answer), endpoint=smoke.Endpoint("worker-pod", "pod/w-0"))
    assert result.gate == "chat" and smoke.DIRECT_HEADER in result.diagnosis
    assert result.diagnosis.endswith("the deployment itself may be fine")


def test_a_400_naming_direct_routing_says_the_header_is_wrong(tmp_path: Path, fake_clock: clock.FakeClock) -> None:
    answer = httpx.Response(400, json={"message": "Direct routing requires a worker instance id"})
    result = go(tmp_path, Frontend(chat=answer))
    assert result.diagnosis == (f"chat endpoint answered 400 naming direct routing: the {smoke.DIRECT_HEADER} "
                                "header is missing or wrong")


# ------------------------------------------------------------------ what to test: endpoint, routing


@pytest.mark.parametrize(("log", "expected"), [
    ("registered worker instance_id=0x85f0a1b2c3d4e5f6", 0x85F0A1B2C3D4E5F6),
    ('{"worker_id": "7587890012345678901"}', 7587890012345678901),
    ("instance id: 85f0a1b2c3d4e5f6", 0x85F0A1B2C3D4E5F6),
    ("instance_id=1\nre-registered instance_id=2", 2),
    ("no registration yet", None),
    # One id, two bases in adjacent lines of one process: the line's format decides (docs/operator-generations.md).
    ("registered dyn://dynamo.backend.generate:1b70511b8908ec", 7723318027815148),
    ("serving instance_id=7723318027815148 endpoint=generate", 7723318027815148),
    # A hex discovery key can be all digits: still hex.
    ("put v1/instances/dynamo/backend/generate:12345678901234", 0x12345678901234),
    # A real worker log line (its source: docs/operator-generations.md): decimal.
    ("INFO check_worker.check_required_workers: [Processor:1] Waiting for more workers to be ready.\n"
     " Current: 1, Required: 1   \nWorkers ready: [7587887029837065570]", 7587887029837065570),
    ("a later line wins: instance_id=0x10 then Workers ready: [17]", 17),
    # Dynamo 1.6.1 with Kubernetes discovery, seen on kind: the runtime's own id in hex, then event
    # channels' ids (in decimal, each its own), which are not the worker's.
    ("INFO dynamo_runtime::discovery::kube: Initializing KubeDiscoveryClient: mode=Pod, target=Pod(\"w-0\"), "
     "cr_name=w-0, instance_id=1d851821a05326, namespace=gz1\n"
     "INFO dynamo_runtime::discovery::kube: Registering event channel: scope=Endpoint { endpoint: EndpointId { "
     "namespace: \"gz1-e2e-gaie\", component: \"backend\", name: \"generate\" } }, topic=active_sequences_events, "
     "instance_id=c4bbe0c715119\n"
     "INFO dynamo_runtime::discovery::kube: Emitting discovery event event_kind=\"added\" instance_id=EventChannel("
     "EventChannelInstanceId { topic: \"kv_metrics\", instance_id: 2047233685467868 })", 8309113014473510),
])
def test_parse_instance_id(log: str, expected: int | None) -> None:
    assert smoke.parse_instance_id(log) == expected


def test_the_frontend_service_is_the_endpoint_when_it_exists() -> None:
    kube = FakeKube(services={"demo-frontend"}, pods=[pod("w-0")])
    assert smoke.find_endpoint(kube, "ns", DEMO, False, "demo-frontend") == SERVICE  # type: ignore[arg-type]


def test_without_a_service_the_first_ready_worker_is_the_endpoint() -> None:
    kube = FakeKube(pods=[pod("w-1"), pod("w-0", ready=False), pod("epp-0", "epp"), pod("x-0", dgd_name="other"),
                          pod("w-2", "decode")],
                    logs={("w-1", "sidecar"): "registered instance_id=0x10"})
    assert smoke.find_endpoint(kube, "ns", DEMO, False, "demo-frontend") == \
        smoke.Endpoint("worker-pod", "pod/w-1")  # type: ignore[arg-type]
    kube.pods[0] = pod("w-1", containers=("main", "sidecar"))
    found = smoke.find_endpoint(kube, "ns", DEMO, True, None)  # type: ignore[arg-type]
    assert found == smoke.Endpoint("worker-pod", "pod/w-1", worker_instance_id=16, instance_source="log/sidecar")
    assert found.as_dict() == {"kind": "worker-pod", "target": "pod/w-1", "port": 8000, "worker_instance_id": 16,
                               "worker_instance_id_source": "log/sidecar"}


def worker_metadata(pod_name: str, endpoints: dict[str, Any], owner: str | None = None) -> dict[str, Any]:
    """A DynamoWorkerMetadata as a runtime with Kubernetes discovery writes it (named after, owned by its pod)."""
    return {"metadata": {"name": pod_name, "ownerReferences": [{"kind": "Pod", "name": owner or pod_name}]},
            "spec": {"data": {"endpoints": endpoints, "model_cards": {}}}}


def generate(component: str, ident: Any, endpoint: str = "generate") -> dict[str, Any]:
    return {"type": "Endpoint", "namespace": "ns-demo", "component": component, "endpoint": endpoint,
            "instance_id": ident, "transport": {"tcp": "10.244.1.7:40000/x"}}


def test_with_kubernetes_discovery_the_instance_id_comes_from_the_pods_worker_metadata() -> None:
    """The id the runtime registered, not a number a log line happens to print last."""
    kube = FakeKube(pods=[pod("w-0", containers=("main", "sidecar"))],
                    logs={("w-0", "sidecar"): "instance_id=0x99 (the frontend's own)"},
                    discovery=[worker_metadata("other-0", {"a": generate("backend", 5)}),
                               worker_metadata("w-0", {
                                   "ns/backend/clear_kv_blocks": generate("backend", 7, "clear"),
                                   "ns/backend/generate": generate("backend", 9633226347216541456)})])
    found = smoke.find_endpoint(kube, "ns", DEMO, True, None)  # type: ignore[arg-type]
    assert found == smoke.Endpoint("worker-pod", "pod/w-0", worker_instance_id=9633226347216541456,
                                   instance_source="dynamoworkermetadatas/w-0")


@pytest.mark.parametrize("discovery", [NotFound("the server could not find the requested resource"),
                                       Forbidden("cannot list resource dynamoworkermetadatas"),
                                       [worker_metadata("other-0", {"a": generate("backend", 5)})]],
                         ids=["no-crd", "forbidden", "no-object-of-this-pod"])
def test_without_the_pods_worker_metadata_the_logs_give_the_id(discovery: Any) -> None:
    kube = FakeKube(pods=[pod("w-0", containers=("main", "sidecar"))],
                    logs={("w-0", "sidecar"): "registered instance_id=0x10"}, discovery=discovery)
    found = smoke.find_endpoint(kube, "ns", DEMO, True, None)  # type: ignore[arg-type]
    assert (found.worker_instance_id, found.instance_source) == (16, "log/sidecar")


def test_without_direct_routing_neither_discovery_nor_logs_are_read() -> None:
    kube = FakeKube(pods=[pod("w-0")], discovery=Forbidden("must not be asked"))
    assert smoke.find_endpoint(kube, "ns", DEMO, False, None).worker_instance_id is None  # type: ignore[arg-type]


def test_no_service_and_no_ready_worker_is_an_error() -> None:
    with pytest.raises(SuiteError, match=r"no frontend Service and no ready worker pod \(with a frontend sidecar or "
                       "not\\) for DGD demo in ns"):
        smoke.find_endpoint(FakeKube(pods=[pod("w-0", ready=False)]), "ns", DEMO, False, None)  # type: ignore[arg-type]


def beta_dgd(main: str = "", sidecar: str = "") -> str:
    return f"""
apiVersion: nvidia.com/v1beta1
kind: DynamoGraphDeployment
metadata: {{name: demo}}
spec:
  components:
  - name: Frontend
    type: frontend
    podTemplate: {{spec: {{containers: [{{name: main, image: rt}}]}}}}
  - name: VllmWorker
    type: worker
    podTemplate:
      spec:
        containers:
        - name: main
          image: rt
          command: [python3, -m, dynamo.vllm]
          args: [--model, Qwen/Qwen3-0.6B, --served-model-name, {MODEL}]
          {main}
        {sidecar}
"""


DEMO = parse_dgd(beta_dgd())


@pytest.mark.parametrize(("main", "sidecar", "direct"), [
    ("", "", False),
    ("env: [{name: DYN_ROUTER_MODE, value: direct}]", "", True),
    ("env: [{name: DYN_ROUTER_MODE, value: kv}]", "", False),
    ("", "- {name: frontend-sidecar, image: rt, command: [python3, -m, dynamo.frontend, --router-mode, direct]}", True),
    ("", "- {name: frontend-sidecar, image: rt, args: ['--router-mode=$(MODE)'], env: [{name: MODE, value: direct}]}",
     True),
    ("", "- {name: frontend-sidecar, image: rt, env: [{name: DYN_ROUTER_MODE, value: direct}]}", True),
    ("", "- {name: frontend-sidecar, image: rt, command: [sh, -c, 'python3 -m dynamo.frontend --router-mode kv']}",
     False),
])
def test_direct_routing_is_found_on_the_main_container_or_a_sidecar(main: str, sidecar: str, direct: bool) -> None:
    text = beta_dgd(main, sidecar)
    documents = yamlio.load_yaml_text(text, "dgd.yaml", "fix it")
    assert smoke.direct_routing(parse_dgd(text), documents) is direct


# ------------------------------------------------------------------ plan() and run(): step 7's two calls


def settings(tmp_path: Path, served_model: str | None = None) -> Settings:
    timeouts = Timeouts(smoke_reach_attempts=4, smoke_reach_interval_s=0.5, smoke_models_attempts=2,
                        smoke_models_interval_s=3.0, smoke_request_timeout_s=9.0)
    return Settings(iteration=0, exp_root=tmp_path, workload=tmp_path / "user_workload.yaml", workload_sha256="0" * 64,
                    dgd=tmp_path / "dgd.yaml", dgd_sha256="0" * 64, provenance="user-interviewer",
                    smoke_prompt="say hi", served_model=served_model, timeouts=timeouts)


@dataclass
class PlanRun:
    """What plan() reads of the StepContext: settings, the deploy copy, namespace, step 2's result."""

    settings: Settings
    manifests: dict[str, Path]
    deploy_root: Path
    preflight: Any = None
    namespace: str = "ns"
    asked: list[type] = field(default_factory=list)

    def result(self, kind: type) -> Any:
        self.asked.append(kind)
        return self.preflight


def plan_run(tmp_path: Path, text: str, served_model: str | None = None, preflight: Any = None) -> PlanRun:
    path = tmp_path / "deploy.yaml"
    path.write_text(text)
    return PlanRun(settings(tmp_path, served_model), {"deploy": path}, tmp_path / "artifacts", preflight)


@pytest.mark.parametrize(("option", "found_by_step2", "expected"), [
    ("from-option", "from-step2", "from-option"),
    (None, "from-step2", "from-step2"),
    (None, None, MODEL),
])
def test_plan_resolves_the_served_model(tmp_path: Path, option: str | None, found_by_step2: str | None,
                                        expected: str) -> None:
    run = plan_run(tmp_path, beta_dgd(), option, SimpleNamespace(served_model=found_by_step2, frontend_service=None))
    kube = FakeKube(pods=[pod("w-0")])
    plan = smoke.plan(run, kube)  # type: ignore[arg-type]
    assert [k.__name__ for k in run.asked] == ["Preflight"]
    assert plan.served_model == expected


def test_plan_without_a_served_model_blocks(tmp_path: Path) -> None:
    text = beta_dgd().replace(f", --served-model-name, {MODEL}", "").replace("--model, Qwen/Qwen3-0.6B", "--tp, '1'")
    with pytest.raises(StepBlocked) as caught:
        smoke.plan(plan_run(tmp_path, text), FakeKube(pods=[pod("w-0")]))  # type: ignore[arg-type]
    assert (caught.value.category, caught.value.fix) == ("served-model", "pass --served-model NAME")
    assert caught.value.message == "no served model name found in the DGD"


def test_plan_uses_step2s_frontend_service_and_the_settings_bounds(tmp_path: Path) -> None:
    preflight = SimpleNamespace(served_model=MODEL, frontend_service="demo-frontend")
    run = plan_run(tmp_path, beta_dgd(), preflight=preflight)
    plan = smoke.plan(run, FakeKube(services={"demo-frontend"}))  # type: ignore[arg-type]
    assert plan.endpoint == SERVICE and plan.dgd_name == "demo" and plan.namespace == "ns"
    assert (plan.direct_routing, plan.prompt, plan.deploy_root) == (False, "say hi", tmp_path / "artifacts")
    assert plan.timeouts == run.settings.timeouts  # the run's own group, read directly by the gates
    assert plan.kubectl.endswith("kubectl")


def test_plan_of_a_direct_routing_sidecar_reads_the_instance_id(tmp_path: Path) -> None:
    sidecar = "- {name: frontend-sidecar, image: rt, args: [--router-mode, direct]}"
    run = plan_run(tmp_path, beta_dgd(sidecar=sidecar))  # no step 2 result: the DGD's model is used
    kube = FakeKube(pods=[pod("w-0", containers=("main", "frontend-sidecar"))],
                    logs={("w-0", "frontend-sidecar"): "instance_id: 0x2a"})
    plan = smoke.plan(run, kube)  # type: ignore[arg-type]
    assert plan.direct_routing and plan.served_model == MODEL
    assert plan.endpoint == smoke.Endpoint("worker-pod", "pod/w-0", worker_instance_id=42,
                                           instance_source="log/frontend-sidecar")


def recording_run(tmp_path: Path) -> StepContext:
    run = lifecycles.started(settings(tmp_path), "step7_smoke").context
    return run


def test_run_records_endpoint_served_model_and_smoke_sections(tmp_path: Path, fake_clock: clock.FakeClock) -> None:
    run = recording_run(tmp_path)
    deploy_root = tmp_path / "artifacts" / "deploy-iter-000"
    plan = smoke.SmokePlan("ns", "demo", MODEL, False, SERVICE, deploy_root, "say hi", SMALL)
    run.record(smoke.run(run, FakeKube(), plan, transport=httpx.MockTransport(Frontend())))  # type: ignore[arg-type]
    data = run.recorder.ledger.data
    assert data["endpoint"] == {"kind": "service", "target": "svc/demo-frontend", "port": 8000,
                                "worker_instance_id": None}
    assert data["served_model"] == MODEL
    assert data["smoke"] == {
        "success": 1, "models_http_code": 200, "api_http_code": 200, "gate": "", "diagnosis": "",
        "timings": {"reachable_s": 0.0, "model_listed_s": 0.0, "chat_s": 0.0}, "port_forward_restarts": 0,
        "chat_attempts": 1, "artifact": "artifacts/deploy-iter-000/smoke_test_artifact.json",
        "bodies": ["artifacts/deploy-iter-000/smoke/models_body.json", "artifacts/deploy-iter-000/smoke/api_body.json"]}
    assert run.recorder.evidence == {"success": 1, "gate": "all passed", "reachable_s": 0.0, "model_listed_s": 0.0,
                            "chat_s": 0.0}
    ledger_mod.validate(data)


def test_a_failed_gate_fails_the_step_carrying_the_result(tmp_path: Path, fake_clock: clock.FakeClock) -> None:
    run = recording_run(tmp_path)
    deploy_root = tmp_path / "artifacts" / "deploy-iter-000"
    plan = smoke.SmokePlan("ns", "demo", MODEL, False, SERVICE, deploy_root, "say hi", SMALL)
    with pytest.raises(StepFailure) as caught:
        smoke.run(run, FakeKube(), plan, transport=httpx.MockTransport(Frontend(models=[listing()])))  # type: ignore[arg-type]
    failure = caught.value
    assert str(failure) == "smoke test failed at the model-listed gate: served model 'qwen3' never listed within " \
        "3 x 1s (last code 200)"
    assert failure.category == "smoke" and not failure.failed_attempt
    assert isinstance(failure.result, smoke.SmokeResult)
    # What the ledger plugin does with a failure's result: recorded as the step would on success.
    run.record(failure.result)
    smoke_section = run.recorder.ledger.data["smoke"]
    assert smoke_section["gate"] == "model-listed" and smoke_section["success"] == 0
    assert run.recorder.ledger.data["smoke"]["bodies"] == ["artifacts/deploy-iter-000/smoke/models_body.json"]
    assert run.recorder.evidence == {"success": 0, "gate": "model-listed", "reachable_s": 0.0, "model_listed_s": 3.0}
    ledger_mod.validate(run.recorder.ledger.data)


# ------------------------------------------------------------------ a listed model that is not routable yet
NOT_READY = httpx.Response(503, json={"error": "Model not ready"})
# Right after registration (docs/operator-generations.md): 500, then 404 model not found, then 200.
STARTUP_RACE = [httpx.Response(500, json={"message": "Failed to generate completions", "type": "Internal Server Error",
                                          "code": 500}),
                httpx.Response(404, json={"error": "Model not found"}), NOT_READY,
                httpx.Response(200, json=OK_CHAT)]


def test_a_model_that_becomes_routable_passes_after_a_few_answers(tmp_path: Path, fake_clock: clock.FakeClock) -> None:
    frontend = Frontend(chat=STARTUP_RACE)
    result = go(tmp_path, frontend)
    assert (result.success, result.gate, result.chat_attempts) == (1, "", 4)
    assert artifact(tmp_path)["api_http_code"] == 200


def test_a_listed_model_that_stays_not_ready_fails_the_chat_gate_after_its_bound(
        tmp_path: Path, fake_clock: clock.FakeClock) -> None:
    started = fake_clock.monotonic()
    settings = Timeouts(smoke_reach_attempts=3, smoke_reach_interval_s=1.0, smoke_models_attempts=3,
                        smoke_models_interval_s=1.0, smoke_chat_not_ready_s=10.0)
    result = go(tmp_path, Frontend(chat=NOT_READY), settings=settings)
    assert result.success == 0 and result.gate == "chat" and result.chat_attempts > 2
    assert result.diagnosis.startswith("the served model is listed but chat still answered HTTP 503 after ")
    assert "Model not ready" in result.diagnosis and "cannot serve" in result.diagnosis
    assert 10.0 <= fake_clock.monotonic() - started < 15.0


def test_an_answer_that_is_not_about_readiness_is_judged_at_once(tmp_path: Path, fake_clock: clock.FakeClock) -> None:
    result = go(tmp_path, Frontend(chat=httpx.Response(400, json={"error": "bad request"})))
    assert result.chat_attempts == 1 and result.gate == "chat"
