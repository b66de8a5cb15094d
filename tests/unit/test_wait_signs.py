"""Step 6's signs of a legitimate wait (deploy_suite.judges.wait_signs) and the wait that obeys them
(procedure.waits.DgdReady, readiness.wait_ready): a hold decision, an image pull under way and a
model loading are not "no progress"; what is stuck with none of these signs is; a loading
container has its own bound. A FakeClock is installed; the wait loop is played tick by tick."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from deploy_suite import clock
from deploy_suite.access.kube import KNOWN, Kube
from deploy_suite.access.watch import TICK_S
from deploy_suite.constants import LABEL_COMPONENT
from deploy_suite.errors import StepBlocked, StepFailure, WaitTimeout
from deploy_suite.judges import wait_signs
from deploy_suite.judges.triage import Verdict
from deploy_suite.model.dgd import load_dgd
from deploy_suite.procedure import readiness, waits
from deploy_suite.procedure.settings import Timeouts
from deploy_suite.vocab import TriageCategory, WaitingSign
from tests import fakekube
from tests.fakekube import FakeApi, pod
from tests.unit.test_rollout import DEPLOY  # the same two-component DGD

NS = "demo"
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)  # the FakeClock's start
LABELS = {"nvidia.com/dynamo-graph-deployment-name": "demo"}
WORKER = "demo-worker-0"
INSUFFICIENT = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: " \
               "2 No preemption victims found for incoming pod."


def labels(name: str) -> dict[str, str]:
    """The operator's labels: the DGD's name and the pod's component (readiness counts per component)."""
    return {**LABELS, LABEL_COMPONENT: "Frontend" if "frontend" in name else "VllmDecodeWorker"}


