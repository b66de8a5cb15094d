"""Step 2 (validate) at scale: a 500-node offline cluster running 5,000 pods, some holding GPUs.

    python bench/bench_step2_scale.py [--runs 5] [--pods 5000] [--threads 24] [--keep]

Brings up its own cluster (``scale-500`` layout, a unique name), creates the pods with a thread
pool (``spec.nodeName`` preset, spread round-robin over every node: kwok makes them Running),
waits until all are Running, then times ``validate()`` of a 2-component DGD (a CPU frontend and
two 4-GPU H200 workers) ``--runs`` times in a child process, so that the peak RSS reported is
that of validation alone (node list, a paged list of every pod, capacity engine, dry-run).
Prints one JSON line and a summary; the goal is step 2 under 5 s. The cluster is taken down at
the end unless ``--keep``.

On every H200 node, two pods hold 4 + 3 GPUs (7 of 8 taken); every tenth node is left free, so
the DGD fits but only on a few nodes, as on a busy shared cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from deploy_suite.access.kube import Kube
from deploy_suite.access.watch import Watch
from deploy_suite.procedure.validate import ValidationInputs, validate
from deploy_suite_offline.cluster import OfflineCluster

NAMESPACE = "bench-step2"
LOAD_NAMESPACES = [f"bench-load-{i}" for i in range(5)]
LOAD_LABEL = "bench.deploy-suite.local/load"
SECRET = "hf-token-secret"
DGD = {
    "apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment", "metadata": {"name": "bench-agg"},
    "spec": {"backendFramework": "vllm", "services": {
        "Frontend": {"componentType": "frontend", "replicas": 1, "extraPodSpec": {"mainContainer": {
            "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.9.1",
            "command": ["python3", "-m", "dynamo.frontend", "--http-port", "8000"]}}},
        "VllmDecodeWorker": {"componentType": "worker", "replicas": 2, "envFromSecret": SECRET,
                             "resources": {"limits": {"gpu": "4"}},
                             "extraPodSpec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"},
                                              "mainContainer": {
                                                  "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.9.1",
                                                  "command": ["/bin/sh", "-c"],
                                                  "args": ["python3 -m dynamo.vllm --model Qwen/Qwen3-0.6B "
                                                           "--tensor-parallel-size 4"]}}}}},
}


def pod_manifest(i: int, node: str, gpus: int) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"load-{i:05d}", "labels": {LOAD_LABEL: "true"}},
            "spec": {"nodeName": node, "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "main", "image": "busybox", "resources": resources}]}}


def populate(cluster: OfflineCluster, total: int, threads: int) -> dict[str, Any]:
    admin = cluster.kube()
    nodes = sorted(n["metadata"]["name"] for n in admin.list_items("Node")[0])
    h200 = [n for n in nodes if n.startswith("h200-")]
    free_nodes = set(h200[::10])
    for ns in [NAMESPACE, *LOAD_NAMESPACES]:
        admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    admin.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET}, "type": "Opaque",
                  "stringData": {"HF_TOKEN": "bench"}}, NAMESPACE)
    plan: list[tuple[str, dict[str, Any]]] = []
    for i in range(total):
        node = nodes[i % len(nodes)]
        rank = i // len(nodes)  # the rank-th pod on this node
        gpus = 0
        if node in h200 and node not in free_nodes and rank < 2:
            gpus = (4, 3)[rank]
        plan.append((LOAD_NAMESPACES[i % len(LOAD_NAMESPACES)], pod_manifest(i, node, gpus)))
    local = threading.local()

    def create(item: tuple[str, dict[str, Any]]) -> None:
        kube = getattr(local, "kube", None)
        if kube is None:
            kube = local.kube = cluster.kube()  # one connection pool per thread
        kube.create(item[1], item[0])

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(create, plan))
    created_s = time.perf_counter() - started

    def all_running(objs: dict[str, Any]) -> tuple[bool, str]:
        running = sum(1 for o in objs.values() if (o.get("status") or {}).get("phase") == "Running")
        return running >= total, f"{running}/{total} load pods Running"

    admin.wait_for(Watch("Pod", label_selector=f"{LOAD_LABEL}=true"), all_running,
                   awaited=f"{total} load pods Running", timeout=900)
    running_s = time.perf_counter() - started
    admin.close()
    held = sum(7 for n in h200 if n not in free_nodes)
    return {"nodes": len(nodes), "pods": total, "gpus_held": held, "create_s": round(created_s, 1),
            "all_running_s": round(running_s, 1)}


def measure(context: str, kubeconfig: str, runs: int) -> dict[str, Any]:
    """Child process: time validate() ``runs`` times; report its own peak RSS."""
    times: list[float] = []
    outcome = None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i in range(runs):
            run_dir = root / f"run{i}" / "applied_manifests"
            run_dir.mkdir(parents=True)
            deploy = run_dir / "deploy.yaml"
            deploy.write_text(yaml.safe_dump(DGD, sort_keys=False))
            kube = Kube(context, kubeconfig, user_agent="bench-step2")
            inputs = ValidationInputs(
                namespace=NAMESPACE, deploy_path=deploy, support_paths={}, baseline_dgd_path=None,
                workload={"kubernetes": {"namespace": NAMESPACE, "storage_class": "standard"},
                          "resources": {"gpu_ceiling": 64, "pinned": []}},
                display_root=root)
            t0 = time.perf_counter()
            report = validate(kube, inputs)
            times.append(time.perf_counter() - t0)
            kube.close()
            outcome = {"blockers": [b.category for b in report.blockers],
                       "capacity": (report.capacity or {}).get("capacity"),
                       "nodes": report.evidence.get("nodes")}
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"runs": runs, "validate_s": [round(t, 3) for t in times],
            "validate_median_s": round(statistics.median(times), 3), "peak_rss_mib": round(peak_kib / 1024, 1),
            "last_outcome": outcome}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--threads", type=int, default=24)
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    parser.add_argument("--measure", nargs=2, metavar=("CONTEXT", "KUBECONFIG"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure[0], args.measure[1], args.runs)))
        return
    cluster = OfflineCluster(f"bench{os.getpid()}-s2", "scale-500", log=lambda _m: None)
    try:
        t0 = time.perf_counter()
        info = cluster.up(wait_timeout=900)
        up_s = time.perf_counter() - t0
        load = populate(cluster, args.pods, args.threads)
        child = subprocess.run([sys.executable, __file__, "--runs", str(args.runs), "--measure", info.context,
                                info.kubeconfig], check=True, capture_output=True, text=True)
        measured = json.loads(child.stdout.strip().splitlines()[-1])
    finally:
        if not args.keep:
            cluster.down()
    result = {"bench": "step2_scale", "cluster_up_s": round(up_s, 1), **load, **measured, "goal_s": 5.0,
              "goal_met": measured["validate_median_s"] < 5.0}
    print(json.dumps(result))
    print(f"validate() on {load['nodes']} nodes / {load['pods']} running pods: median "
          f"{measured['validate_median_s']}s over {args.runs} runs (goal < 5 s), peak RSS "
          f"{measured['peak_rss_mib']} MiB; capacity {measured['last_outcome']['capacity']}")


if __name__ == "__main__":
    main()
