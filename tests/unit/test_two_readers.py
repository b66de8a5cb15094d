"""Two readers of one DGD: the harness's (``deploy_suite.model.dgd``) and the operator replica's own
(``deploy_suite_offline.operator_sim.spec``, with the plan it builds). The replica is written from the
operator's API types so that it is an independent reading; this test runs both over every DGD the
project has (the recipes of the unit, integration, e2e, kind and security tests, the sample
experiment's, the generated experiment's) and lists where they disagree.

Each disagreement found when the replica got its own reader was settled by the operator's source
and fixed on the side that was wrong (CHANGELOG.md, "Two readers"); what remains is in
:data:`BY_DESIGN`, each with its reason. A new disagreement fails the test with the list.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy_suite.constants import DGD_KIND
from deploy_suite.errors import InputError
from deploy_suite.model.dgd import Dgd, from_documents, parse_dgd
from deploy_suite.yamlio import load_all
from deploy_suite_offline.errors import ReconcileError
from deploy_suite_offline.operator_sim.plan import Plan, build_plan
from deploy_suite_offline.operator_sim.spec import Graph, read, split_args
from fixtures.experiments import synthetic

ROOT = Path(__file__).resolve().parents[2]
# Where the project keeps DGDs: the tests' data and corpora, the sample experiment.
SOURCES = ("tests", "fixtures/experiments")

# Disagreements that are intended, (file name, DGD, component, field) -> why. The harness reads for
# every operator generation, the replica plays the newest one.
BY_DESIGN: dict[tuple[str, str, str, str], str] = {
    ("main-entry-v1alpha1.yaml", "vllm", "Frontend", "type"):
        "componentType main is the entry component of operators before the frontend type: the harness reads "
        "it as the frontend they served (docs/operator-generations.md); the newest operator cannot convert it "
        "to the v1beta1 enum and the replica refuses it (api/v1beta1/common.go)",
    ("edges.yaml", "edges-beta", "", "frontend service"):
        "the harness names the Service a component running the frontend would be reached by, whatever its type, "
        "so that step 6 can say the operator did not create it (docs/operator-generations.md, 'Names the "
        "operator gives'); the operator, and the replica, create the frontend Service (port http 8000) only for "
        "a component typed frontend",
}


def dgd_files() -> Iterator[Path]:
    for base in SOURCES:
        for path in sorted((ROOT / base).rglob("*.y*ml")):
            if path.suffix in (".yaml", ".yml") and f"kind: {DGD_KIND}" in path.read_text(errors="replace"):
                yield path


def generated() -> list[tuple[str, dict[str, Any]]]:
    """The generated experiment's DGDs (its iterations differ in replicas, tags and flags)."""
    with tempfile.TemporaryDirectory() as tmp:
        synthetic.write_synthetic_experiment(Path(tmp), 4)
        return [(f"synthetic/{path.parent.parent.name}", doc) for path in sorted(Path(tmp).rglob("deploy.yaml"))
                for doc in load_all(path) if isinstance(doc, dict) and doc.get("kind") == DGD_KIND]


def documents() -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for path in dgd_files():
        try:
            docs = load_all(path)
        except InputError:
            continue  # not YAML the suite accepts (the security corpus): neither reader sees it
        out += [(path.name, d) for d in docs if isinstance(d, dict) and d.get("kind") == DGD_KIND]
    return out + generated()


def admitted(doc: dict[str, Any]) -> dict[str, Any]:
    """The object as the replica receives it from the apiserver: namespaced, with a uid."""
    obj = copy.deepcopy(doc)
    meta = obj.setdefault("metadata", {})
    meta.setdefault("namespace", "ns")
    meta.setdefault("uid", "uid-1")
    return obj


