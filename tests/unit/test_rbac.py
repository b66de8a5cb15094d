"""The shipped least-privilege RBAC (deploy_suite/rbac/, docs/security.md): what ``deploy-suite rbac``
prints, and that the Role (with the optional ClusterRole for cluster-scope reads) grants every
request the harness's code makes in fake runs.

The requests are taken where the apiserver would authorize them (the transport: method, path,
query), not from the ledger's kubectl-equivalent records, which name the file of an apply
(``kubectl apply -f applied_manifests/deploy.yaml``) and not the kinds in it. They come from a
fake step 2 run here (every gate, on the sample experiment) and from the unit tests that drive the
procedure against the in-memory apiserver (steps 2 to 7), replayed in a child pytest with
``tests/unit/rbac_probe.py``, which keeps the requests made from ``deploy_suite/procedure/`` only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_suite import cli, rbac, yamlio
from deploy_suite.access.kube import DGD, KNOWN
from deploy_suite.constants import DGD_GROUP, DGD_PLURAL
from deploy_suite.fixtures.experiments.make_experiment import SAMPLE_ROOT
from deploy_suite.procedure import validate
from tests import fakekube

ROOT = Path(__file__).resolve().parents[2]
ROLE, CLUSTER = rbac.rules(rbac.ROLE_FILE), rbac.rules(rbac.CLUSTER_ROLE_FILE)
NS = "dynamo-demo"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
# Every unit test module that drives code against the in-memory apiserver; the probe keeps only the
# requests made from the procedure's code, so a module's own set-up and read-backs do not count.
PROCEDURE_TESTS = tuple(sorted(p.name for p in (ROOT / "tests" / "unit").glob("test_*.py")
                               if p.name != Path(__file__).name and "fakekube" in p.read_text(encoding="utf-8")))
# Cluster-scoped resources: never in a Role (a RoleBinding cannot grant them).
CLUSTER_SCOPED = {"namespaces", "nodes", "persistentvolumes", "storageclasses", "customresourcedefinitions",
                  "validatingwebhookconfigurations", "mutatingwebhookconfigurations", "deviceclasses",
                  "resourceslices", "queues", "clusterroles", "clusterrolebindings", "priorityclasses",
                  "runtimeclasses"}


# ------------------------------------------------------------------ the request as RBAC sees it


def attributes(method: str, path: str, query: dict[str, Any], content_type: str = "") -> list[tuple[str, ...]]:
    """The (verb, group, resource[/subresource], namespace, name) the RBAC authorizer checks for one
    request (the apiserver's RequestInfo); none for discovery (``/apis``, ``/version``, a group's
    resource list), which every authenticated identity may read (system:discovery). A server-side
    apply also needs ``create``: it creates the object when it is missing."""
    parts = path.strip("/").split("/")
    head, rest = (parts[:2], parts[2:]) if parts[0] == "api" else (parts[:3], parts[3:])
    if parts[0] not in {"api", "apis"} or not rest:
        return []
    group = "" if parts[0] == "api" else head[1]
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource, name, sub = rest[0], rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None
    selector = str(query.get("fieldSelector") or "")
    if name is None and selector.startswith("metadata.name=") and "," not in selector:
        name = selector.split("=", 1)[1]  # a list/watch of one object by name
    if method == "WATCH":
        verbs = ["watch"]
    elif method == "GET":
        verbs = ["get"] if rest[1:] else ["list"]
    else:
        verbs = {"POST": ["create"], "DELETE": ["delete"], "PUT": ["update"]}.get(method, ["patch"])
        if method == "PATCH" and content_type == "application/apply-patch+yaml":
            verbs = ["patch", "create"]
    full = f"{resource}/{sub}" if sub else resource
    return [(verb, group, full, namespace or "", name or "") for verb in verbs]


def granted(verb: str, group: str, resource: str, namespace: str, name: str) -> str | None:
    """Which shipped role grants the request: ``Role`` (namespaced, in the workload's namespace),
    ``ClusterRole`` (the optional reads), or None."""
    if namespace and rbac.allows(ROLE, verb, group, resource, name or None):
        return "Role"
    if rbac.allows(CLUSTER, verb, group, resource, name or None):
        return "ClusterRole"
    return None


def needs(requests: Iterable[dict[str, Any]]) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for r in requests:
        out.update(attributes(r["method"], r["path"], r.get("query") or {}, r.get("content_type") or ""))
    return out


def callers(requests: Iterable[dict[str, Any]], want: tuple[str, ...]) -> set[str]:
    return {str(r.get("caller", "step 2 here")) for r in requests
            if want in attributes(r["method"], r["path"], r.get("query") or {}, r.get("content_type") or "")}


# ------------------------------------------------------------------ a fake step 2 on the sample experiment


def _sample_step2(tmp_path: Path, claim_class: str | None = None) -> list[dict[str, Any]]:
    """Every step-2 gate on the sample experiment, against a fake apiserver that has what a healthy
    cluster has (namespace, CRD, a storage class, a GPU node, the secret, the operator): the requests
    it made. ``claim_class`` replaces the model cache's placeholder class (``""``: a pre-provisioned
    volume, which step 2 looks for among the PersistentVolumes)."""
    sample = SAMPLE_ROOT
    tmp_path.mkdir(parents=True, exist_ok=True)
    deploy = tmp_path / "deploy.yaml"
    cache = tmp_path / "model-cache.yaml"
    shutil.copy(sample / "inputs" / "user_provided_dgd.yaml", deploy)
    claim = yamlio.load_one(sample / "inputs" / "model-cache.yaml")
    if claim_class is not None:
        claim["spec"]["storageClassName"] = claim_class
    cache.write_text(yamlio.dump(claim))
    workload = yamlio.load_one(sample / "user_workload.yaml")
    seen: list[dict[str, Any]] = []
    with fakekube.installed() as (api, kube, _):
        api.served = [DGD]
        api.put(KNOWN["Namespace"], {"metadata": {"name": NS}})
        api.put(KNOWN["CustomResourceDefinition"], {"metadata": {"name": f"{DGD_PLURAL}.{DGD_GROUP}"}, "spec": {
            "versions": [{"name": "v1alpha1", "served": True, "storage": True}]}})
        api.put(KNOWN["StorageClass"], {"metadata": {"name": "standard"}, "provisioner": "x",
                                        "volumeBindingMode": "Immediate"})
        api.put(KNOWN["Node"], {"metadata": {"name": "h200-0", "labels": {"nvidia.com/gpu.product": "NVIDIA-H200"}},
                                "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi"}}})
        api.put(KNOWN["Secret"], {"metadata": {"name": "hf-token-secret", "namespace": NS}})
        api.put(KNOWN["PersistentVolume"], {"metadata": {"name": "nfs-models"}, "spec": {
            "storageClassName": "", "capacity": {"storage": "200Gi"}, "accessModes": ["ReadWriteMany"]},
            "status": {"phase": "Available"}})
        report = validate.validate(kube, validate.ValidationInputs(
            NS, deploy, {"model-cache": cache}, deploy, workload, tmp_path))
        seen = [{"method": r.method, "path": r.path, "query": r.query,
                 "content_type": "application/apply-patch+yaml" if r.method == "PATCH" and r.query.get("fieldManager")
                 else ""} for r in api.requests]
    assert report.evidence["secrets"] == {"hf-token-secret": "present"}, report.evidence
    assert report.evidence["nodes"] != "forbidden" and report.evidence["crd"] != "forbidden", report.evidence
    return seen


def _procedure_tests(tmp_path: Path) -> list[dict[str, Any]]:
    out = tmp_path / "requests.jsonl"
    env = {**os.environ, "RBAC_PROBE_OUT": str(out)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.unit.rbac_probe",
         *(f"tests/unit/{name}" for name in PROCEDURE_TESTS)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert len(PROCEDURE_TESTS) >= 10, PROCEDURE_TESTS
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_the_role_and_the_optional_reads_grant_every_request_of_fake_runs(tmp_path: Path) -> None:
    requests = (_sample_step2(tmp_path / "step2") + _sample_step2(tmp_path / "step2-pv", claim_class="")
                + _procedure_tests(tmp_path))
    wanted = needs(requests)
    ungranted = sorted(w for w in wanted if granted(*w) is None)
    assert ungranted == [], "requests the shipped RBAC does not grant (deploy_suite/rbac/):\n" + "\n".join(
        f"{' '.join(w)} (by {', '.join(sorted(callers(requests, w)))})" for w in ungranted)
    # The fake runs reached what a run does: not a vacuous check.
    kinds = {(verb, resource) for verb, _, resource, _, _ in wanted}
    assert {("get", "secrets"), ("patch", "dynamographdeployments"), ("create", "dynamographdeployments"),
            ("delete", "dynamographdeployments"), ("watch", "pods"), ("get", "pods/log"), ("list", "events"),
            ("patch", "persistentvolumeclaims"), ("create", "jobs"), ("list", "nodes"),
            ("list", "storageclasses"), ("get", "customresourcedefinitions"),
            ("get", "namespaces"), ("list", "persistentvolumes")} <= kinds, sorted(kinds)
    print("\n".join(f"{' '.join(w):90} {granted(*w)}" for w in sorted(wanted)))  # pytest -s: the list
    # Secrets: get by name only, never a list or a watch (they would return values).
    assert {(v, n != "") for v, _, r, _, n in wanted if r == "secrets"} == {("get", True)}
    # Namespaced requests are the Role's; only cluster-scope reads need the optional ClusterRole.
    for want in wanted:
        if granted(*want) == "ClusterRole":
            assert want[0] in {"get", "list", "watch"}, want


def test_an_ungranted_request_is_caught() -> None:
    """The checker is not blind: a list of secrets, a delete of a Job, a node patch are refused."""
    for method, path, query in (("GET", f"/api/v1/namespaces/{NS}/secrets", {}),
                                ("DELETE", f"/apis/batch/v1/namespaces/{NS}/jobs/j", {}),
                                ("PATCH", "/api/v1/nodes/n", {}),
                                ("GET", f"{CRDS}/other.example.com", {}), ("GET", CRDS, {})):
        assert [granted(*a) for a in attributes(method, path, query)] == [None], (method, path)
    # A server-side apply needs create as well as patch: ConfigMaps are granted both, Services neither.
    assert {granted(*a) for a in attributes("PATCH", f"/api/v1/namespaces/{NS}/configmaps/c", {},
                                            "application/apply-patch+yaml")} == {"Role"}
    assert {granted(*a) for a in attributes("PATCH", f"/api/v1/namespaces/{NS}/services/s", {},
                                            "application/apply-patch+yaml")} == {None}
    # A watch of one object by name is a watch with that resource name.
    assert attributes("WATCH", f"/apis/{DGD.group}/v1alpha1/namespaces/{NS}/{DGD.plural}",
                      {"fieldSelector": "metadata.name=demo"}) == [("watch", DGD.group, DGD.plural, NS, "demo")]
    assert attributes("GET", "/apis", {}) == [] and attributes("GET", "/apis/nvidia.com/v1alpha1", {}) == []


# ------------------------------------------------------------------ the manifests themselves


def test_the_role_is_namespaced_and_the_cluster_role_reads_only() -> None:
    for rule in ROLE:
        assert not set(rule["resources"]) & CLUSTER_SCOPED, rule
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
    for rule in CLUSTER:
        assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
        assert "secrets" not in rule["resources"] and "*" not in rule["resources"] + rule["apiGroups"], rule
    # Secrets: get only (by name); deletes only of DGDs (step 3's retire, step 6's teardown).
    assert [r["verbs"] for r in ROLE if "secrets" in r["resources"]] == [["get"]]
    assert {res for r in ROLE if "delete" in r["verbs"] for res in r["resources"]} == {"dynamographdeployments"}
    # The CRD read is limited to the DGD's own CRD.
    [crd] = [r for r in CLUSTER if "customresourcedefinitions" in r["resources"]]
    assert crd["resourceNames"] == [f"{DGD_PLURAL}.{DGD_GROUP}"]


def test_deploy_suite_rbac_prints_the_manifests_for_a_namespace(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["rbac", "--namespace", "team-a", "--service-account", "bot"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["ServiceAccount", "Role", "RoleBinding"]
    assert {d["metadata"]["namespace"] for d in docs} == {"team-a"}
    assert docs[2]["subjects"] == [{"kind": "ServiceAccount", "name": "bot", "namespace": "team-a"}]
    assert docs[1]["rules"] == ROLE

    assert cli.main(["rbac", "--namespace", "team-a", "--user", "jane@example.com", "--cluster-reads"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"]
    user = [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "jane@example.com"}]
    assert docs[1]["subjects"] == user and docs[3]["subjects"] == user
    assert docs[2]["rules"] == CLUSTER and docs[3]["roleRef"]["name"] == docs[2]["metadata"]["name"]
    assert "${" not in yaml.safe_dump_all(docs)


def test_a_bad_namespace_is_one_line_and_a_non_zero_exit(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["rbac", "--namespace", "Team_A"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and "--namespace" in out.err and "fix:" in out.err


def test_the_manifests_are_package_data() -> None:
    """After a pip install the files are where ``deploy-suite rbac`` reads them (pyproject's package-data)."""
    assert '"rbac/*.yaml"' in (ROOT / "pyproject.toml").read_text()
    assert rbac.template(rbac.ROLE_FILE).startswith("# The namespace-scoped identity")
