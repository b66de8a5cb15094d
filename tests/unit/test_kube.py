"""The access layer (deploy_suite.access.kube) over the in-memory apiserver: error translation, the
kubectl-equivalent record of every request, reads, applies, deletes, logs, discovery."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from deploy_suite.access import kube as kube_mod
from deploy_suite.access.kube import DGD, KNOWN, Kube, Resource, translate
from deploy_suite.errors import Conflict, Forbidden, InputError, Invalid, KubeError, NotFound, Unavailable
from tests import fakekube
from tests.fakekube import FakeApi, status

NS = "demo"


@pytest.fixture
def fake() -> Iterator[tuple[FakeApi, Kube, list[kube_mod.CommandRecord]]]:
    with fakekube.installed() as made:
        yield made


# ------------------------------------------------------------------ translate


@pytest.mark.parametrize(("code", "kind", "temporary"), [
    (400, Invalid, False), (401, KubeError, False), (403, Forbidden, False), (404, NotFound, False),
    (409, Conflict, False), (410, KubeError, False), (422, Invalid, False), (429, KubeError, False),
    (500, Unavailable, True), (503, Unavailable, True), (0, Unavailable, True),
])
def test_an_answer_is_translated_by_its_status_with_the_servers_message(code: int, kind: type, temporary: bool):
    err = translate(status(code, "Reason", f"the message of {code}"), "get pods/a")
    assert type(err) is kind and err.status == code and err.temporary is temporary
    assert str(err) == f"get pods/a: the message of {code}" and err.reason == "Reason"
    assert f'"code": {code}' in err.body


def test_an_answer_without_a_status_body_keeps_the_http_reason():
    err = translate(ApiException(status=502, reason="Bad Gateway", body=b"<html>proxy</html>"), "list pods")
    assert isinstance(err, Unavailable) and str(err) == "list pods: Bad Gateway" and err.body == "<html>proxy</html>"


@pytest.mark.parametrize("exc", [urllib3.exceptions.ProtocolError("Connection broken"),
                                 urllib3.exceptions.ReadTimeoutError(None, "/api", "read timed out"),
                                 ConnectionResetError(104, "reset"), TimeoutError("slow"), OSError("no route")])
def test_a_broken_connection_is_unavailable_and_temporary(exc: BaseException):
    err = translate(exc, "watch pods")
    assert isinstance(err, Unavailable) and err.temporary and err.status == 0
    assert str(err).startswith(f"watch pods: {type(exc).__name__}: ")


def test_anything_else_is_a_permanent_kube_error_with_a_bounded_message():
    err = translate(ValueError("x" * 5000), "get pods/a")
    assert type(err) is KubeError and not err.temporary and len(str(err)) < 400


def test_the_error_tree_passes_through_untouched():
    original = Forbidden("already translated", status=403)
    assert translate(original, "again") is original


# ------------------------------------------------------------------ records and reads


def test_every_request_is_recorded_as_the_kubectl_command_that_repeats_it(fake):
    api, kube, records = fake
    api.put(KNOWN["Pod"], {"metadata": {"name": "a", "namespace": NS}})
    kube.get("Pod", "a", NS)
    kube.list_items("Pod", NS, label_selector="app=x")
    assert kube.get_or_none("Pod", "missing", NS) is None
    kube.delete(DGD, "d", NS)
    assert [(r.command, r.kind, r.outcome) for r in records] == [
        ("kubectl --context fake-ctx get pods a -n demo -o json", "read", "ok"),
        ("kubectl --context fake-ctx get pods -n demo -l app=x -o json", "read", "ok"),
        ("kubectl --context fake-ctx get pods missing -n demo -o json", "read", "error 404 NotFound"),
        ("kubectl --context fake-ctx delete dynamographdeployments.nvidia.com d -n demo --wait=false "
         "--cascade=background", "mutate", "error 404 NotFound"),
    ]


def test_a_kubeconfig_is_named_in_every_record():
    api = FakeApi()
    records: list = []
    kube = Kube("ctx", kubeconfig="/tmp/kc", on_command=records.append, transport=api)
    kube.list_items("Node")
    assert records[0].command == "kubectl --context ctx --kubeconfig /tmp/kc get nodes -o json"


def test_an_empty_context_is_refused_before_any_request():
    with pytest.raises(InputError, match="kube_context: empty context name"):
        Kube("", transport=FakeApi())


def test_a_missing_kubeconfig_context_is_one_input_error(tmp_path: Path):
    config = tmp_path / "kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    with pytest.raises(InputError) as caught:
        Kube("nowhere", kubeconfig=config)
    assert caught.value.input_name == "kube_context" and "'nowhere'" in caught.value.problem


def test_a_refused_read_records_its_status_and_raises_the_tree(fake):
    api, kube, records = fake
    api.fail("GET", "/api/v1/namespaces/demo/secrets/hf", fakekube.forbidden("get", "secrets"))
    with pytest.raises(Forbidden, match='cannot get resource "secrets"'):
        kube.secret_exists("hf", NS)
    assert records[-1].outcome == "error 403 Forbidden"
    assert records[-1].command.endswith("get secrets hf -n demo -o 'jsonpath={.metadata}'")


def test_events_for_a_pod_are_selected_by_involved_object_and_sorted_by_time(fake):
    api, kube, _ = fake
    event = KNOWN["Event"]
    for name, pod, at in (("e2", "a", "2026-01-01T00:00:02Z"), ("e1", "a", "2026-01-01T00:00:01Z"),
                          ("other", "b", "2026-01-01T00:00:00Z")):
        api.put(event, {"metadata": {"name": name, "namespace": NS}, "lastTimestamp": at,
                        "involvedObject": {"name": pod, "kind": "Pod"}})
    assert [e["metadata"]["name"] for e in kube.events_for("a", NS)] == ["e1", "e2"]
    assert api.requests[-1].query["fieldSelector"] == "involvedObject.name=a,involvedObject.kind=Pod"


def test_a_pod_log_is_text_asked_with_its_tail_container_and_previous(fake):
    api, kube, records = fake
    api.logs[(NS, "a")] = "line 1\nline 2\n"
    assert kube.pod_log("a", NS, container="main", tail=2, previous=True) == "line 1\nline 2\n"
    assert api.requests[-1].query == {"container": "main", "tailLines": 2, "previous": "true"}
    assert records[-1].command.endswith("logs a -n demo --tail=2 -c main --previous")


# ------------------------------------------------------------------ mutations


def test_apply_file_applies_every_document_in_order_server_side(fake, tmp_path: Path):
    api, kube, records = fake
    path = tmp_path / "support.yaml"
    path.write_text("apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: cache}\n---\n"
                    "apiVersion: batch/v1\nkind: Job\nmetadata: {name: download}\n")
    applied = kube.apply_file(path, NS, display="inputs/support.yaml")
    assert [(o["kind"], o["metadata"]["namespace"]) for o in applied] == [("PersistentVolumeClaim", NS), ("Job", NS)]
    patches = api.of("PATCH")
    assert [p.path for p in patches] == [f"/api/v1/namespaces/{NS}/persistentvolumeclaims/cache",
                                         f"/apis/batch/v1/namespaces/{NS}/jobs/download"]
    assert patches[0].query == {"fieldManager": "deploy-suite", "force": "true"}
    assert records[0].command.endswith("apply --server-side --field-manager=deploy-suite --force-conflicts "
                                       "-n demo -f inputs/support.yaml")


def test_apply_file_reads_through_the_bounded_yaml_reader(fake, tmp_path: Path):
    api, kube, _ = fake
    path = tmp_path / "dup.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\nmetadata: {name: b}\n")
    with pytest.raises(InputError, match="duplicate key"):
        kube.apply_file(path, NS)
    assert api.requests == []


def test_a_dry_run_is_recorded_as_one(fake):
    api, kube, records = fake
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}, NS, dry_run=True)
    assert api.of("PATCH")[0].query["dryRun"] == "All" and records[0].kind == "dry-run"
    assert "--dry-run=server" in records[0].command


def test_a_document_without_a_name_is_refused_as_input(fake):
    _, kube, records = fake
    with pytest.raises(InputError, match=r"lacks apiVersion, kind or metadata\.name"):
        kube.apply({"apiVersion": "v1", "kind": "ConfigMap"}, NS, source="x.yaml")
    assert records == []


def test_create_conflict_and_delete(fake):
    _, kube, records = fake
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    kube.create(cm, NS)
    with pytest.raises(Conflict):
        kube.create(cm, NS)
    assert kube.delete("ConfigMap", "c", NS) is True
    assert kube.delete("ConfigMap", "c", NS) is False
    with pytest.raises(NotFound):
        kube.delete("ConfigMap", "c", NS, missing_ok=False)
    assert [r.outcome for r in records] == ["ok", "error 409 AlreadyExists", "ok", "error 404 NotFound",
                                           "error 404 NotFound"]


def test_patch_status_merges_the_status(fake):
    api, kube, _ = fake
    api.put(DGD, {"metadata": {"name": "d", "namespace": NS}, "status": {"state": "pending"}})
    out = kube.patch_status(DGD, "d", NS, {"state": "successful"})
    assert out["status"] == {"state": "successful"}
    assert api.requests[-1].path.endswith("/dynamographdeployments/d/status")


# ------------------------------------------------------------------ discovery


def test_known_kinds_need_no_discovery_and_others_are_discovered_once(fake):
    api, kube, records = fake
    assert kube.resource("v1", "Pod") is KNOWN["Pod"]
    assert kube.resource("nvidia.com/v1beta1", "DynamoGraphDeployment").version == "v1beta1"
    assert api.requests == []
    logs = Resource("kwok.x-k8s.io", "v1alpha1", "logs", True, "Logs")
    api.served.append(logs)
    assert kube.resource("kwok.x-k8s.io/v1alpha1", "Logs") == logs
    assert kube.resource("kwok.x-k8s.io/v1alpha1", "Logs") == logs
    assert len(api.requests) == 1 and records[0].command.endswith("api-resources --api-group=kwok.x-k8s.io")
    with pytest.raises(NotFound, match="does not serve kind Nope"):
        kube.resource("kwok.x-k8s.io/v1alpha1", "Nope")


def test_a_group_not_yet_served_is_asked_again_and_fresh_reads_see_a_new_kind(fake):
    api, kube, _ = fake
    # A CRD's group is served moments after it is Established: a 404 then must not be remembered.
    assert kube.group_resources("scheduling.run.ai/v2") == []
    queue = Resource("scheduling.run.ai", "v2", "queues", False, "Queue")
    api.served.append(queue)
    assert kube.resource("scheduling.run.ai/v2", "Queue") == queue
    # A group already cached lacks a kind added later unless asked fresh.
    api.served.append(Resource("scheduling.run.ai", "v2", "bindrequests", True, "BindRequest"))
    assert [r["name"] for r in kube.group_resources("scheduling.run.ai/v2")] == ["queues"]
    assert [r["name"] for r in kube.group_resources("scheduling.run.ai/v2", fresh=True)] == ["queues", "bindrequests"]