def harness_view(dgd: Dgd) -> dict[tuple[str, str], Any]:
    view: dict[tuple[str, str], Any] = {("", "components"): [c.name for c in dgd.components],
                                        ("", "frontend service"): dgd.frontend_service}
    for c in dgd.components:
        sidecar = c.frontend_sidecar
        view.update({
            # "other" is the harness's word for an unset type, which the operator keeps empty.
            (c.name, "type"): "" if c.raw_type is None and c.type == "other" else c.type,
            (c.name, "replicas"): c.replicas, (c.name, "node count"): c.node_count,
            (c.name, "multinode"): c.multinode, (c.name, "gpus per pod"): c.gpus_per_pod,
            (c.name, "gpu resource"): c.gpu_resource, (c.name, "requests per pod"): dict(c.requests),
            (c.name, "image"): c.image, (c.name, "command"): list(c.command), (c.name, "args"): list(c.args),
            (c.name, "tokens"): list(c.tokens), (c.name, "served model"): c.served_model,
            (c.name, "frontend sidecar"): sidecar.container if sidecar else None,
            (c.name, "sidecar image"): sidecar.image if sidecar else None,
            (c.name, "sidecar tokens"): list(sidecar.tokens) if sidecar else None,
        })
    return view


def replica_view(graph: Graph, plan: Plan) -> dict[tuple[str, str], Any]:
    view: dict[tuple[str, str], Any] = {("", "components"): [c.name for c in graph.components],
                                        ("", "frontend service"): next(
                                            (s["metadata"]["name"] for s in plan.services), None)}
    for c in graph.components:
        main = c.container("main") or {}
        sidecar = plan.sidecars.get(c.name)
        view.update({
            (c.name, "type"): c.type, (c.name, "replicas"): c.replicas, (c.name, "node count"): c.node_count,
            (c.name, "multinode"): c.multinode, (c.name, "gpus per pod"): c.gpus_per_pod,
            (c.name, "gpu resource"): c.gpu_resource, (c.name, "requests per pod"): c.requests_per_pod,
            (c.name, "image"): c.image, (c.name, "command"): [str(t) for t in main.get("command") or []],
            (c.name, "args"): [str(t) for t in main.get("args") or []],
            (c.name, "tokens"): list(c.tokens()), (c.name, "served model"): c.served_model,
            (c.name, "frontend sidecar"): sidecar,
            (c.name, "sidecar image"): _sidecar(plan, c.name, sidecar).get("image") if sidecar else None,
            (c.name, "sidecar tokens"): _sidecar_tokens(plan, c.name, sidecar) if sidecar else None,
        })
    return view