def at(seconds: float) -> str:
    return (START + dt.timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def running(name: str = WORKER, *, started_s: float = 0.0, restarts: int = 0, ready: bool = False) -> dict[str, Any]:
    """A scheduled pod whose container ``main`` runs since ``started_s`` (not ready unless said)."""
    out = pod(name, NS, labels=labels(name), gpus=1, node="h200-0", phase="Running", ready=ready)
    out["metadata"]["uid"] = f"uid-{name}"
    out["status"]["containerStatuses"] = [{"name": "main", "image": "registry.local/runtime:1", "imageID": "sha256:1",
                                           "ready": ready, "started": True, "restartCount": restarts,
                                           "state": {"running": {"startedAt": at(started_s)}}}]
    return out


def creating(name: str = WORKER) -> dict[str, Any]:
    """A scheduled pod whose container waits to be created (no image yet)."""
    out = pod(name, NS, labels=labels(name), gpus=1, node="h200-0")
    out["metadata"]["uid"] = f"uid-{name}"
    out["status"]["containerStatuses"] = [{"name": "main", "image": "registry.local/runtime:1", "restartCount": 0,
                                           "state": {"waiting": {"reason": "ContainerCreating"}}}]
    return out


def held(name: str = WORKER) -> dict[str, Any]:
    return pod(name, NS, labels=labels(name), gpus=1, unschedulable=INSUFFICIENT)


def kubelet(reason: str, seconds: float, *, uid: str = f"uid-{WORKER}", container: str = "main",
            message: str = "") -> dict[str, Any]:
    """One of the kubelet's image events for a container of the worker (as ``kubectl get events`` shows it)."""
    return {"metadata": {"name": f"{WORKER}.{reason}.{seconds:g}", "namespace": NS}, "reason": reason,
            "type": "Warning" if reason == "Failed" else "Normal",
            "message": message or f'{reason} image "registry.local/runtime:1"',
            "firstTimestamp": at(seconds), "lastTimestamp": at(seconds),
            "involvedObject": {"kind": "Pod", "name": WORKER, "uid": uid,
                               "fieldPath": f"spec.containers{{{container}}}"}}


# ------------------------------------------------------------------ the pure judge


def contention() -> Verdict:
    return Verdict(TriageCategory.CONTENTION, "pod demo-worker-0 is waiting for capacity", ["x"], can_wait=True,
                   next_check_s=30.0)


def test_a_hold_decision_is_a_sign_and_a_verdict_that_is_none_is_stuck() -> None:
    sign = wait_signs.pod_wait(held(), contention(), [], START)
    assert isinstance(sign, wait_signs.Sign) and sign.kind == WaitingSign.HELD and "capacity" in sign.detail
    unknown = Verdict(TriageCategory.UNKNOWN, "not classified", can_wait=True, next_check_s=30.0)
    assert wait_signs.pod_wait(held(), unknown, [], START) == \
        f"pod {WORKER} unschedulable, no hold decision (unknown)"
    assert wait_signs.pod_wait(held(), None, [], START) == \
        f"pod {WORKER} unschedulable, no hold decision (not triaged yet)"


def test_a_container_running_without_restarts_and_not_ready_is_loading_since_it_started() -> None:
    sign = wait_signs.pod_wait(running(started_s=30), None, [], START)
    assert isinstance(sign, wait_signs.Sign) and (sign.kind, sign.container) == (WaitingSign.LOADING, "main")
    assert sign.seconds(START + dt.timedelta(seconds=630)) == 600
    # A restart (or a container waiting on an error) takes the sign away: a crash is not a load.
    assert wait_signs.pod_wait(running(restarts=1), None, [], START) == \
        f"pod {WORKER} container main restarted 1 time(s)"
    crashing = running()
    crashing["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
    assert wait_signs.pod_wait(crashing, None, [], START) == f"pod {WORKER} container main waiting: CrashLoopBackOff"
    assert wait_signs.pod_wait(running(ready=True), None, [], START) is None
    # An unsaid start dates from the fallback (the wait's start).
    unsaid = running()
    unsaid["status"]["containerStatuses"][0]["state"]["running"] = {}
    assert wait_signs.loading(unsaid, START + dt.timedelta(seconds=5)).since == START + dt.timedelta(seconds=5)


def test_a_pull_under_way_is_the_kubelets_pulling_with_no_failure_and_no_pulled_after_it() -> None:
    sign = wait_signs.pod_wait(creating(), None, [kubelet("Pulling", 10)], START)
    assert isinstance(sign, wait_signs.Sign) and sign.kind == WaitingSign.PULLING
    assert (sign.container, sign.detail) == ("main", "registry.local/runtime:1")
    assert sign.since == START + dt.timedelta(seconds=10)
    stuck = f"pod {WORKER} container main not created, no image pull under way"
    assert wait_signs.pod_wait(creating(), None, [], START) == stuck
    assert wait_signs.pod_wait(creating(), None, [kubelet("Pulling", 10), kubelet("Failed", 40)], START) == stuck
    assert wait_signs.pod_wait(creating(), None, [kubelet("Pulling", 10), kubelet("BackOff", 40)], START) == stuck
    assert wait_signs.pod_wait(creating(), None, [kubelet("Pulling", 10), kubelet("Pulled", 10)], START) == stuck
    # An earlier pod of the same name, another container: not this pull.
    assert wait_signs.pod_wait(creating(), None, [kubelet("Pulling", 10, uid="uid-old")], START) == stuck
    assert wait_signs.pod_wait(creating(), None, [kubelet("Pulling", 10, container="sidecar")], START) == stuck
    # A pod the kubelet has not reported on: every container waits to be created.
    bare = creating()
    bare["status"]["containerStatuses"] = []
    assert wait_signs.needs_events(bare)
    assert wait_signs.pod_wait(bare, None, [kubelet("Pulling", 3)], START).kind == "pulling"
    assert not wait_signs.needs_events(running()) and not wait_signs.needs_events(held())


def test_the_dgd_is_stuck_only_when_nothing_waits_with_a_sign() -> None:
    frontend = running("demo-frontend-0", ready=True)
    judged = wait_signs.judge([frontend, running()], 2, {}, {}, dgd_pending="dgd/demo state=pending", fallback=START)
    assert [s.kind for s in judged.signs] == ["loading"] and judged.stuck == ()
    judged = wait_signs.judge([frontend], 2, {}, {}, dgd_pending="dgd/demo state=pending", fallback=START)
    assert judged.stuck == ("1 of 2 pods not created",)
    ready = wait_signs.judge([frontend, running(ready=True)], 2, {}, {}, dgd_pending="dgd/demo state=pending",
                             fallback=START)
    assert ready.stuck == ("dgd/demo state=pending",)
    assert wait_signs.judge([frontend, running(ready=True)], 2, {}, {}, dgd_pending=None, fallback=START) == \
        wait_signs.Waiting()
    # A pod on its way out is neither: the ones replacing it count.
    leaving = creating()
    leaving["metadata"]["deletionTimestamp"] = at(1)
    assert wait_signs.judge([frontend, leaving], 2, {}, {}, dgd_pending=None, fallback=START).stuck == \
        ("1 of 2 pods not created",)


def test_the_live_line_and_the_loading_verdict_name_the_container_and_its_last_line() -> None:
    judged = wait_signs.judge([running(started_s=0), running("demo-worker-1", started_s=100),
                               creating("demo-worker-2")],
                              3, {}, {"demo-worker-2": [{**kubelet("Pulling", 120), "involvedObject": {
                                  "kind": "Pod", "name": "demo-worker-2", "fieldPath": "spec.containers{main}"}}]},
                              dgd_pending=None, fallback=START)
    now = START + dt.timedelta(seconds=190)
    assert wait_signs.summary(judged, now, "INFO loading weights 45%") == (
        f'loading for 3 min (pod {WORKER} container main, 1 more loading): "INFO loading weights 45%"; '
        "pulling registry.local/runtime:1 for 1 min (pod demo-worker-2)")
    assert wait_signs.summary(wait_signs.Waiting(), now, None) == ""
    assert wait_signs.overdue(judged, now, 200) is None
    late = wait_signs.overdue(judged, now, 150)
    assert late is not None and late.pod == WORKER
    failure = wait_signs.loading_failure(late, now, 150, "INFO loading weights 45%")
    assert failure.category == "timeout" and not failure.failed_attempt
    assert str(failure) == (f"pod {WORKER} container main has been running without restarts and not ready for 190s "
                            "(timeouts.readiness_loading_s 150s): the model did not finish loading; its last log "
                            'line: "INFO loading weights 45%"')


def test_a_log_line_is_clipped_to_a_progress_bars_newest_state() -> None:
    assert wait_signs.clip("Loading shards:  10%\rLoading shards:  55%\r") == "Loading shards:  55%"
    assert wait_signs.clip("\x1b[32mINFO\x1b[0m ready") == "INFO ready"
    assert wait_signs.clip("x" * 500) == "x" * 157 + "..."


# ------------------------------------------------------------------ the wait


def node(name: str = "h200-0", ready: str = "True", since_s: float = 0.0) -> dict[str, Any]:
    """A node as the node lifecycle controller leaves it: Ready, or Unknown once the kubelet stopped posting."""
    cond: dict[str, Any] = {"type": "Ready", "status": ready, "lastTransitionTime": at(since_s),
                            "lastHeartbeatTime": at(0)}
    taints: list[dict[str, Any]] = []
    if ready == "Unknown":
        cond.update(reason="NodeStatusUnknown", message="Kubelet stopped posting node status.")
        taints = [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": at(since_s)}]
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "spec": {"taints": taints} if taints else {}, "status": {"conditions": [cond]}}


@pytest.fixture
def fake() -> Iterator[tuple[FakeApi, Kube, list]]:
    with fakekube.installed() as made:
        yield made


def ticking(api: FakeApi, kube: Kube, timeline: Callable[[float], tuple[list[dict[str, Any]], bool]]) -> list[float]:
    """Replace the wait loop by one that judges every TICK_S (as the real one does over several
    collections) what ``timeline`` says the cluster shows ``t`` seconds after the start: the pods,
    and whether the DGD is Ready. Returns the windows the readiness wait asked for."""
    windows: list[float] = []
    start = clock.monotonic()

    def wait(condition: Any, timeout: float, on_progress: Any = None) -> Any:
        windows.append(timeout)
        end = clock.monotonic() + timeout
        while True:
            pods, dgd_ready = timeline(clock.monotonic() - start)
            seen = {"dgd": {f"{NS}/demo": fakekube.dgd("demo", NS, "successful" if dgd_ready else "pending",
                                                       ready=dgd_ready)},
                    "pods": {f"{NS}/{p['metadata']['name']}": p for p in pods}, "events": {}}
            done, description = condition(seen)
            if on_progress is not None:
                on_progress(description)
            if done:
                return SimpleNamespace(collections=seen)
            step = min(TICK_S, end - clock.monotonic())
            if step <= 0:
                raise WaitTimeout(condition.awaited, timeout, description)
            api.fake_clock.advance(step)

    kube.wait = wait  # type: ignore[method-assign]
    return windows


def wait_ready(kube: Kube, tmp_path: Path, lines: list[str] | None = None, **bounds: float) -> readiness.Readiness:
    path = tmp_path / "deploy.yaml"
    path.write_text(DEPLOY)
    reporting = readiness.Reporting(on_progress=lines.append if lines is not None else readiness.quiet)
    return readiness.wait_ready(kube, NS, load_dgd(path), Timeouts(**bounds), frontend_expected=False,
                                reporting=reporting)


FRONTEND = running("demo-frontend-0", ready=True)


def test_a_worker_loading_longer_than_the_no_progress_bound_ends_ready(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.logs[(NS, WORKER)] = ("INFO loading Qwen/Qwen3-0.6B\n"
                              "INFO weights 45% HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123\n")
    # Running and not ready from the start for 300 s (three times the bound), then ready.
    ticking(api, kube, lambda t: ([FRONTEND, running(ready=t >= 300)], t >= 300))
    lines: list[str] = []
    ready = wait_ready(kube, tmp_path, lines, readiness_no_progress_s=100, readiness_s=3600)
    assert ready.state == "ready" and ready.seconds >= 300
    shown = [line for line in lines if "loading for" in line]
    assert f'loading for 4 min (pod {WORKER} container main): "INFO weights 45% HF_TOKEN=[REDACTED]"' in shown[-1]
    assert not any("hf_abcdefghij" in line for line in lines)
    assert any("loading for <1 min" in line for line in lines)
    # The last line is read at a modest rate: once a minute, not every tick (5 s).
    reads = [r for r in api.of("GET") if r.path.endswith("/log")]
    assert 4 <= len(reads) <= 6 and all((r.query["tailLines"], r.query["limitBytes"]) == (5, 16384) for r in reads)


def test_a_worker_loading_past_its_own_bound_ends_the_wait_naming_its_last_line(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.logs[(NS, WORKER)] = "INFO loading shards 12%\n"
    ticking(api, kube, lambda t: ([FRONTEND, running()], False))
    with pytest.raises(StepFailure) as caught:
        wait_ready(kube, tmp_path, readiness_no_progress_s=100, readiness_loading_s=600, readiness_s=3600)
    error = caught.value
    assert error.category == "timeout" and not error.failed_attempt
    assert str(error).startswith(f"pod {WORKER} container main has been running without restarts and not ready "
                                 "for 600s (timeouts.readiness_loading_s 600s)")
    assert str(error).endswith('its last log line: "INFO loading shards 12%"')
    assert error.result.last_progress["waiting"][0]["sign"] == "loading"


def test_a_contention_wait_longer_than_the_bound_ends_ready_once_the_gpus_free(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.put(KNOWN["Event"], fakekube.scheduling_event(WORKER, NS, INSUFFICIENT))
    ticking(api, kube, lambda t: ([FRONTEND, held() if t < 250 else running(ready=True)], t >= 250))
    ready = wait_ready(kube, tmp_path, readiness_no_progress_s=60, readiness_s=3600)
    assert ready.state == "ready" and ready.seconds >= 250
    assert ready.contention and ready.contention[0]["category"] == "contention"
    # The hold decision is re-checked at its next check (30 s), not every tick.
    rereads = [r for r in api.of("GET") if r.path.endswith("/events") and WORKER in str(r.query)]
    assert 5 <= len(rereads) <= 10, len(rereads)


def test_a_pull_under_way_is_waited_on_and_a_pod_stuck_without_a_sign_is_no_progress(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    pulling = kubelet("Pulling", 2)
    api.put(KNOWN["Event"], pulling)
    ticking(api, kube, lambda t: ([FRONTEND, creating() if t < 400 else running(ready=True)], t >= 400))
    ready = wait_ready(kube, tmp_path, readiness_no_progress_s=100, readiness_s=3600)
    assert ready.state == "ready" and ready.seconds >= 400
    # The same pod with no pull under way: stuck, no progress after the bound, named.
    api.objects[("/api/v1", "events")].clear()
    ticking(api, kube, lambda t: ([FRONTEND, creating()], False))
    with pytest.raises(StepFailure) as caught:
        wait_ready(kube, tmp_path, readiness_no_progress_s=100, readiness_s=3600)
    error = caught.value
    assert error.category == "no-progress" and not error.failed_attempt
    assert str(error).startswith("no progress for 100s (timeouts.readiness_no_progress_s 100s)")
    assert f"stuck with no sign of a legitimate wait: pod {WORKER} container main not created, no image pull under " \
           "way" in str(error)
    assert error.result.last_progress["stuck"] == [f"pod {WORKER} container main not created, no image pull under way"]


def test_a_pull_that_failed_is_no_sign(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.put(KNOWN["Event"], kubelet("Pulling", 2))
    failed = 'Failed to pull image "registry.local/runtime:1": i/o timeout'
    api.put(KNOWN["Event"], kubelet("Failed", 3, message=failed))
    ticking(api, kube, lambda t: ([FRONTEND, creating()], False))
    with pytest.raises(StepFailure) as caught:
        wait_ready(kube, tmp_path, readiness_no_progress_s=100, readiness_s=3600)
    assert caught.value.category == "no-progress"


def test_the_hard_cap_still_ends_a_wait_that_shows_a_sign(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    ticking(api, kube, lambda t: ([FRONTEND, held()], False))
    api.put(KNOWN["Event"], fakekube.scheduling_event(WORKER, NS, INSUFFICIENT))
    with pytest.raises(StepFailure) as caught:
        wait_ready(kube, tmp_path, readiness_no_progress_s=60, readiness_s=300)
    assert caught.value.category == "timeout" and "hard cap timeouts.readiness_s" in str(caught.value)



# ------------------------------------------------------------------ a node down


def test_the_node_of_a_pod_not_ready_down_past_the_grace_blocks_the_step_as_platform(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.put(KNOWN["Node"], node())

    def timeline(t: float) -> tuple[list[dict[str, Any]], bool]:
        if t >= 60:  # the kubelet stopped posting: the node lifecycle controller says Unknown
            api.put(KNOWN["Node"], node(ready="Unknown", since_s=60))
        return [FRONTEND, running()], False

    ticking(api, kube, timeline)
    with pytest.raises(StepBlocked) as caught:
        wait_ready(kube, tmp_path, readiness_no_progress_s=600, readiness_s=3600, reconcile_error_grace_s=30)
    blocked = caught.value
    assert blocked.category == "platform" and blocked.result is not None  # the wait's evidence is kept
    assert str(blocked).startswith(f"node h200-0 of pod {WORKER} is NotReady (NodeStatusUnknown: Kubelet stopped "
                                   "posting node status.)")
    assert "node/h200-0 taints: node.kubernetes.io/unreachable" in str(blocked)
    # Judged after the grace (30 s) from the first read that saw it down, reads every NODE_EVERY_S at most.
    assert 90 <= clock.monotonic() - 1000.0 <= 90 + waits.NODE_EVERY_S + 2 * TICK_S  # FakeClock starts at 1000
    assert len([r for r in api.of("GET") if r.path.endswith("/nodes/h200-0")]) <= 100 // waits.NODE_EVERY_S + 2


def test_a_node_down_shorter_than_the_grace_and_a_ready_pods_node_are_no_verdict(fake, tmp_path: Path) -> None:
    api, kube, _ = fake

    def timeline(t: float) -> tuple[list[dict[str, Any]], bool]:
        api.put(KNOWN["Node"], node(ready="Unknown" if 20 <= t < 40 else "True", since_s=20))
        return [FRONTEND, running(ready=t >= 120)], t >= 120

    ticking(api, kube, timeline)
    ready = wait_ready(kube, tmp_path, readiness_no_progress_s=600, readiness_s=3600, reconcile_error_grace_s=30)
    assert ready.state == "ready"


def test_a_deployer_that_may_not_read_nodes_waits_on_the_pods_own_words(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.fail("GET", "/api/v1/nodes/h200-0", fakekube.forbidden("get", "nodes"), times=1000)
    ticking(api, kube, lambda t: ([FRONTEND, running(ready=t >= 60)], t >= 60))
    assert wait_ready(kube, tmp_path, readiness_no_progress_s=600, readiness_s=3600).state == "ready"


def test_a_node_read_that_gets_no_answer_is_tried_again_and_never_stops_the_wait(fake, tmp_path: Path) -> None:
    api, kube, _ = fake
    api.put(KNOWN["Node"], node())
    api.fail("GET", "/api/v1/nodes/h200-0", fakekube.status(503, "ServiceUnavailable", "apiserver restarting"),
             times=3)
    ticking(api, kube, lambda t: ([FRONTEND, running(ready=t >= 60)], t >= 60))
    assert wait_ready(kube, tmp_path, readiness_no_progress_s=600, readiness_s=3600).state == "ready"
    assert len([r for r in api.of("GET") if r.path.endswith("/nodes/h200-0")]) >= 4  # tried again after each
