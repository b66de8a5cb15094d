"""Iteration 0 end to end on kind against kwok: the same recipe, the same harness, two providers.

    python bench/bench_kind_iteration.py [--runs 3] [--kind-name bki] [--kwok-name bkw] [--keep-clusters]

On each provider's cluster (the default pool layout; created unless one of that name is up) the
admin's part is done as on a real cluster (a fresh namespace, ``hf-token-secret``, the recipe's
``model-cache`` claim), then ``pytest --iter=0`` runs the llama-3-70b vLLM recipe of
``tests/kind/data/`` unedited, exactly as a user runs it. On kind the worker is a real container
running the mocker behind ``python3 -m dynamo.vllm`` (its image pulled from the cluster's registry
on the first run of a node); on kwok a Stage plays the kubelet and the mocker runs on this machine.

Measured per run: the wall time of the ``pytest --iter=0`` process, and the ledger's step 5 to 7
durations; on kind also the cluster's memory while the DGD serves (the node containers' memory as
Docker's cgroups count it, their pods' included, plus the RSS of the provider's processes here:
bench_kind.py's readings). Prints one JSON line and a table; the figures go to docs/performance.md ("The kind
provider"). The first kind run of a node includes its image pull (reported apart as ``first``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_kind import host_rss_bytes, node_memory_bytes
from deploy_suite.access.kube import Kube
from deploy_suite_offline.cluster import OfflineCluster
from deploy_suite_offline.fixtures.cluster import admin_prerequisites
from deploy_suite_offline.kind.provider import KindProvider
from tests.support.runs import run_suite
from tests.support.targets import write_experiment

RECIPE = Path(__file__).resolve().parent.parent / "tests" / "kind" / "data" / "deploy.yaml"
STEPS = ("step5_apply", "step6_readiness", "step7_smoke")


def one_run(kube: Kube, context: str, kubeconfig: str, work: Path, index: int,
            measure: Callable[[], dict[str, int]] | None = None) -> dict[str, Any]:
    namespace = f"bki-{index}"
    admin_prerequisites(kube, namespace, "placeholder-not-a-real-token")
    kube.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "model-cache"},
                 "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}, namespace)
    try:
        exp = write_experiment(work / f"run-{index}", context=context, namespace=namespace, dgd=RECIPE, support={})
        started = time.perf_counter()
        run = run_suite(exp.exp_root, 0, kubeconfig, work / f"reports-{index}", timeout=900.0)
        wall = time.perf_counter() - started
        ledger = run.ledger()
        steps = {s["name"]: s.get("duration_s") for s in ledger.get("steps") or [] if s.get("name") in STEPS}
        return {"status": ledger["status"], "wall_s": round(wall, 2), "steps_s": steps,
                "smoke_success": (ledger.get("smoke") or {}).get("success"), **(measure() if measure else {})}
    finally:
        kube.delete("Namespace", namespace)


def provider_runs(cluster: OfflineCluster | KindProvider, runs: int, work: Path, keep: bool) -> list[dict[str, Any]]:
    info = cluster.up()
    kube = cluster.kube()

    def memory() -> dict[str, int]:  # the DGD still up: its pods count
        assert isinstance(cluster, KindProvider)
        nodes, here = node_memory_bytes(cluster.name) >> 20, host_rss_bytes(cluster) >> 20
        return {"node_memory_mib": nodes, "host_rss_mib": here, "total_mib": nodes + here}

    measure = memory if isinstance(cluster, KindProvider) else None
    try:
        return [one_run(kube, info.context, info.kubeconfig, work, i, measure) for i in range(runs)]
    finally:
        kube.close()
        if not keep:
            cluster.down()


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    walls = [r["wall_s"] for r in results if r["status"] == "ready"]
    return {"ready": f"{len(walls)}/{len(results)}", "first_wall_s": results[0]["wall_s"] if results else None,
            "median_wall_s": round(statistics.median(walls), 2) if walls else None}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--kind-name", default="bki")
    parser.add_argument("--kwok-name", default="bkw")
    parser.add_argument("--keep-clusters", action="store_true")
    args = parser.parse_args()
    out: dict[str, Any] = {"bench": "kind-iteration", "recipe": str(RECIPE.relative_to(RECIPE.parents[3])),
                           "runs": args.runs}
    with tempfile.TemporaryDirectory(prefix="bench-kind-iter-") as tmp:
        for label, cluster in (("kwok", OfflineCluster(args.kwok_name, "default", log=lambda _m: None)),
                               ("kind", KindProvider(args.kind_name, "default", log=lambda _m: None))):
            results = provider_runs(cluster, args.runs, Path(tmp) / label, args.keep_clusters)
            out[label] = {"runs": results, **summary(results)}
    print(json.dumps(out))
    print(f"{'provider':8} {'ready':6} {'first run':>10} {'median':>8}  steps 5/6/7 of the last run")
    for label in ("kwok", "kind"):
        s = out[label]
        last = s["runs"][-1]["steps_s"] if s["runs"] else {}
        print(f"{label:8} {s['ready']:6} {s['first_wall_s']:>9}s {s['median_wall_s']:>7}s  "
              f"{'/'.join(str(last.get(k)) for k in STEPS)}")
    peak = max((r.get("total_mib", 0) for r in out["kind"]["runs"]), default=0)
    print(f"kind cluster's memory with the DGD serving: at most {peak} MiB (node containers + provider processes)")


if __name__ == "__main__":
    main()
