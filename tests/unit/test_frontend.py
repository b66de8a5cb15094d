"""Where a DGD serves the OpenAI API, as each operator generation reads the manifest
(docs/operator-generations.md, "Where the frontend runs"), and readiness counted per component.

Manifests are shapes of real ones (tests/unit/data/recipes/, each citing its source): both
``frontendSidecar`` forms of the gaie recipes, and ``componentType: main`` of the operators before
the ``frontend`` type.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deploy_suite import yamlio
from deploy_suite.constants import LABEL_COMPONENT, LABEL_COMPONENT_TYPE, LABEL_DGD_NAME
from deploy_suite.errors import InputError
from deploy_suite.judges import conditions, membership
from deploy_suite.model import names
from deploy_suite.model.dgd import from_documents, load_dgd, parse_dgd
from deploy_suite.model.podspec import EnvFrom
from deploy_suite.procedure import readiness, smoke
from deploy_suite_offline.operator_sim import conversion
from deploy_suite_offline.operator_sim.plan import build_plan
from tests import fakekube
from tests.unit import test_rollout
from tests.unit.test_dgd import alpha, beta
from tests.unit.test_smoke import FakeKube

RECIPES = Path(__file__).parent / "data" / "recipes"
ALPHA_GAIE = RECIPES / "gaie-v1alpha1-frontend-sidecar.yaml"
BETA_GAIE = RECIPES / "gaie-v1beta1-frontend-sidecar.yaml"
MAIN_ENTRY = RECIPES / "main-entry-v1alpha1.yaml"


def documents(path: Path) -> list[Any]:
    return yamlio.load_all(path)


# ------------------------------------------------------------------ frontendSidecar, v1alpha1: a spec


def test_a_v1alpha1_frontend_sidecar_is_the_container_the_operator_builds() -> None:
    dgd = load_dgd(ALPHA_GAIE)
    assert dgd.frontend is None and dgd.frontend_service is None  # no frontend component: no Service
    decode = dgd.component("VllmDecodeWorker").frontend_sidecar
    assert decode is not None
    assert (decode.container, decode.image, decode.declared_by) == (
        "sidecar-frontend", "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.0", "frontendSidecar")
    # The operator's command (python3) before the args, which replace its default args.
    assert decode.tokens == ("python3", "-m", "dynamo.frontend", "--router-mode", "direct")
    assert decode.router_mode == "direct" and decode.env_from == (EnvFrom("secret", "hf-token-secret"),)
    # A request enters at a decode worker; the prefill worker's sidecar comes last.
    assert [c.name for c in dgd.sidecar_components()] == ["VllmDecodeWorker", "VllmPrefillWorker"]
    assert dgd.component("Epp").frontend_sidecar is None
    assert dgd.total_gpus() == 2 * 2 + 4  # the sidecar asks for no GPU


@pytest.mark.parametrize(("sidecar", "tokens", "mode"), [
    ("{image: rt:1}", ("python3", "-m", "dynamo.frontend"), None),  # the operator's default args
    ("{image: rt:1, envs: [{name: DYN_ROUTER_MODE, value: direct}]}", ("python3", "-m", "dynamo.frontend"),
     "direct"),
    ("{image: rt:1, args: ['--router-mode=$(MODE)'], envs: [{name: MODE, value: kv}]}",
     ("python3", "--router-mode=kv"), "kv"),
])
def test_a_v1alpha1_sidecar_spec_reads_its_args_and_envs(sidecar: str, tokens: tuple[str, ...],
                                                         mode: str | None) -> None:
    dgd = parse_dgd(alpha(f"""
        W:
          componentType: worker
          frontendSidecar: {sidecar}
          extraPodSpec: {{mainContainer: {{image: rt:1}}}}
    """))
    found = dgd.component("W").frontend_sidecar
    assert found is not None and (found.tokens, found.router_mode) == (tokens, mode)


def test_a_v1alpha1_sidecar_without_an_image_is_refused_naming_the_field() -> None:
    with pytest.raises(InputError, match=r"spec\.services\.W\.frontendSidecar\.image: missing"):
        parse_dgd(alpha("W: {componentType: worker, frontendSidecar: {args: [-m, dynamo.frontend]}}"))


# ------------------------------------------------------------------ frontendSidecar, v1beta1: a container's name


def test_a_v1beta1_frontend_sidecar_is_the_named_container_with_the_operators_defaults() -> None:
    dgd = load_dgd(BETA_GAIE)
    assert dgd.frontend_service is None
    found = dgd.component("worker").frontend_sidecar
    assert found is not None and found.container == "sidecar-frontend"
    # The container says only its args; the operator's command goes under them.
    assert found.tokens == ("python3", "-m", "dynamo.frontend", "--router-mode", "direct")
    assert found.router_mode == "direct" and found.env_from == (EnvFrom("secret", "hf-token-secret"),)


def test_a_v1beta1_frontend_sidecar_naming_no_container_is_refused() -> None:
    text = beta("""
        - name: w
          type: worker
          frontendSidecar: sidecar-frontend
          podTemplate: {spec: {containers: [{name: main, image: rt:1}]}}
    """)
    with pytest.raises(InputError, match=r"spec\.components\[w\]\.frontendSidecar: names 'sidecar-frontend', "
                                         r"which is not a container"):
        parse_dgd(text)


def test_a_container_running_the_frontend_without_the_field_is_a_sidecar_too() -> None:
    dgd = parse_dgd(alpha("""
        W:
          componentType: worker
          extraPodSpec:
            mainContainer: {image: rt:1}
            containers:
            - {name: fe, image: rt:1, command: [sh, -c, 'python3 -m dynamo.frontend --router-mode direct']}
            - {name: logger, image: busybox, args: [tail, -f, /dev/null]}
    """))
    found = dgd.component("W").frontend_sidecar
    assert found is not None and (found.container, found.router_mode) == ("fe", "direct")
    assert found.declared_by == "a container running dynamo.frontend"


# ------------------------------------------------------------------ componentType: main, and a frontend of any type


def test_component_type_main_is_the_frontend_of_the_operators_that_used_it() -> None:
    dgd = load_dgd(MAIN_ENTRY)
    front = dgd.component("Frontend")
    assert (front.type, front.raw_type) == ("frontend", "main")
    assert dgd.frontend is front and dgd.frontend_service == "vllm-frontend"
    # The pods keep the label value the operator writes.
    labels = {d.component: d.labels[LABEL_COMPONENT_TYPE] for d in dgd.pod_demands("ns")}
    assert labels == {"Frontend": "main", "VllmWorker": "worker"}
    assert dgd.unrepresentable == []


def test_main_is_not_a_v1beta1_type() -> None:
    dgd = parse_dgd(beta("- {name: Frontend, type: main, podTemplate: {spec: {containers: [{name: main, image: x}]}}}"))
    assert dgd.component("Frontend").type == "main" and dgd.frontend_service is None
    assert any("type 'main' is not one of" in p for p in dgd.unrepresentable)


@pytest.mark.parametrize(("typed", "service"), [
    ("componentType: frontend", "t-web-1-0"),
    ("", "t-web-1-0"),  # untyped, running the frontend: the operator's name all the same
    ("componentType: planner", "t-web-1-0"),
])
def test_the_frontend_service_is_named_after_the_component_serving_http_whatever_its_type(
        typed: str, service: str) -> None:
    dgd = parse_dgd(alpha(f"""
        Web-1.0:
          {typed}
          extraPodSpec: {{mainContainer: {{image: rt:1, command: [python3, -m, dynamo.frontend]}}}}
        W: {{componentType: worker, extraPodSpec: {{mainContainer: {{image: rt:1, args: [--model, m]}}}}}}
    """))
    assert dgd.frontend is not None and dgd.frontend.name == "Web-1.0"
    assert dgd.frontend_service == service  # lowercased, dots as dashes
    assert names.service_name(dgd.name, "Web-1.0") == service


def test_a_typed_frontend_wins_over_a_component_that_only_runs_one() -> None:
    dgd = parse_dgd(alpha("""
        Proxy: {extraPodSpec: {mainContainer: {image: rt:1, args: [python3 -m dynamo.frontend]}}}
        Api: {componentType: frontend, extraPodSpec: {mainContainer: {image: rt:1}}}
    """))
    assert dgd.frontend_service == "t-api"


# ------------------------------------------------------------------ step 7: direct routing and the endpoint


@pytest.mark.parametrize(("path", "direct"), [(ALPHA_GAIE, True), (BETA_GAIE, True), (MAIN_ENTRY, False)])
def test_direct_routing_is_read_on_either_sidecar_form(path: Path, direct: bool) -> None:
    assert smoke.direct_routing(load_dgd(path), documents(path)) is direct


def test_a_kv_routed_v1alpha1_sidecar_needs_no_header() -> None:
    text = ALPHA_GAIE.read_text().replace("- direct", "- kv")
    assert smoke.direct_routing(parse_dgd(text), yamlio.load_yaml_text(text, "x", "fix")) is False


def gaie_pod(name: str, component: str, ctype: str, ready: bool = True) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {LABEL_DGD_NAME: "llama3-70b-disagg", LABEL_COMPONENT: component,
                                                  LABEL_COMPONENT_TYPE: ctype}},
            "spec": {"containers": [{"name": "main"}, {"name": "sidecar-frontend"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_the_endpoint_is_a_decode_workers_sidecar_and_its_hex_id_becomes_decimal() -> None:
    dgd = load_dgd(ALPHA_GAIE)
    # v1alpha1 workers keep the type label `worker`: the component, not the label, says which decodes.
    kube = FakeKube(pods=[gaie_pod("a-prefill-0", "VllmPrefillWorker", "worker"),
                          gaie_pod("b-decode-0", "VllmDecodeWorker", "worker", ready=False),
                          gaie_pod("c-decode-1", "VllmDecodeWorker", "worker")],
                    logs={("c-decode-1", "main"): "worker_id=7", ("c-decode-1", "sidecar-frontend"):
                          "registered dyn://ns.backend.generate:1b70511b8908ec"})
    found = smoke.find_endpoint(kube, "ns", dgd, True, None)  # type: ignore[arg-type]
    assert found == smoke.Endpoint("worker-pod", "pod/c-decode-1", worker_instance_id=0x1b70511b8908ec,
                                   instance_source="log/sidecar-frontend")


def test_without_a_ready_decode_worker_the_prefill_workers_sidecar_serves() -> None:
    kube = FakeKube(pods=[gaie_pod("a-prefill-0", "VllmPrefillWorker", "worker"),
                          gaie_pod("c-decode-1", "VllmDecodeWorker", "worker", ready=False)])
    found = smoke.find_endpoint(kube, "ns", load_dgd(ALPHA_GAIE), False, None)  # type: ignore[arg-type]
    assert found == smoke.Endpoint("worker-pod", "pod/a-prefill-0")


# ------------------------------------------------------------------ readiness: every component's pods, not a total


def pod(name: str, component: str, ready: bool = True) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {LABEL_DGD_NAME: "demo", LABEL_COMPONENT: component}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": str(ready)}]}}


READY_DGD = {"metadata": {"generation": 1}, "status": {
    "state": "successful", "observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]}}


def test_one_components_surplus_never_covers_another_component() -> None:
    wanted = {"Frontend": 1, "VllmWorker": 2}
    # Three ready pods for three wanted, but all of the worker's: an old one still running beside the new.
    pods = [pod("w-0", "VllmWorker"), pod("w-1", "VllmWorker"), pod("w-old", "VllmWorker"),
            pod("f-0", "Frontend", ready=False)]
    status = conditions.dgd_status("demo", READY_DGD, pods, wanted, None)
    assert not status.done
    assert status.description.endswith("pods ready 3/3 (short: Frontend 0/1)")
    pods[-1] = pod("f-0", "Frontend")
    assert conditions.dgd_status("demo", READY_DGD, pods, wanted, None).done


def test_ready_pods_are_counted_by_the_component_label_or_the_selector() -> None:
    selector = {"metadata": {"name": "s", "labels": {"nvidia.com/selector": "demo-vllmworker"}},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    counts = membership.ready_by_component([selector, pod("f", "Frontend", ready=False), pod("x", "Other")],
                                           "demo", {"Frontend": 1, "VllmWorker": 1})
    assert counts == [membership.ComponentReady("Frontend", 1, 0), membership.ComponentReady("VllmWorker", 1, 1)]
    assert [c.met for c in counts] == [False, True]


def test_a_single_components_shortfall_is_the_total() -> None:
    status = conditions.dgd_status("demo", READY_DGD, [pod("w-0", "W")], {"W": 2}, None)
    assert not status.done and status.description.endswith("pods ready 1/2")


# ------------------------------------------------------------------ the operator replica builds the sidecar


def stored(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yamlio.load_one(path)
    doc["metadata"].update(namespace="ns", uid="uid-1", generation=1)
    return doc


def containers(plan: Any, component: str) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in plan.deployments[component]["spec"]["template"]["spec"]["containers"]}


def test_the_replica_injects_a_v1alpha1_sidecar_as_the_operator_does() -> None:
    plan = build_plan(stored(ALPHA_GAIE))
    assert plan.gaie and not plan.services and plan.router_mode == "direct"
    assert plan.sidecars == {"VllmPrefillWorker": "sidecar-frontend", "VllmDecodeWorker": "sidecar-frontend"}
    assert sorted(plan.served_components()) == ["VllmDecodeWorker", "VllmPrefillWorker"]
    sidecar = containers(plan, "VllmDecodeWorker")["sidecar-frontend"]
    assert sidecar["image"] == "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.0"
    assert (sidecar["command"], sidecar["args"]) == (["python3"], ["-m", "dynamo.frontend", "--router-mode", "direct"])
    assert sidecar["envFrom"] == [{"secretRef": {"name": "hf-token-secret"}}]
    assert {"name": "http", "containerPort": 8000, "protocol": "TCP"} in sidecar["ports"]
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    env = {e["name"]: e.get("value") for e in sidecar["env"]}
    assert env["DYN_HTTP_PORT"] == "8000" and env["DYN_NAMESPACE_PREFIX"] == "ns-llama3-70b-disagg"
    assert "resources" not in sidecar  # the GPUs stay on main


def test_the_replica_merges_the_defaults_into_a_v1beta1_sidecar() -> None:
    plan = build_plan(stored(BETA_GAIE))
    assert plan.sidecars == {"worker": "sidecar-frontend"} and plan.router_mode == "direct"
    sidecar = containers(plan, "worker")["sidecar-frontend"]
    assert (sidecar["command"], sidecar["args"]) == (["python3"], ["-m", "dynamo.frontend", "--router-mode", "direct"])
    assert any(p["name"] == "http" for p in sidecar["ports"])


def test_conversion_turns_the_v1alpha1_spec_into_the_named_container_and_back() -> None:
    obj = stored(ALPHA_GAIE)
    hub = conversion.convert(obj, conversion.BETA)
    decode = next(c for c in hub["spec"]["components"] if c["name"] == "VllmDecodeWorker")
    assert decode["frontendSidecar"] == "sidecar-frontend"
    (sidecar,) = [c for c in decode["podTemplate"]["spec"]["containers"] if c["name"] == "sidecar-frontend"]
    assert sidecar["args"] == ["-m", "dynamo.frontend", "--router-mode", "direct"]
    assert conversion.convert(hub, conversion.ALPHA)["spec"] == obj["spec"]  # read back as written
    # The hub form reads as the same sidecar.
    found = from_documents([hub]).component("VllmDecodeWorker").frontend_sidecar
    assert found is not None and found.router_mode == "direct" and found.container == "sidecar-frontend"


def test_a_missing_service_of_a_main_typed_frontend_fails_readiness_saying_why(tmp_path: Path) -> None:
    with fakekube.installed() as (api, kube, _):
        test_rollout.serving(api, frontend_service=False)
        run = test_rollout.make_run(tmp_path, step="step6_readiness")
        main_typed = test_rollout.DEPLOY.replace("componentType: frontend", "componentType: main")
        run.manifests["deploy"].write_text(main_typed)
        error, _partial = test_rollout.fail_with_result(lambda: readiness.readiness(run, kube))
    assert error.category == "missing-frontend-service"
    assert str(error) == ("frontend Service demo-frontend is missing (component Frontend is typed main: operators "
                          "create this Service for the component typed frontend, and the oldest ones for main; "
                          "type it frontend)")
