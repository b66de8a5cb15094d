"""Unit tests of the DGD model (deploy_suite.model.dgd): parsing both API shapes, pod demands."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from deploy_suite.constants import LABEL_COMPONENT, LABEL_COMPONENT_TYPE, LABEL_DGD_NAME
from deploy_suite.errors import InputError
from deploy_suite.model.dgd import Dgd, from_documents, load_dgd, parse_dgd
from deploy_suite.model.podspec import EnvFrom
from deploy_suite.model.scheduling import DraClaim, Requirement, Toleration

DATA = Path(__file__).parent / "data"


def fixture(name: str) -> Dgd:
    return load_dgd(DATA / name)


def alpha(services: str, extra_spec: str = "", api: str = "nvidia.com/v1alpha1") -> str:
    """A v1alpha1 DGD whose spec.services block is ``services`` (YAML indented under services)."""
    body = textwrap.indent(textwrap.dedent(services).strip(), "    ")
    head = f"apiVersion: {api}\nkind: DynamoGraphDeployment\nmetadata:\n  name: t\nspec:\n"
    return f"{head}{extra_spec}  services:\n{body}\n"


def beta(components: str) -> str:
    body = textwrap.indent(textwrap.dedent(components).strip(), "    ")
    head = "apiVersion: nvidia.com/v1beta1\nkind: DynamoGraphDeployment\nmetadata:\n  name: t\nspec:\n"
    return f"{head}  components:\n{body}\n"


# ---------------------------------------------------------------- fixtures, shape by shape

FIXTURE_SHAPES = [
    # file, api, name, [(component, type, replicas, node_count, gpus_per_pod)], total GPUs, served model
    (
        "dgd_v1alpha1_agg.yaml",
        "nvidia.com/v1alpha1",
        "qwen-agg",
        [("Frontend", "frontend", 1, 1, 0), ("VllmWorker", "worker", 2, 1, 4)],
        8,
        {"VllmWorker": "Qwen/Qwen3-32B-FP8", "Frontend": None},
    ),
    (
        "dgd_v1alpha1_disagg.yaml",
        "nvidia.com/v1alpha1",
        "llama-disagg",
        [
            ("Frontend", "frontend", 1, 1, 0),
            ("VllmPrefillWorker", "prefill", 2, 1, 2),
            ("VllmDecodeWorker", "decode", 1, 1, 4),
        ],
        8,
        {
            "VllmPrefillWorker": "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic",
            "VllmDecodeWorker": "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic",
        },
    ),
    (
        "dgd_v1beta1.yaml",
        "nvidia.com/v1beta1",
        "sgl-agg",
        [("Frontend", "frontend", 1, 1, 0), ("worker", "worker", 3, 1, 8)],
        24,
        {"worker": "deepseek-ai/DeepSeek-V3-NVFP4"},
    ),
    (
        "dgd_multinode.yaml",
        "nvidia.com/v1alpha1",
        "dsr1-multinode",
        [("Frontend", "frontend", 1, 1, 0), ("decode", "worker", 2, 2, 8), ("prefill", "worker", 1, 2, 8)],
        48,
        {"decode": "deepseek-ai/DeepSeek-R1"},
    ),
    (
        "dgd_gaie.yaml",
        "nvidia.com/v1beta1",
        "llama-gaie",
        [("Epp", "epp", 1, 1, 0), ("VllmWorker", "worker", 2, 1, 1)],
        2,
        {"VllmWorker": "meta-llama/Llama-3.1-8B-Instruct"},
    ),
]


@pytest.mark.parametrize(("file", "api", "name", "components", "total", "models"), FIXTURE_SHAPES)
def test_each_fixture_normalises_to_the_same_model(file, api, name, components, total, models):
    dgd = fixture(file)
    assert (dgd.api_version, dgd.name) == (api, name)
    got = [(c.name, c.type, c.replicas, c.node_count, c.gpus_per_pod) for c in dgd.components]
    assert got == components
    assert dgd.total_gpus() == total
    for comp, model in models.items():
        assert dgd.component(comp).served_model == model
    assert dgd.unrepresentable == []


def test_documents_before_the_dgd_are_recorded_as_other_documents():
    dgd = fixture("dgd_v1alpha1_disagg.yaml")
    assert [(o.kind, o.api_version, o.name) for o in dgd.other_documents] == [
        ("ConfigMap", "v1", "engine-config"),
        ("ComputeDomain", "resource.nvidia.com/v1beta1", "llama-domain"),
    ]


def test_v1alpha1_fields_are_read_into_the_component():
    dgd = fixture("dgd_v1alpha1_agg.yaml")
    w = dgd.component("VllmWorker")
    assert dgd.namespace == "dynamo" and dgd.backend_framework == "vllm"
    assert [e.name for e in dgd.env] == ["HF_HOME"]
    assert [p.name for p in dgd.pvcs] == ["model-cache"]
    assert w.pvc_claims == ("model-cache",)
    assert w.env_from == (EnvFrom("secret", "hf-token-secret"),)
    assert w.image_pull_secrets == ("nvcr-pull",)
    assert w.shared_memory == "20Gi"
    assert w.gpu_resource == "nvidia.com/gpu"
    assert w.node_selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert w.tolerations == (Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),)
    assert w.image == "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.0"
    assert w.command == ("/bin/sh", "-c")
    secret_env = next(e for e in w.env if e.name == "HF_TOKEN")
    assert secret_env.value is None and secret_env.value_from == {
        "secretKeyRef": {"name": "hf-token-secret", "key": "HF_TOKEN"}
    }


def test_v1beta1_fields_are_read_from_the_main_container_and_pod_template():
    w = fixture("dgd_v1beta1.yaml").component("worker")
    assert w.pvc_claims == ("shared-model-cache",) and w.volume_names == ("cache",)
    assert w.env_from == (EnvFrom("secret", "hf-token-secret"),)
    assert w.shared_memory == "80Gi"
    assert w.pod_labels == {"team": "inference"}
    assert w.flag("--tp") == "8"


def test_an_epp_component_keeps_its_type_and_sidecars_add_no_gpus():
    dgd = fixture("dgd_gaie.yaml")
    assert dgd.component("Epp").type == "epp"
    assert dgd.component("VllmWorker").gpus_per_pod == 1


# ---------------------------------------------------------------- GPU counting


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ("limits: {gpu: '4'}\n  requests: {gpu: '4'}", 4),
        ("limits: {gpu: '4'}", 4),
        ("requests: {gpu: '2'}", 2),
        ("limits: {gpu: '4'}\n  requests: {gpu: '2'}", 4),
        ("limits: {gpu: 1}", 1),
    ],
)
def test_v1alpha1_gpu_request_and_limit_are_counted_once(resources, expected):
    body = "W:\n  componentType: worker\n  resources:\n    " + resources.replace("\n", "\n  ")
    assert parse_dgd(alpha(body)).component("W").gpus_per_pod == expected


def test_v1beta1_gpu_request_and_limit_are_counted_once():
    text = beta(
        """
        - name: w
          type: worker
          podTemplate:
            spec:
              containers:
              - name: main
                image: x
                resources: {requests: {nvidia.com/gpu: "2"}, limits: {nvidia.com/gpu: "2"}}
        """
    )
    assert parse_dgd(text).component("w").gpus_per_pod == 2


def test_a_custom_gpu_type_names_the_resource():
    body = "W:\n  componentType: worker\n  resources:\n    limits: {gpu: '1', gpuType: nvidia.com/mig-1g.10gb}"
    w = parse_dgd(alpha(body)).component("W")
    assert (w.gpu_resource, w.gpus_per_pod) == ("nvidia.com/mig-1g.10gb", 1)


def test_init_containers_follow_the_kubernetes_effective_request_rule():
    text = beta(
        """
        - name: w
          type: worker
          podTemplate:
            spec:
              initContainers:
              - {name: warm, image: x, resources: {limits: {nvidia.com/gpu: "4"}}}
              containers:
              - {name: main, image: x, resources: {limits: {nvidia.com/gpu: "2"}}}
        """
    )
    assert parse_dgd(text).component("w").gpus_per_pod == 4


# ---------------------------------------------------------------- served model name


@pytest.mark.parametrize(
    ("command", "args", "env", "expected"),
    [
        ([], ["--model", "m/a"], {}, "m/a"),
        ([], ["--model=m/a"], {}, "m/a"),
        ([], ["--model-path", "/p", "--served-model-name", "served"], {}, "served"),
        ([], ["--served-model-name=served", "--model", "m"], {}, "served"),
        (["/bin/sh", "-c"], ["python3 -m dynamo.vllm --model $M --tp 2"], {"M": "org/m"}, "org/m"),
        (["sh", "-c", "exec python3 -m dynamo.vllm --model=${M}"], [], {"M": "org/m"}, "org/m"),
        ([], ["--model-path", "$(M)"], {"M": "k8s/m"}, "k8s/m"),
        ([], ["--model-path", "/models/x"], {}, "/models/x"),
        ([], ["--model", "$UNSET"], {}, "$UNSET"),
        (["python3", "-m", "dynamo.frontend"], [], {}, None),
    ],
)
def test_served_model_is_found_in_command_and_args(command, args, env, expected):
    container = {"name": "main", "image": "x", "command": command, "args": args}
    container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    doc = {
        "apiVersion": "nvidia.com/v1beta1",
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": "t"},
        "spec": {"components": [{"name": "w", "type": "worker", "podTemplate": {"spec": {"containers": [container]}}}]},
    }
    assert parse_dgd(yaml.safe_dump(doc)).component("w").served_model == expected


# ---------------------------------------------------------------- scheduling constraints


def test_required_node_affinity_tolerations_and_pod_anti_affinity_are_parsed():
    body = """
    W:
      componentType: worker
      extraPodSpec:
        tolerations:
        - {operator: Exists}
        - {key: dedicated, value: gpu, effect: NoSchedule}
        affinity:
          nodeAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms:
              - matchExpressions:
                - {key: gpu.count, operator: Gt, values: ["4"]}
                - {key: zone, operator: NotIn, values: [a, b]}
              - matchFields:
                - {key: metadata.name, operator: In, values: [n1]}
            preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 1
              preference: {matchExpressions: [{key: x, operator: Weird}]}
          podAntiAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
            - labelSelector: {matchLabels: {app: w}}
              topologyKey: topology.kubernetes.io/zone
              namespaces: [other]
          podAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
            - labelSelector: {matchExpressions: [{key: app, operator: Exists}]}
              topologyKey: kubernetes.io/hostname
              namespaceSelector: {}
    """
    dgd = parse_dgd(alpha(body))
    w = dgd.component("W")
    assert dgd.unrepresentable == []  # preferred terms are ignored, even malformed ones
    assert w.node_affinity == [
        [Requirement("gpu.count", "Gt", ("4",)), Requirement("zone", "NotIn", ("a", "b"))],
        [Requirement("metadata.name", "In", ("n1",))],
    ]
    assert w.tolerations == (Toleration("", "Exists"), Toleration("dedicated", "Equal", "gpu", "NoSchedule"))
    (anti,) = w.pod_anti_affinity
    assert (anti.topology_key, anti.namespaces, anti.all_namespaces) == (
        "topology.kubernetes.io/zone",
        ("other",),
        False,
    )
    (aff,) = w.pod_affinity
    assert aff.all_namespaces


# ---------------------------------------------------------------- unrepresentable -> recorded, not raised

UNREPRESENTABLE = [
    (
        "a DRA claim the pod does not define",
        alpha("W:\n  componentType: worker\n  resources:\n    claims: [{name: gpu}]"),
        "resources.claims names 'gpu', which spec.services.W.extraPodSpec.resourceClaims does not define",
    ),
    (
        "unsupported affinity operator",
        alpha(
            "W:\n  extraPodSpec:\n    affinity:\n      nodeAffinity:\n"
            "        requiredDuringSchedulingIgnoredDuringExecution:\n"
            "          nodeSelectorTerms: [{matchExpressions: [{key: a, operator: Equals, values: [b]}]}]"
        ),
        "operator 'Equals'",
    ),
    ("unknown apiVersion", alpha("W:\n  componentType: worker", api="nvidia.com/v2"), "apiVersion"),
    ("templated replicas", alpha("W:\n  replicas: '${REPLICAS}'"), "replicas"),
    ("non-integer GPU count", alpha("W:\n  resources:\n    limits: {gpu: '1.5'}"), "not a whole number"),
    ("two DGDs", alpha("W: {}") + "---\n" + alpha("V: {}"), "2 DynamoGraphDeployments"),
    (
        "namespace selector by label",
        alpha(
            "W:\n  extraPodSpec:\n    affinity:\n      podAntiAffinity:\n"
            "        requiredDuringSchedulingIgnoredDuringExecution:\n"
            "        - {labelSelector: {}, topologyKey: h, namespaceSelector: {matchLabels: {a: b}}}"
        ),
        "namespaceSelector",
    ),
]


def test_dra_claims_are_kept_as_written_for_the_cluster_to_say_what_they_ask() -> None:
    # The GB200 recipes' shape: a ComputeDomain channel claimed through the service and extraPodSpec.
    dgd = parse_dgd(alpha("W:\n  componentType: worker\n  resources:\n    limits: {gpu: '4'}\n"
                          "    claims: [{name: compute-domain-channel}]\n  extraPodSpec:\n    resourceClaims:\n"
                          "    - {name: compute-domain-channel, resourceClaimTemplateName: cd-channel}\n"
                          "    - {name: shared, resourceClaimName: nic}\n"))
    (w,) = dgd.components
    assert not dgd.unrepresentable and w.gpus_per_pod == 4
    assert w.dra_claims == (DraClaim("compute-domain-channel", template="cd-channel"), DraClaim("shared", claim="nic"))
    assert dgd.pod_demands()[0].dra_claims == w.dra_claims


@pytest.mark.parametrize(("case", "text", "needle"), UNREPRESENTABLE, ids=[c[0] for c in UNREPRESENTABLE])
def test_what_the_model_cannot_represent_is_recorded_with_a_reason(case, text, needle):
    dgd = parse_dgd(text)
    assert dgd.unrepresentable, case
    assert any(needle in why for why in dgd.unrepresentable), dgd.unrepresentable


# ---------------------------------------------------------------- input errors

INPUT_ERRORS = [
    ("not YAML", "a: [unclosed", "YAML syntax error at line 1"),
    ("a duplicate key", "metadata: {name: a}\nmetadata: {name: b}\n", "duplicate key 'metadata'"),
    ("no DGD", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "no DynamoGraphDeployment"),
    ("a scalar document", "just a string\n", "expected a Kubernetes object"),
    (
        "services as a list",
        "apiVersion: nvidia.com/v1alpha1\nkind: DynamoGraphDeployment\nmetadata: {name: t}\nspec:\n  services: [a]\n",
        "spec.services",
    ),
    (
        "components as a map",
        "apiVersion: nvidia.com/v1beta1\nkind: DynamoGraphDeployment\nmetadata: {name: t}\n"
        "spec:\n  components: {a: 1}\n",
        "spec.components",
    ),
    ("no metadata.name", "apiVersion: nvidia.com/v1beta1\nkind: DynamoGraphDeployment\nspec: {}\n", "metadata.name"),
    ("no main container", beta("- name: w\n  podTemplate: {spec: {containers: [{name: app, image: x}]}}"), "main"),
    ("replicas as a list", alpha("W:\n  replicas: [1]"), "replicas"),
    ("negative replicas", alpha("W:\n  replicas: -1"), "negative"),
    ("args not a list", alpha("W:\n  extraPodSpec:\n    mainContainer: {args: '--model x'}"), "args"),
]


@pytest.mark.parametrize(("case", "text", "needle"), INPUT_ERRORS, ids=[c[0] for c in INPUT_ERRORS])
def test_malformed_input_raises_a_one_line_input_error_naming_input_and_fix(case, text, needle):
    with pytest.raises(InputError) as err:
        parse_dgd(text, "user_provided_dgd.yaml")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("user_provided_dgd.yaml: ")
    assert "fix:" in message and needle in message


def test_an_unreadable_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot be read"):
        load_dgd(tmp_path / "missing.yaml")


def test_a_file_and_its_parsed_documents_give_the_same_model():
    """Step 2 reads the deploy copy once and patches its documents in memory: the model built
    from them must be the one the file gives."""
    path = DATA / "dgd_v1alpha1_agg.yaml"
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert from_documents(documents, str(path)) == load_dgd(path)


# ---------------------------------------------------------------- pod demands


def test_pod_demands_expand_every_component_replica_and_node():
    dgd = fixture("dgd_multinode.yaml")
    demands = dgd.pod_demands()
    assert [d.name for d in demands] == [
        "Frontend-0",
        "decode-0-0",
        "decode-0-1",
        "decode-1-0",
        "decode-1-1",
        "prefill-0-0",
        "prefill-0-1",
    ]
    assert sum(d.gpus for d in demands) == dgd.total_gpus() == 48


def test_pod_demands_carry_the_operator_labels_and_constraints():
    dgd = fixture("dgd_v1alpha1_agg.yaml")
    w = [d for d in dgd.pod_demands() if d.component == "VllmWorker"]
    assert len(w) == 2
    assert w[0].labels[LABEL_DGD_NAME] == "qwen-agg"
    assert w[0].labels[LABEL_COMPONENT] == "VllmWorker"
    assert w[0].labels[LABEL_COMPONENT_TYPE] == "worker"
    assert w[0].scheduling.node_selector == (("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),)
    assert w[0].namespace == "dynamo"
    assert dgd.pod_demands("elsewhere")[0].namespace == "elsewhere"


def test_zero_replicas_produce_no_pod_demands():
    dgd = parse_dgd(alpha("W:\n  replicas: 0\n  resources:\n    limits: {gpu: '8'}"))
    assert dgd.pod_demands() == [] and dgd.total_gpus() == 0
