"""The one wait loop (deploy_suite.access.watch) run for real against the in-memory apiserver.

List then watch from the list's resourceVersion, resume after a dropped connection, relist on
410, retry temporary errors with a capped backoff inside the deadline, stop at once on anything
else; one collection or several; the controllers' endless stream. A FakeClock is installed:
nothing really sleeps.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest

from deploy_suite.access import watch
from deploy_suite.access.kube import DGD, KNOWN
from deploy_suite.access.watch import Watch
from deploy_suite.errors import Forbidden, KubeError, NotFound, StepFailure, Unavailable, WaitTimeout
from tests import fakekube
from tests.fakekube import dropped, error_event, event, forbidden, gone, status

POD = KNOWN["Pod"]
NS = "demo"
PODS = f"/api/v1/namespaces/{NS}/pods"
DGDS = f"/apis/nvidia.com/v1alpha1/namespaces/{NS}/dynamographdeployments"


@pytest.fixture
def fake() -> Iterator[tuple[fakekube.FakeApi, fakekube.Kube, list[fakekube.CommandRecord]]]:
    with fakekube.installed() as made:
        yield made


def pod(name: str, phase: str = "Pending", version: str | None = None, **labels: str) -> dict:
    meta: dict = {"name": name, "namespace": NS, "labels": labels}
    if version:
        meta["resourceVersion"] = version
    return {"metadata": meta, "status": {"phase": phase}}


def all_running(objs: dict) -> tuple[bool, str]:
    phases = sorted(f"{o['metadata']['name']}={o['status']['phase']}" for o in objs.values())
    return bool(objs) and all(p.endswith("=Running") for p in phases), " ".join(phases) or "no pods"


def wait_pods(kube, timeout: float = 60.0, label_selector: str | None = None, field_selector: str | None = None,
              **kw):
    spec = Watch("Pod", NS, label_selector=label_selector, field_selector=field_selector)
    return kube.wait_for(spec, all_running, awaited="pods Running", timeout=timeout, **kw)


# ------------------------------------------------------------------ list, then watch


def test_a_condition_true_on_the_list_needs_no_watch(fake) -> None:
    api, kube, records = fake
    api.put(POD, pod("a", "Running"))
    state = wait_pods(kube)
    assert list(state.objects) == [f"{NS}/a"] and state.description == "a=Running"
    assert [r.method for r in api.requests] == ["GET"]
    assert [(r.kind, r.outcome) for r in records] == [("watch", "started")]
    assert records[0].command == f"kubectl --context fake-ctx get pods -n {NS} --watch"


def test_events_update_the_state_and_progress_reports_each_new_state(fake) -> None:
    api, kube, _ = fake
    api.put(POD, pod("a"))
    api.put(POD, pod("gone-soon"))
    api.script_watch(POD, NS, [event("DELETED", pod("gone-soon")), event("MODIFIED", pod("a", "Pending")),
                               event("MODIFIED", pod("a", "Running"))])
    progress: list[str] = []
    state = wait_pods(kube, on_progress=progress.append)
    assert progress == ["a=Pending gone-soon=Pending", "a=Pending", "a=Running"]
    assert list(state.objects) == [f"{NS}/a"]


def test_the_watch_starts_at_the_lists_version_with_bookmarks_and_the_selectors(fake) -> None:
    api, kube, records = fake
    api.put(POD, pod("a", app="x"))
    api.script_watch(POD, NS, [event("BOOKMARK", {"metadata": {"resourceVersion": "555"}}),
                               event("MODIFIED", pod("a", "Running", app="x"))])
    wait_pods(kube, label_selector="app=x", field_selector="spec.nodeName=n1")
    listed, watched = api.requests
    assert listed.query == {"labelSelector": "app=x", "fieldSelector": "spec.nodeName=n1"}
    assert watched.method == "WATCH" and watched.path == PODS
    assert watched.query["resourceVersion"] == "101"  # the list's: one object put, the counter was 100
    assert watched.query["allowWatchBookmarks"] == "true" and watched.query["timeoutSeconds"] == 60
    assert records[0].command.endswith("get pods -n demo -l app=x --field-selector spec.nodeName=n1 --watch")


def test_one_object_by_name_is_a_metadata_name_field_selector(fake) -> None:
    api, kube, records = fake
    api.put(DGD, {"metadata": {"name": "d", "namespace": NS}})
    kube.wait_for(Watch(DGD, NS, name="d"), lambda objs: (True, "seen"), awaited="dgd", timeout=5)
    assert api.requests[0].query["fieldSelector"] == "metadata.name=d"
    assert records[0].command.endswith(f"get dynamographdeployments.nvidia.com d -n {NS} --watch")


def test_a_cluster_wide_watch_of_a_namespaced_kind_is_recorded_with_all_namespaces(fake) -> None:
    api, kube, records = fake
    api.put(POD, pod("a", "Running"))
    kube.wait_for(Watch("Pod"), all_running, awaited="pods", timeout=5)
    assert api.requests[0].path == "/api/v1/pods"
    assert records[0].command.endswith("get pods -A --watch")


# ------------------------------------------------------------------ resume, relist


def test_a_dropped_connection_resumes_from_the_last_version_seen_without_a_relist(fake) -> None:
    api, kube, _ = fake
    api.put(POD, pod("a"))
    api.script_watch(POD, NS, [event("MODIFIED", pod("a", "ContainerCreating", version="150")), dropped()],
                     [event("MODIFIED", pod("a", "Running", version="151"))])
    wait_pods(kube)
    first, second = api.of("WATCH")
    assert first.query["resourceVersion"] == "101" and second.query["resourceVersion"] == "150"
    assert len(api.of("GET")) == 1


def test_a_watch_that_ends_quietly_resumes_where_it_was(fake) -> None:
    api, kube, _ = fake
    api.put(POD, pod("a"))
    api.script_watch(POD, NS, [event("MODIFIED", pod("a", "Pending", version="160"))],
                     [event("MODIFIED", pod("a", "Running", version="161"))])
    wait_pods(kube)
    assert [w.query["resourceVersion"] for w in api.of("WATCH")] == ["101", "160"]
    assert api.fake_clock.slept == []  # no backoff after a normal end


@pytest.mark.parametrize("how", ["http-410", "error-event-410"])
def test_410_gone_relists_and_the_fresh_list_replaces_the_state(fake, how: str) -> None:
    api, kube, _ = fake
    api.put(POD, pod("stale"))
    if how == "http-410":
        api.fail("WATCH", PODS, gone())
    else:
        api.script_watch(POD, NS, [error_event(410)])
    seen: list[set[str]] = []

    def judge(objs: dict) -> tuple[bool, str]:
        seen.append(set(objs))
        if len(seen) == 1:  # between the two lists the server forgot "stale" and made "fresh"
            api.objects[("/api/v1", "pods")].clear()
            api.put(POD, pod("fresh", "Running"))
        return all_running(objs)

    state = kube.wait_for(Watch("Pod", NS), judge, awaited="pods", timeout=30)
    assert seen == [{f"{NS}/stale"}, {f"{NS}/fresh"}]
    assert list(state.objects) == [f"{NS}/fresh"]
    assert [r.method for r in api.requests] == ["GET", "WATCH", "GET"]


# ------------------------------------------------------------------ the error policy


@pytest.mark.parametrize("error", [status(503, "ServiceUnavailable", "apiserver is shutting down"),
                                   status(500, "InternalError", "etcd leader changed"), dropped(),
                                   ConnectionRefusedError(111, "Connection refused")])
def test_temporary_errors_are_retried_with_a_capped_backoff(fake, error: BaseException) -> None:
    api, kube, _ = fake
    api.put(POD, pod("a", "Running"))
    api.fail("GET", PODS, error, times=7)
    wait_pods(kube)
    assert len(api.of("GET")) == 8
    assert api.fake_clock.slept == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_an_error_event_with_a_server_error_is_temporary_too(fake) -> None:
    api, kube, _ = fake
    api.put(POD, pod("a"))
    api.script_watch(POD, NS, [event("MODIFIED", pod("a", "Pending", version="170")), error_event(500, "boom")],
                     [event("MODIFIED", pod("a", "Running"))])
    wait_pods(kube)
    assert [w.query["resourceVersion"] for w in api.of("WATCH")] == ["101", "170"]
    assert api.fake_clock.slept == [0.05]


@pytest.mark.parametrize(("error", "kind", "code"), [
    (forbidden(), Forbidden, 403),
    (status(401, "Unauthorized", "Unauthorized"), KubeError, 401),
    (status(404, "NotFound", "the server could not find the requested resource"), NotFound, 404),
])
@pytest.mark.parametrize("where", ["GET", "WATCH"])
def test_a_refusal_stops_the_wait_at_once_with_the_servers_words(fake, error, kind, code, where) -> None:
    api, kube, _ = fake
    api.put(POD, pod("a"))
    api.fail(where, PODS, error)
    started = api.fake_clock.monotonic()
    with pytest.raises(kind) as caught:
        wait_pods(kube, timeout=1200)
    assert caught.value.status == code and not caught.value.temporary
    assert str(caught.value).startswith(("list pods: ", "watch pods: "))
    assert json.loads(error.body)["message"] in str(caught.value)
    assert api.fake_clock.monotonic() == started and api.fake_clock.slept == []  # never a 20-minute wait


def test_a_refusal_after_a_temporary_error_still_stops_at_once(fake) -> None:
    api, kube, _ = fake
    api.put(POD, pod("a"))
    api.script_watch(POD, NS, [dropped()])
    api.fail("WATCH", PODS, forbidden(), after=1)  # the second watch request: RBAC removed meanwhile
    with pytest.raises(Forbidden):
        wait_pods(kube)
    assert api.fake_clock.slept == [0.05]


def test_the_deadline_bounds_the_wait_and_the_timeout_says_what_was_seen(fake) -> None:
    api, kube, _ = fake
    api.put(POD, pod("a"))
    with pytest.raises(WaitTimeout) as caught:
        wait_pods(kube, timeout=90)
    assert caught.value.awaited == "pods Running" and caught.value.seconds == pytest.approx(90)
    assert caught.value.last_state == "a=Pending"
    assert [w.query["timeoutSeconds"] for w in api.of("WATCH")] == [60, 30]  # never past the deadline


def test_a_server_still_unavailable_at_the_deadline_is_named_in_the_timeout(fake) -> None:
    api, kube, _ = fake
    api.put(POD, pod("a"))
    api.fail("WATCH", PODS, status(503, "ServiceUnavailable", "apiserver restarting"), times=10_000)
    with pytest.raises(WaitTimeout) as caught:
        wait_pods(kube, timeout=10)
    assert caught.value.last_state == "a=Pending; retrying after: watch pods: apiserver restarting"
    assert max(api.fake_clock.slept) == 1.0 and sum(api.fake_clock.slept) == pytest.approx(10)


def test_a_condition_that_raises_stops_the_wait(fake) -> None:
    api, kube, _ = fake
    api.put(POD, pod("a", "Failed"))

    def judge(objs: dict) -> tuple[bool, str]:
        raise StepFailure("pod a failed", "crash")

    with pytest.raises(StepFailure, match="pod a failed"):
        kube.wait_for(Watch("Pod", NS), judge, awaited="x", timeout=60)
    assert not api.of("WATCH")


# ------------------------------------------------------------------ several collections


def dgd_and_pods_ready(seen: dict) -> tuple[bool, str]:
    dgd = seen["dgd"].get(f"{NS}/d") or {}
    state = (dgd.get("status") or {}).get("state")
    pods_ok, pods = all_running(seen["pods"])
    return state == "successful" and pods_ok, f"dgd {state}; {pods}"


WATCHES = {"dgd": watch.Watch(DGD, NS, "d"), "pods": watch.Watch("Pod", NS, label_selector="dgd=d")}


def test_several_collections_are_judged_together_once_each_is_listed(fake) -> None:
    api, kube, records = fake
    api.watchers = 2
    api.put(DGD, {"metadata": {"name": "d", "namespace": NS}, "status": {"state": "pending"}})
    api.script_watch(DGD, NS, [event("MODIFIED", {"metadata": {"name": "d", "namespace": NS},
                                                  "status": {"state": "successful"}})])
    api.script_watch(POD, NS, [event("ADDED", pod("p", "Pending", dgd="d"))], [dropped()],
                     [event("MODIFIED", pod("p", "Running", dgd="d"))])
    seen_first: list[set[str]] = []

    def judge(seen: dict) -> tuple[bool, str]:
        seen_first.append(set(seen))
        return dgd_and_pods_ready(seen)

    state = watch.wait(kube, WATCHES, judge, awaited="dgd and pods", timeout=120)
    assert seen_first[0] == {"dgd", "pods"}
    assert state.collections["dgd"][f"{NS}/d"]["status"]["state"] == "successful"
    assert list(state.collections["pods"]) == [f"{NS}/p"] and state.description == "dgd successful; p=Running"
    assert sorted(r.command.split(" get ")[1] for r in records) == [
        f"dynamographdeployments.nvidia.com d -n {NS} --watch", f"pods -n {NS} -l dgd=d --watch"]
    assert api.watches_left() == 0


def test_a_refusal_on_one_of_several_collections_stops_the_wait(fake) -> None:
    api, kube, _ = fake
    api.watchers = 2
    api.put(DGD, {"metadata": {"name": "d", "namespace": NS}})
    api.fail("WATCH", PODS, forbidden())
    with pytest.raises(Forbidden, match="cannot watch"):
        watch.wait(kube, WATCHES, dgd_and_pods_ready, awaited="dgd and pods", timeout=1200)


def test_several_collections_time_out_at_the_deadline(fake) -> None:
    api, kube, _ = fake
    api.watchers = 2
    api.put(DGD, {"metadata": {"name": "d", "namespace": NS}, "status": {"state": "pending"}})
    with pytest.raises(WaitTimeout) as caught:
        watch.wait(kube, WATCHES, dgd_and_pods_ready, awaited="dgd and pods", timeout=45)
    assert caught.value.last_state == "dgd pending; no pods" and caught.value.seconds >= 45


# ------------------------------------------------------------------ the controllers' endless stream


def test_the_controller_stream_is_level_based_relists_after_410_and_ends_on_stop(fake) -> None:
    api, kube, _ = fake
    api.put(POD, pod("a"))
    api.script_watch(POD, NS, [event("MODIFIED", pod("a", "Running")), error_event(410)],
                     [event("ADDED", pod("b"))])
    stop = threading.Event()
    got = []
    for etype, obj in kube.watch_events("Pod", stop, namespace=NS):
        got.append((etype, obj["metadata"]["name"]))
        if etype == "ADDED" and obj["metadata"]["name"] == "b":
            stop.set()
    # After the relist "a" comes again as ADDED, with the state it has now.
    assert got == [("ADDED", "a"), ("MODIFIED", "a"), ("ADDED", "a"), ("ADDED", "b")]
    assert [r.method for r in api.requests] == ["GET", "WATCH", "GET", "WATCH"]


def test_the_controller_stream_outlives_a_refusal_and_a_restart(fake) -> None:
    api, kube, _ = fake
    api.put(POD, pod("a"))
    api.fail("GET", PODS, forbidden("list"), times=2)  # RBAC not there yet
    api.script_watch(POD, NS, [dropped()], [event("MODIFIED", pod("a", "Running"))])
    stop = threading.Event()
    got = []
    for etype, obj in kube.watch_events("Pod", stop, namespace=NS, chunk=5):
        got.append((etype, obj["status"]["phase"]))
        if obj["status"]["phase"] == "Running":
            stop.set()
    assert got == [("ADDED", "Pending"), ("MODIFIED", "Running")]
    assert api.fake_clock.slept == [0.05, 0.1, 0.05]  # two paused relists, one resumed watch


def test_the_controller_stream_ends_when_stopped_while_idle(fake) -> None:
    api, kube, _ = fake
    stop = threading.Event()
    got: list = []
    consumer = threading.Thread(target=lambda: got.extend(kube.watch_events("Pod", stop, namespace=NS, chunk=5)))
    consumer.start()
    time.sleep(0.05)  # real time: the stream lists, then watches an idle collection
    stop.set()
    consumer.join(2)
    assert not consumer.is_alive() and got == []
    assert api.of("GET") and api.of("WATCH")


def test_unavailable_is_the_only_temporary_kube_error() -> None:
    assert Unavailable("x").temporary and not Forbidden("x").temporary and not KubeError("x").temporary
