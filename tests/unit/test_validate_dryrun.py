"""Step 2's dry-run judged as the request step 5 makes (deploy_suite.procedure.dryrun): a same-named candidate
whose live predecessor step 3 deletes is dry-run as a create under a derived name; create rules are
still caught; an unreachable webhook is a platform fault, not the manifest's."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_suite.access.kube import DGD, KNOWN, Kube, Obj
from deploy_suite.errors import LedgerError, StepBlocked
from deploy_suite.judges import ownership
from deploy_suite.procedure import dryrun, validate
from deploy_suite.procedure.validate import Preflight, ValidationReport
from deploy_suite.record import experiment, ledger
from tests import fakekube
from tests.fakekube import FakeApi

NS = "demo"
MINE = ownership.field_manager("20260601T120000Z-demo")
DATA = Path(__file__).parent / "data"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
PREV_UID = "uid-prev"


@pytest.fixture
def fake() -> Iterator[tuple[FakeApi, Kube]]:
    with fakekube.installed(field_manager=MINE) as (api, kube, _records):
        yield api, kube


def candidate(path: str = "dgd_v1alpha1_agg.yaml", name: str = "llm") -> Obj:
    doc: Obj = next(d for d in yaml.safe_load_all((DATA / path).read_text()) if d["kind"] == "DynamoGraphDeployment")
    doc["metadata"] = {"name": name, "namespace": NS}
    return doc


def live(api: FakeApi, doc: Obj, manager: str = MINE, uid: str = PREV_UID) -> Obj:
    """The previous iteration's DGD as the server holds it (applied by ``manager``)."""
    stored = yaml.safe_load(yaml.safe_dump(doc))
    stored["metadata"].update(uid=uid, managedFields=[{"manager": manager, "operation": "Apply"}])
    return api.put(DGD, stored)


def topology_is_immutable(operation: str, body: Obj, current: Obj | None) -> BaseException | None:
    """The operator's update rule: components may not be added or removed on update."""
    if operation == "UPDATE" and current is not None and set(body["spec"]["services"]) != set(
            current["spec"]["services"]):
        return fakekube.status(422, "Invalid", 'admission webhook "vdynamographdeployment.kb.io" denied the '
                               "request: spec.services: Forbidden: component topology is immutable")
    return None


def image_required(operation: str, body: Obj, current: Obj | None) -> BaseException | None:
    """A create rule: every component names its image."""
    for svc in (body.get("spec") or {}).get("services", {}).values():
        if not (svc.get("extraPodSpec") or {}).get("mainContainer", {}).get("image"):
            return fakekube.status(422, "Invalid", 'admission webhook "vdynamographdeployment.kb.io" denied the '
                                   "request: image is required")
    return None


def run(kube: Kube, doc: Obj, retiring: tuple[str, str] | None = (NS, "llm"), own_uid: str | None = None,
        support: list[Obj] | None = None) -> dryrun.Verdicts:
    docs = {"deploy": [doc], **({"model-cache": support} if support else {})}
    displays = {"deploy": "artifacts/deploy-iter-001/applied_manifests/deploy.yaml",
                "model-cache": "artifacts/deploy-iter-001/applied_manifests/model-cache.yaml"}
    return dryrun.dry_run_all(kube, docs, displays, NS, retiring, own_uid, PREV_UID)


# ------------------------------------------------------------------ the derived name


@pytest.mark.parametrize("name", ["a", "ab", "llm", "qwen-a", "qwen-ag", "qwen-agg", "x" * 63,
                                  "llama-3-70b-disagg-kv-routing", "d-----------1"])
def test_the_derived_name_is_as_long_a_dns_label_deterministic_and_new(name: str) -> None:
    derived = dryrun.derived_name(name)
    assert len(derived) == len(name) and DNS_LABEL.match(derived) and derived != name
    assert dryrun.derived_name(name) == derived and dryrun.derived_name(name, 1) != derived


# ------------------------------------------------------------------ the mode


def test_agg_to_disagg_under_the_same_name_is_judged_as_the_create_it_will_be(fake: tuple[FakeApi, Kube]) -> None:
    api, kube = fake
    api.admission.append(topology_is_immutable)
    previous = live(api, candidate("dgd_v1alpha1_agg.yaml"))
    disagg = candidate("dgd_v1alpha1_disagg.yaml")

    out = run(kube, disagg)

    assert out.blockers == []
    record = out.evidence["dgd_dry_run"]
    assert record["mode"] == "create-as" and record["dgd"] == "llm" and record["name"] == dryrun.derived_name("llm")
    assert record["result"] == "accepted" and "deleted by step 3" in record["reason"]
    # What an in-place update would have met is kept, as information only.
    assert record["update_verdict"].startswith("rejected:") and "component topology is immutable" in \
        record["update_verdict"]
    assert out.evidence["dry_run"] == [{"file": "artifacts/deploy-iter-001/applied_manifests/deploy.yaml",
                                        "object": "DynamoGraphDeployment/llm", "as": record["name"],
                                        "result": "accepted"}]
    # Only dry-runs: the live DGD is untouched and nothing was created under the derived name.
    assert all(r.query.get("dryRun") == "All" for r in api.of("PATCH")) and not api.of("POST")
    assert [r.path.rsplit("/", 1)[1] for r in api.of("PATCH")] == [record["name"], "llm"]
    assert api.objects[("/apis/nvidia.com/v1alpha1", "dynamographdeployments")] == {(NS, "llm"): previous}


