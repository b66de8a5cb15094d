"""Inputs the contracts allow, as a user runs ``pytest --iter=N`` on the offline cluster: none is a dead end.

Each test plays user-interviewer (and, for iteration 1, the generator and challenger) writing what
the contracts leave open, then runs the suite and asserts the ledger's verdict, the recorded
patches and limitations, and the cluster's objects (docs/procedure.md, "Unknowns", "Pinned knobs",
"Budgets", "Support manifests from outside EXP_ROOT", "Exported manifests", "A candidate refused for
its own reasons"):

* unknowns written ``null``, a pinned name the knob table does not know and a ``manifest.yaml``
  whose session start is under another key: iteration 0 ends ready, each recorded as what it is;
  then a ``--dtype bfloat16 -> float16`` candidate is blocked by the pinned ``precision``;
* a DGD exported from a live cluster (another namespace, the operator's annotations, server-set
  metadata, a status) with its model-cache manifest handed over from the recipe's checkout: ready,
  every change recorded as a patch of the run-scoped copy, the source untouched;
* a DGD refused for its own reasons once its hashes verified: a ``blocked`` ledger listing them.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy_suite import yamlio
from deploy_suite.access.kube import DGD
from deploy_suite.fixtures.experiments.make_experiment import refresh, stage_candidate
from deploy_suite.model.files import sha256_file
from deploy_suite.record import ledger
from deploy_suite_offline.cluster import OfflineCluster
from tests import support
from tests.support import outcomes

pytestmark = [pytest.mark.cluster]

SAMPLE_DGD = "demo-agg"
WORKER_ARGS = "python3 -m dynamo.vllm --model Qwen/Qwen3-0.6B --served-model-name Qwen/Qwen3-0.6B"


@pytest.fixture
def target(offline_cluster: OfflineCluster, tmp_path: Path) -> Iterator[support.Target]:
    """A fresh admin-made namespace; afterwards every ledger the test produced must be schema-valid."""
    made = support.admin_target(offline_cluster, tmp_path, "e2e-lenient", support.Target)
    with made as target:
        yield target
    for path in tmp_path.rglob(ledger.LEDGER_NAME):  # read_ledger validates against the schema
        assert support.read_ledger(path)["deploy_id"].startswith("deploy-iter-"), path


def _edit_yaml(path: Path, edit: Any) -> None:
    data = yamlio.load_one(path)
    edit(data)
    path.write_text(yamlio.dump(data), encoding="utf-8")


def _with_dtype(path: Path, dtype: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert WORKER_ARGS in text
    path.write_text(text.replace(WORKER_ARGS, f"{WORKER_ARGS} --dtype {dtype}"), encoding="utf-8")


def test_null_unknowns_an_unknown_pinned_knob_and_another_session_key_end_ready_then_a_dtype_change_blocks(
        target: support.Target) -> None:
    exp = target.experiment()
    root = exp.exp_root
    _with_dtype(root / "inputs" / "user_provided_dgd.yaml", "bfloat16")

    def unknowns(data: dict[str, Any]) -> None:
        data["model"]["revision"] = None
        data["traffic"]["concurrency"] = None
        data["deployment"]["origin_source"] = None
        data["resources"]["pinned"] = ["precision", "router_mode", "max_model_len", "kv_offload_policy"]
        data["budgets"]["wall_clock_hours"] = 24

    _edit_yaml(root / "user_workload.yaml", unknowns)

    def session_under_another_key(data: dict[str, Any]) -> None:
        started = data.pop("session_started_at")
        data.pop("created_at")
        data["session"] = {"opened": started}

    _edit_yaml(root / "manifest.yaml", session_under_another_key)
    exp = refresh(root)

    run = target.run(exp)
    assert run.returncode == 0, run.output[-3000:]
    led = run.ledger()
    assert led["status"] == "ready", (outcomes(led), led["blockers"])
    limits = [x for x in led["limitations"] if isinstance(x, str)]
    assert any("resources.pinned knob 'kv_offload_policy' has no mapping" in x for x in limits), limits
    assert any(x.startswith("wall-clock budget unknown (budgets.wall_clock_hours is 24)") for x in limits), limits
    pinned = led["preflight"]["pinned"]
    assert pinned["not_compared"] == ["kv_offload_policy"]
    assert {k: v["same"] for k, v in pinned["knobs"].items()} == {"precision": True, "router_mode": True,
                                                                   "max_model_len": True}
    assert pinned["knobs"]["precision"]["baseline"] == "unstated, dtype bf16"
    assert led["budget"]["wall_clock_hours"]["spent"] is False and led["budget"]["session_started_at"] is None

    # Iteration 1: the challenger's candidate changes the activation dtype the user pinned (precision).
    draft = root / "candidates" / "iter-001" / "deploy-draft.yaml"
    _with_dtype(draft, "float16")
    live0 = target.kube.get(DGD, SAMPLE_DGD, target.namespace)
    run1 = target.run(exp, iteration=1, handoff=stage_candidate(root, 1))
    assert run1.returncode != 0, run1.output[-3000:]
    led1 = run1.ledger()
    got = outcomes(led1)
    assert led1["status"] == "blocked" and got["step2_validate"] == "blocked", got
    assert led1["blockers"][-1]["class"] == "pinned"
    assert led1["blockers"][-1]["message"] == ("pinned knob precision changed: baseline 'unstated, dtype bf16', "
                                              "candidate 'unstated, dtype fp16'")
    assert [c for c in led1["commands"] if c["kind"] == "mutate"] == []
    assert target.kube.get(DGD, SAMPLE_DGD, target.namespace)["metadata"]["uid"] == live0["metadata"]["uid"]


EXPORTED = {"uid": "6f0c1c2e-0000-4000-8000-000000000001", "resourceVersion": "48213", "generation": 4,
            "creationTimestamp": "2026-05-30T08:00:00Z", "namespace": "dynamo-prod",
            "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update"}],
            "annotations": {"nvidia.com/workload-provider": "grove", "nvidia.com/current-worker-hash-v2": "9f3b2c1a",
                            "nvidia.com/dynamo-operator-origin-version": "1.6.1"}}


def test_an_exported_dgd_and_a_support_manifest_from_the_recipe_checkout_end_ready_with_recorded_patches(
        target: support.Target, tmp_path: Path) -> None:
    exp = target.experiment()
    root = exp.exp_root
    dgd_path = root / "inputs" / "user_provided_dgd.yaml"

    def exported(doc: dict[str, Any]) -> None:
        doc["metadata"].update(json.loads(json.dumps(EXPORTED)))
        doc["status"] = {"state": "successful", "conditions": [{"type": "Ready", "status": "True"}]}

    _edit_yaml(dgd_path, exported)
    _edit_yaml(root / "user_workload.yaml", lambda data: data["resources"].update({"pinned": None}))  # unknown
    checkout = tmp_path / "dynamo" / "recipes" / "qwen3-0.6b" / "vllm" / "agg"
    checkout.mkdir(parents=True)
    cache = checkout / "model-cache.yaml"
    shutil.move(root / "inputs" / "model-cache.yaml", cache)
    _edit_yaml(cache, lambda doc: doc["metadata"].update({"namespace": "dynamo-prod"}))
    exp = refresh(root)
    _edit_yaml(exp.handoff0, lambda data: data["support"].update({"model-cache": str(cache)}))
    sources = {p: sha256_file(p) for p in (dgd_path, cache)}

    run = target.run(exp)
    assert run.returncode == 0, run.output[-3000:]
    led = run.ledger()
    assert led["status"] == "ready", (outcomes(led), led["blockers"])
    assert {p: sha256_file(p) for p in sources} == sources  # the handed-off files are never modified
    assert led["preflight"]["pinned"] == {} and led["preflight"]["pinned_ok"] is True  # pinned: null compares nothing

    entry = next(m for m in led["applied_manifests"] if m["type"] == "model-cache")
    assert entry["source_path"] == str(cache.resolve()) and entry["source_sha256"] == sources[cache]
    assert led["steps"][0]["evidence"]["outside_exp_root"] == {
        "model-cache": {"path": str(cache.resolve()), "sha256": sources[cache]}}

    deploy_copy = "artifacts/deploy-iter-000/applied_manifests/deploy.yaml"
    by_pointer = {(p["file"], p["changes"][0]["pointer"]): p for p in led["patches"]
                  if p.get("changes") and p.get("document")}
    expected = {"/metadata/uid", "/metadata/resourceVersion", "/metadata/generation", "/metadata/creationTimestamp",
                "/metadata/managedFields", "/metadata/namespace", "/status",
                "/metadata/annotations/nvidia.com~1workload-provider",
                "/metadata/annotations/nvidia.com~1current-worker-hash-v2",
                "/metadata/annotations/nvidia.com~1dynamo-operator-origin-version"}
    assert {ptr for file, ptr in by_pointer if file == deploy_copy} == expected
    namespace_patch = by_pointer[(deploy_copy, "/metadata/namespace")]
    assert namespace_patch["changes"] == [{"op": "replace", "pointer": "/metadata/namespace", "before": "dynamo-prod",
                                           "after": target.namespace}]
    assert namespace_patch["document"] == f"DynamoGraphDeployment/{SAMPLE_DGD}"
    assert "kubernetes.namespace" in namespace_patch["reason"] and namespace_patch["source"] == "automatic"
    provider = by_pointer[(deploy_copy, "/metadata/annotations/nvidia.com~1workload-provider")]
    assert (provider["changes"][0]["before"], provider["changes"][0]["after"]) == ("grove", None)
    assert "consts.go" in provider["reason"]
    cache_patch = by_pointer[("artifacts/deploy-iter-000/applied_manifests/model-cache.yaml", "/metadata/namespace")]
    assert (cache_patch["changes"][0]["before"], cache_patch["changes"][0]["after"]) == ("dynamo-prod",
                                                                                        target.namespace)

    # The cluster: the DGD and the claim in the contract's namespace, created fresh (not the exported uid).
    live = target.kube.get(DGD, SAMPLE_DGD, target.namespace)
    assert live["metadata"]["uid"] != EXPORTED["uid"] and live["status"]["state"] == "successful"
    assert target.kube.get_or_none("PersistentVolumeClaim", "model-cache", target.namespace) is not None
    assert target.kube.get_or_none("Namespace", "dynamo-prod") is None

    # A rerun keeps the patched copies (what the ledger recorded last) and records no second patch.
    again = target.run(exp)
    assert again.returncode == 0, again.output[-3000:]
    led2 = again.ledger()
    assert led2["patches"] == led["patches"]
    assert "deploy.yaml" in led2["resumes"][-1]["kept"]


def test_a_dgd_refused_for_its_own_reasons_after_its_hashes_verified_leaves_a_blocked_ledger(
        target: support.Target) -> None:
    exp = target.experiment()
    root = exp.exp_root
    dgd_path = root / "inputs" / "user_provided_dgd.yaml"
    long_name = "demo-agg-" + "x" * 60
    text = dgd_path.read_text(encoding="utf-8").replace('gpu: "1"', 'gpu: "0.5"')
    dgd_path.write_text(text.replace(f"name: {SAMPLE_DGD}", f"name: {long_name}", 1), encoding="utf-8")
    exp = refresh(root)

    run = target.run(exp)
    assert run.returncode == 1, run.output[-3000:]
    led = run.ledger()
    assert led["status"] == "blocked" and outcomes(led)["step1_inputs"] == "blocked"
    assert all(s == "skipped" for s in list(outcomes(led).values())[1:]), outcomes(led)
    messages = [b["message"] for b in led["blockers"]]
    assert len(messages) == 2 and {b["class"] for b in led["blockers"]} == {"input"}
    assert any("'0.5' is not a whole number of GPUs" in m for m in messages), messages
    assert any(f"metadata.name {long_name!r} ({len(long_name)} characters)" in m for m in messages), messages
    assert "(and 1 more incompatibilities in the ledger)" in messages[-1]
    assert led["source_dgd"]["sha256"] == exp.dgd_sha256 and led["dgd_name"] == long_name
    assert [c for c in led["commands"] if c["kind"] == "mutate"] == [] and led["applied_manifests"] == []
    assert target.kube.get_or_none(DGD, long_name, target.namespace) is None
    assert "incompatibilities in the ledger" in run.output
