"""GPU resource names beyond ``nvidia.com/gpu`` (MIG slices, time-sliced GPUs, other vendors) counted
as GPUs wherever GPUs are counted: the DGD's pod demands, capacity, a live pod's GPUs (the allocation
interval, ``conditions.gpus_of``)."""

from __future__ import annotations

from typing import Any

import pytest

from deploy_suite.judges import conditions
from deploy_suite.judges.capacity import check_capacity
from deploy_suite.model.dgd import parse_dgd
from deploy_suite.model.scheduling import is_gpu_resource, pod_gpu_total

MIG = "nvidia.com/mig-1g.10gb"  # an H100 80GB MIG profile, mixed strategy (NVIDIA/k8s-device-plugin README)


@pytest.mark.parametrize(("name", "gpu"), [
    ("nvidia.com/gpu", True),
    ("nvidia.com/mig-1g.10gb", True),
    ("nvidia.com/mig-3g.40gb", True),
    ("nvidia.com/gpu.shared", True),  # time-slicing with renameByDefault
    ("amd.com/gpu", True),
    ("rdma/ib", False),
    ("nvidia.com/hostdev", False),
    ("cpu", False),
    ("ephemeral-storage", False),
])
def test_gpu_resource_names(name: str, gpu: bool) -> None:
    assert is_gpu_resource(name) is gpu


# The vllm agg worker shape of ai-dynamo/dynamo's recipes, its GPU asked as a MIG slice in the main
# container as a cluster with MIG's mixed strategy requires.
ALPHA_MIG = f"""
apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
metadata: {{name: qwen-mig, namespace: dynamo}}
spec:
  services:
    Frontend:
      componentType: frontend
      extraPodSpec: {{mainContainer: {{image: nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.0}}}}
    VllmDecodeWorker:
      componentType: worker
      replicas: 2
      extraPodSpec:
        mainContainer:
          image: nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.0
          resources: {{limits: {{{MIG}: "1"}}}}
"""

BETA_MIG = f"""
apiVersion: nvidia.com/v1beta1
kind: DynamoGraphDeployment
metadata: {{name: qwen-mig, namespace: dynamo}}
spec:
  components:
    - name: worker
      componentType: worker
      podTemplate:
        spec:
          containers:
            - name: main
              image: nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.0
              resources: {{requests: {{{MIG}: "2"}}, limits: {{{MIG}: "2"}}}}
"""


@pytest.mark.parametrize(("text", "component", "per_pod", "total"), [
    (ALPHA_MIG, "VllmDecodeWorker", 1, 2), (BETA_MIG, "worker", 2, 2)])
def test_a_mig_slice_is_a_gpu_of_the_dgd(text: str, component: str, per_pod: int, total: int) -> None:
    dgd = parse_dgd(text)
    c = dgd.component(component)
    assert (c.gpu_resource, c.gpus_per_pod, dgd.total_gpus()) == (MIG, per_pod, total)


def mig_node(name: str, slices: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {}, "status": {"allocatable": {MIG: str(slices), "nvidia.com/gpu": "0"}}}


def test_capacity_counts_mig_slices_against_the_nodes_allocatable_slices() -> None:
    dgd = parse_dgd(ALPHA_MIG)
    enough = check_capacity(dgd, [mig_node("h100-mig-0", 7)], [], namespace="dynamo")
    assert enough.outcome == "sufficient" and enough.gpus_requested == 2
    short = check_capacity(dgd, [mig_node("h100-mig-0", 1)], [], namespace="dynamo")
    assert short.outcome == "insufficient"


def test_a_live_pod_holding_mig_slices_holds_gpus() -> None:
    pod = {"spec": {"nodeName": "h100-mig-0", "containers": [
        {"name": "main", "resources": {"limits": {MIG: "1"}}},
        {"name": "sidecar", "resources": {"limits": {"cpu": "1"}}}]}}
    assert pod_gpu_total(pod["spec"]) == 1
    assert conditions.gpus_of(pod) == 1  # what opens the allocation interval in step 6
