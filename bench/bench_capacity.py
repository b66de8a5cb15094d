"""Benchmark of the capacity engine on a large synthetic cluster.

5,000 nodes x 8 GPUs (two GPU products, ten zones, a GPU taint the DGD tolerates, a tenant
reservation taint it does not, a few cordoned nodes), 20,000 pods holding GPUs (some terminal, some
stuck in ImagePullBackOff), and a DGD that expands to 256 pod demands with node selectors,
tolerations, hostname anti-affinity and a multinode component.

``--resources``: every worker also asks CPU, memory and ``rdma/ib`` (as NVIDIA's InfiniBand recipes
do) and every GPU node offers them, so each is judged against what the nodes can ever offer too.

Usage: python bench/bench_capacity.py [--runs N] [--nodes N] [--pods N] [--resources]
Prints one JSON line (figures) and one human line. Goal: median < 1 s, peak memory < 300 MB.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deploy_suite.judges.capacity import check_capacity
from deploy_suite.model.dgd import parse_dgd

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TENANT_TAINT = {"key": "reserved-for", "value": "team-x", "effect": "NoSchedule"}

DGD_YAML = """
apiVersion: v1
kind: ConfigMap
metadata: {name: engine-config}
data: {a: b}
---
apiVersion: nvidia.com/v1beta1
kind: DynamoGraphDeployment
metadata: {name: bench, namespace: dynamo}
spec:
  backendFramework: vllm
  components:
  - name: Frontend
    type: frontend
    replicas: 1
    podTemplate: {spec: {containers: [{name: main, image: "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.0"}]}}
  - name: Planner
    type: planner
    replicas: 1
    podTemplate: {spec: {containers: [{name: main, image: "nvcr.io/nvidia/ai-dynamo/dynamo-planner:1.3.0"}]}}
  - name: prefill
    type: prefill
    replicas: 126
    podTemplate:
      spec:
        nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
        tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
        containers:
        - name: main
          image: nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.0
          resources: {limits: {nvidia.com/gpu: "2"}, requests: {nvidia.com/gpu: "2"}}
  - name: decode
    type: decode
    replicas: 64
    podTemplate:
      spec:
        tolerations: [{key: nvidia.com/gpu, operator: Exists}]
        affinity:
          nodeAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms:
              - matchExpressions:
                - {key: nvidia.com/gpu.product, operator: In, values: [NVIDIA-H100-80GB-HBM3, NVIDIA-H200]}
                - {key: nvidia.com/gpu.count, operator: Gt, values: ["4"]}
          podAntiAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
            - labelSelector: {matchLabels: {nvidia.com/dynamo-component: decode}}
              topologyKey: kubernetes.io/hostname
        containers:
        - name: main
          image: nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.0
          resources: {limits: {nvidia.com/gpu: "4"}}
  - name: big
    type: worker
    replicas: 16
    multinode: {nodeCount: 4}
    podTemplate:
      spec:
        nodeSelector: {nvidia.com/gpu.product: NVIDIA-H200}
        tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
        containers:
        - name: main
          image: nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.0
          resources: {limits: {nvidia.com/gpu: "8"}}