def test_create_as_still_catches_create_rules(fake: tuple[FakeApi, Kube]) -> None:
    api, kube = fake
    api.admission.append(image_required)
    live(api, candidate())
    broken = candidate()
    del broken["spec"]["services"]["Frontend"]["extraPodSpec"]["mainContainer"]["image"]

    out = run(kube, broken)

    [(cls, message, fix)] = out.blockers
    assert cls == "dry-run" and "image is required" in message and fix == dryrun.MANIFEST_FIX
    assert out.evidence["dgd_dry_run"]["mode"] == "create-as"


@pytest.mark.parametrize(("setup", "retiring", "own_uid", "mode", "why"), [
    ("none", (NS, "llm"), None, "create", "no DGD of this name is live"),
    ("ours", (NS, "llm"), None, "create-as", "previous iteration's"),
    ("ours", (NS, "llm"), PREV_UID, "update", "own DGD (a rerun)"),  # step 5 already applied it: kept
    ("ours", None, None, "update", "step 3 does not delete"),  # iteration 0: nothing is retired
    ("ours", (NS, "other"), None, "update", "step 3 does not delete"),  # the previous DGD had another name
    ("other-uid", (NS, "llm"), None, "update", "step 3 does not delete"),  # re-created since: not retired
    # Another tool applied it (another field manager), its ledger names it with this uid: step 3 retires it.
    ("foreign", (NS, "llm"), None, "create-as", "previous iteration's"),
    ("foreign-other-uid", (NS, "llm"), None, "update", "step 3 does not delete"),  # ownership blocks it
])
def test_the_mode_follows_whose_the_live_dgd_is(fake: tuple[FakeApi, Kube], setup: str,
                                                 retiring: tuple[str, str] | None, own_uid: str | None,
                                                 mode: str, why: str) -> None:
    api, kube = fake
    if setup != "none":
        live(api, candidate(), manager="alice" if setup.startswith("foreign") else MINE,
             uid="uid-someone" if setup.endswith("other-uid") else PREV_UID)
    found = dryrun.plan(kube, NS, "llm", retiring, own_uid, PREV_UID)
    assert (found.mode, found.name == "llm") == (mode, mode != "create-as") and why in found.reason


def test_a_foreign_same_named_dgd_is_still_judged_as_the_update(fake: tuple[FakeApi, Kube]) -> None:
    api, kube = fake
    api.admission.append(topology_is_immutable)
    live(api, candidate(), manager="alice", uid="uid-someone")  # no ledger of the experiment names it
    out = run(kube, candidate("dgd_v1alpha1_disagg.yaml"))
    [(cls, message, _)] = out.blockers
    assert cls == "dry-run" and "component topology is immutable" in message
    assert out.evidence["dgd_dry_run"]["mode"] == "update" and "update_verdict" not in out.evidence["dgd_dry_run"]


def test_a_taken_derived_name_moves_to_the_next_one(fake: tuple[FakeApi, Kube]) -> None:
    api, kube = fake
    live(api, candidate())
    taken = candidate(name=dryrun.derived_name("llm"))
    api.put(DGD, taken)
    found = dryrun.plan(kube, NS, "llm", (NS, "llm"), None, PREV_UID)
    assert found.mode == "create-as" and found.name == dryrun.derived_name("llm", 1)


# ------------------------------------------------------------------ platform faults


@pytest.mark.parametrize(("text", "hook"), [
    ('Internal error occurred: failed calling webhook "vdynamographdeployment.kb.io": failed to call webhook: '
     'Post "https://dynamo-webhook.dynamo-system.svc:443/validate?timeout=10s": dial tcp 10.0.0.7:443: connect: '
     "connection refused", "vdynamographdeployment.kb.io"),
    ('Internal error occurred: failed calling webhook "vdynamographdeployment.kb.io": failed to call webhook: '
     'Post "https://x": no endpoints available for service "dynamo-webhook-service"',
     "vdynamographdeployment.kb.io"),
    ("conversion webhook for nvidia.com/v1beta1, Kind=DynamoGraphDeployment failed: Post "
     '"https://dynamo-webhook.dynamo-system.svc:443/convert?timeout=30s": context deadline exceeded',
     "nvidia.com/v1beta1, Kind=DynamoGraphDeployment"),
    ("conversion webhook for nvidia.com/v1alpha1, Kind=DynamoGraphDeployment failed: x509: certificate signed by "
     "unknown authority", "nvidia.com/v1alpha1, Kind=DynamoGraphDeployment"),
    ('no endpoints available for service "dynamo-operator-webhook-service"', "dynamo-operator-webhook-service"),
])
def test_an_unreachable_webhook_is_named(text: str, hook: str) -> None:
    assert dryrun.webhook_fault(text) == hook