def _sidecar(plan: Plan, component: str, name: str) -> dict[str, Any]:
    containers = plan.deployments[component]["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c.get("name") == name)


def _sidecar_tokens(plan: Plan, component: str, name: str) -> list[str]:
    c = _sidecar(plan, component, name)
    env = {str(e["name"]): str(e["value"]) for e in c.get("env") or [] if e.get("value") is not None}
    return list(split_args([str(t) for t in [*(c.get("command") or []), *(c.get("args") or [])]], env))


def disagreements(source: str, doc: dict[str, Any]) -> list[tuple[tuple[str, str, str, str], str]]:
    """(key, 'harness says X, replica says Y') for every fact the two readers read differently."""
    name = str((doc.get("metadata") or {}).get("name"))
    try:
        dgd: Dgd | None = from_documents([doc], source)
    except InputError as exc:
        dgd, harness_error = None, str(exc)
    try:
        obj = admitted(doc)
        graph: Graph | None = read(obj)
        plan: Plan | None = build_plan(obj)
    except ReconcileError as exc:
        graph, plan, replica_error = None, None, str(exc)
    if dgd is None or graph is None or plan is None:
        if (dgd is None or dgd.unrepresentable) and (graph is None or plan is None):
            return []  # both refuse it (the harness: or says it cannot read it faithfully)
        culprit = next((c.name for c in dgd.components if c.raw_type == "main"), "") if dgd else ""
        return [((source, name, culprit, "type" if culprit else "refused"),
                 f"harness {'refuses: ' + harness_error if dgd is None else 'reads it'}; "
                 f"replica {'refuses: ' + replica_error if graph is None or plan is None else 'reads it'}")]
    ours, theirs = harness_view(dgd), replica_view(graph, plan)
    return [((source, name, comp, what), f"harness {ours.get((comp, what))!r}, replica {theirs.get((comp, what))!r}")
            for comp, what in sorted(set(ours) | set(theirs)) if ours.get((comp, what)) != theirs.get((comp, what))]


DOCS = documents()


def test_the_project_has_dgds_of_every_shape() -> None:
    """The corpus covers v1alpha1 and v1beta1, both sidecar forms, multinode and disagg."""
    texts = [str(d) for _, d in DOCS]
    assert len(DOCS) >= 30
    for needle in ("'services'", "'components'", "'frontendSidecar': {", "'frontendSidecar': '", "'nodeCount'",
                   "'subComponentType'", "'podTemplate'"):
        assert any(needle in t for t in texts), needle


@pytest.mark.parametrize(("source", "doc"), DOCS, ids=[f"{s}:{(d.get('metadata') or {}).get('name')}" for s, d in DOCS])
def test_both_readers_read_the_dgd_alike(source: str, doc: dict[str, Any]) -> None:
    found = disagreements(source, doc)
    unexplained = [f"{'/'.join(k)}: {text}" for k, text in found if k not in BY_DESIGN]
    assert not unexplained, "the two readers disagree:\n" + "\n".join(unexplained)


def test_every_intended_disagreement_still_occurs() -> None:
    """An entry of BY_DESIGN that no longer happens is stale: remove it."""
    seen = {k for source, doc in DOCS for k, _ in disagreements(source, doc)}
    assert set(BY_DESIGN) <= seen, sorted(set(BY_DESIGN) - seen)


# ------------------------------------------------------------------ the disagreements settled on the harness's side


def _alpha(services: str) -> Dgd:
    return parse_dgd("apiVersion: nvidia.com/v1alpha1\nkind: DynamoGraphDeployment\nmetadata: {name: t}\n"
                     "spec:\n  services:\n" + "\n".join("    " + line for line in services.strip().splitlines()))


def test_only_a_worker_is_promoted_by_its_sub_component_type() -> None:
    """api/v1alpha1/shared_spec_conversion.go, sharedComponentTypeToHub: componentType worker with
    subComponentType prefill|decode becomes that v1beta1 type; any other componentType is copied."""
    dgd = _alpha("""
W: {componentType: worker, subComponentType: prefill, extraPodSpec: {mainContainer: {image: rt:1}}}
P: {componentType: planner, subComponentType: decode, extraPodSpec: {mainContainer: {image: rt:1}}}
U: {subComponentType: prefill, extraPodSpec: {mainContainer: {image: rt:1}}}
""")
    assert [(c.type, c.is_worker) for c in dgd.components] == [("prefill", True), ("planner", False),
                                                                 ("other", False)]


def test_the_main_containers_own_resources_win_over_the_services() -> None:
    """buildPodTemplateToHub (api/v1alpha1/shared_spec_conversion.go) and the v1alpha1 controller's
    GenerateBasePodSpec merge extraPodSpec.mainContainer over the container built from ``resources``
    with override: key by key, the mainContainer's value is the pod's."""
    dgd = _alpha("""
W:
  componentType: worker
  resources: {limits: {gpu: "2", cpu: "4", memory: 8Gi}}
  extraPodSpec: {mainContainer: {image: rt:1, resources: {limits: {nvidia.com/gpu: "1", cpu: "8"}}}}
V:
  componentType: worker
  resources: {limits: {gpu: "2", cpu: "4"}}
  extraPodSpec: {mainContainer: {image: rt:1, resources: {limits: {memory: 1Gi}}}}
""")
    w, v = dgd.component("W"), dgd.component("V")
    assert (w.gpus_per_pod, w.requests) == (1, {"cpu": 8.0, "memory": 8.0 * 2**30})
    assert (v.gpus_per_pod, v.requests) == (2, {"cpu": 4.0, "memory": 2.0**30})