"""


WORKER_RESOURCES = '{limits: {nvidia.com/gpu: "GPUS", rdma/ib: "1"}, requests: {cpu: "16", memory: 128Gi}}'
NODE_RESOURCES = {"cpu": "192", "memory": "2048Gi", "rdma/ib": "8"}


def with_resources(text: str) -> str:
    """The bench DGD whose workers ask CPU, memory and rdma/ib next to their GPUs."""
    for gpus in ("2", "4", "8"):
        asks = f"resources: {WORKER_RESOURCES.replace('GPUS', gpus)}"
        limit = f'limits: {{nvidia.com/gpu: "{gpus}"}}'
        text = text.replace(f'resources: {{{limit}, requests: {{nvidia.com/gpu: "{gpus}"}}}}', asks)
        text = text.replace(f"resources: {{{limit}}}", asks)
    return text


def build_cluster(n_nodes: int, n_pods: int, seed: int = 7) -> tuple[list[dict], list[dict]]:
    rnd = random.Random(seed)
    nodes = []
    empty = n_nodes // 10  # the first tenth has no tenant pods (room for whole-node pods)
    for i in range(n_nodes):
        product = "NVIDIA-H200" if i % 5 in (0, 1) else "NVIDIA-H100-80GB-HBM3"
        taints = [GPU_TAINT]
        if i % 10 == 3:
            taints.append(TENANT_TAINT)
        name = f"gpu-node-{i:05d}"
        nodes.append(
            {
                "metadata": {
                    "name": name,
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "topology.kubernetes.io/zone": f"zone-{i % 10}",
                        "nvidia.com/gpu.product": product,
                        "nvidia.com/gpu.count": "8",
                    },
                },
                "spec": {"taints": taints, "unschedulable": i % 97 == 5},
                "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}},
            }
        )
    for i in range(n_nodes // 100):  # CPU-only nodes for the frontend and the planner
        name = f"cpu-node-{i:03d}"
        nodes.append(
            {
                "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": f"zone-{i % 10}"}},
                "spec": {},
                "status": {"allocatable": {"cpu": "64"}},
            }
        )
    pods = []
    busy = n_nodes - empty
    for k in range(n_pods):
        node = nodes[empty + k % busy]["metadata"]["name"]
        phase = rnd.choices(["Running", "Pending", "Succeeded", "Failed"], [80, 10, 5, 5])[0]
        status: dict = {"phase": phase}
        if phase == "Pending":
            status["containerStatuses"] = [{"state": {"waiting": {"reason": "ImagePullBackOff"}}}]
        gpus = str(rnd.choice([1, 1, 1, 2]))
        pods.append(
            {
                "metadata": {"name": f"tenant-{k}", "namespace": f"team-{k % 40}", "labels": {"app": f"a{k % 300}"}},
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}],
                },
                "status": status,
            }
        )
    return nodes, pods


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=20000)
    ap.add_argument("--resources", action="store_true", help="workers ask CPU, memory and rdma/ib too")
    args = ap.parse_args()

    dgd = parse_dgd(with_resources(DGD_YAML) if args.resources else DGD_YAML, "bench-dgd")
    nodes, pods = build_cluster(args.nodes, args.pods)
    if args.resources:
        for n in nodes:
            if "nvidia.com/gpu" in n["status"].get("allocatable", {}):
                n["status"]["allocatable"].update(NODE_RESOURCES)
        assert all(c.requests for c in dgd.components if c.gpus_per_pod), "every worker asks more than GPUs"
    times = []
    result = None
    for _ in range(args.runs):
        t0 = time.perf_counter()
        result = check_capacity(dgd, nodes, pods, namespace="dynamo")
        times.append(time.perf_counter() - t0)
    assert result is not None
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux

    # Allocation peak of one engine call alone (tracemalloc slows code down, so a separate run).
    tracemalloc.start()
    check_capacity(dgd, nodes, pods, namespace="dynamo")
    engine_peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()

    figures = {
        "nodes": args.nodes,
        "pods": args.pods,
        "demands": len(dgd.pod_demands()),
        "resources": sorted({r for c in dgd.components for r in c.requests}),
        "gpus_requested": result.gpus_requested,
        "outcome": result.outcome,
        "exact": result.exact,
        "runs": args.runs,
        "median_s": round(statistics.median(times), 4),
        "min_s": round(min(times), 4),
        "max_s": round(max(times), 4),
        "peak_rss_mb": round(rss_mb, 1),
        "engine_peak_alloc_mb": round(engine_peak_mb, 1),
    }
    print(json.dumps(figures))
    print(
        f"capacity engine: {args.nodes} nodes, {args.pods} pods, {figures['demands']} demands -> "
        f"{result.outcome}; median {figures['median_s']:.3f}s (min {figures['min_s']:.3f}, "
        f"max {figures['max_s']:.3f}) over {args.runs} runs; peak RSS {figures['peak_rss_mb']} MB "
        f"(engine allocations {figures['engine_peak_alloc_mb']} MB)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