@pytest.mark.parametrize("text", [
    'admission webhook "vdynamographdeployment.kb.io" denied the request: image is required',
    'DynamoGraphDeployment.nvidia.com "llm" is invalid: spec.services: Required value',
    'admission webhook "vdynamographdeployment.kb.io" denied the request: model endpoint: connection refused',
])
def test_a_webhooks_own_refusal_is_the_manifests(text: str) -> None:
    assert dryrun.webhook_fault(text) is None


def test_an_unreachable_webhook_blocks_as_a_platform_fault_and_charges_no_budget(
        fake: tuple[FakeApi, Kube], tmp_path: Path) -> None:
    api, kube = fake
    api.admission.append(lambda *_: fakekube.status(
        500, "InternalError", 'Internal error occurred: failed calling webhook "vdynamographdeployment.kb.io": '
        'failed to call webhook: Post "https://dynamo-webhook.dynamo-system.svc:443/validate": dial tcp '
        "10.0.0.7:443: connect: connection refused"))

    out = run(kube, candidate(), retiring=None)

    [(cls, message, fix)] = out.blockers
    assert cls == "platform" and "vdynamographdeployment.kb.io" in message and "not the candidate's" in message
    assert fix.startswith("the Dynamo operator's webhook is unreachable: check the operator pod")
    # A platform block stops step 2 as `blocked`: the ledger counts no failed attempt, no failed run.
    report = ValidationReport()
    for blocker in out.blockers:
        report.block(*blocker)
    stop = Preflight(report, None, None, []).blocked()
    assert isinstance(stop, StepBlocked) and stop.category == "platform"
    ledger_dir = tmp_path / "artifacts" / "deploy-iter-000"
    ledger_dir.mkdir(parents=True)
    (ledger_dir / "deployment_ledger.json").write_text('{"status": "blocked", "failed_attempts": []}')
    assert [experiment.failed_deploys(s) for s in experiment.ledgers(tmp_path)] == [0]


def test_support_documents_are_dry_run_as_written(fake: tuple[FakeApi, Kube]) -> None:
    _, kube = fake
    pvc: dict[str, Any] = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                           "metadata": {"name": "model-cache"}, "spec": {}}
    out = run(kube, candidate(), retiring=None, support=[pvc])
    assert [(r["object"], r["result"]) for r in out.evidence["dry_run"]] == [
        ("DynamoGraphDeployment/llm", "accepted"), ("PersistentVolumeClaim/model-cache", "accepted")]
    assert out.evidence["dgd_dry_run"]["mode"] == "create"


def test_the_ledger_records_the_mode_and_its_schema_checks_it(fake: tuple[FakeApi, Kube]) -> None:
    api, kube = fake
    live(api, candidate())
    out = run(kube, candidate())
    report = ValidationReport(evidence=dict(out.evidence))
    report.evidence["platform"] = {"kubernetes_version": "v1.36.1", "operator": {"state": "unknown"}}
    data = ledger.new_document(deploy_id="deploy-iter-001", iteration=1, provenance="user-interviewer",
                               step_names=["step2_validate"])
    Preflight(report, None, None, []).record(ledger.Ledger(data))
    ledger.validate(data)
    assert data["preflight"]["dgd_dry_run"]["mode"] == "create-as"
    data["preflight"]["dgd_dry_run"]["mode"] = "sideways"
    with pytest.raises(LedgerError, match="preflight/dgd_dry_run/mode"):
        ledger.validate(data)


def test_step2_as_a_whole_dry_runs_the_same_named_candidate_as_a_create(
        fake: tuple[FakeApi, Kube], tmp_path: Path) -> None:
    api, kube = fake
    api.served.append(DGD)
    api.admission.append(topology_is_immutable)
    api.put(KNOWN["Namespace"], {"metadata": {"name": NS}})
    api.put(KNOWN["CustomResourceDefinition"], {"metadata": {"name": validate.DGD_CRD}})
    live(api, candidate("dgd_v1alpha1_agg.yaml"))
    deploy = tmp_path / "deploy.yaml"
    deploy.write_text(yaml.safe_dump(candidate("dgd_v1alpha1_disagg.yaml")))
    report = validate.validate(kube, validate.ValidationInputs(
        namespace=NS, deploy_path=deploy, support_paths={}, baseline_dgd_path=None, workload={},
        display_root=tmp_path, retiring=(NS, "llm"), retiring_uid=PREV_UID))
    found = [b.category for b in report.blockers]
    assert "dry-run" not in found and "platform" not in found
    assert report.evidence["dgd_dry_run"]["mode"] == "create-as"
    assert report.evidence["platform"]["dgd_api"]["used"]["DynamoGraphDeployment"] == "v1alpha1"
