"""Bring-up time of the offline cluster with cached binaries: `up` until every node is Ready.

    python bench/bench_cluster_up.py [--runs 5] [--pools default]

Each run creates a fresh cluster (its own name), times `OfflineCluster.up()` from the call to all
nodes Ready and schedulable, then tears it down and times `down`. Prints one JSON line and a
summary. The first build of the binaries is not part of this (see `deploy-suite binaries`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from deploy_suite_offline.binaries import ensure_binaries
from deploy_suite_offline.cluster import OfflineCluster


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pools", default="default")
    args = parser.parse_args()
    ensure_binaries(lambda _m: None)
    ups: list[float] = []
    downs: list[float] = []
    nodes = 0
    for i in range(args.runs):
        cluster = OfflineCluster(f"bench{os.getpid()}-{i}", args.pools, log=lambda _m: None)
        t0 = time.perf_counter()
        info = cluster.up()
        ups.append(time.perf_counter() - t0)
        nodes = len(info.nodes)
        t0 = time.perf_counter()
        cluster.down()
        downs.append(time.perf_counter() - t0)
    result = {"bench": "cluster_up", "pools": args.pools, "nodes": nodes, "runs": args.runs,
              "up_median_s": round(statistics.median(ups), 2), "up_min_s": round(min(ups), 2),
              "up_max_s": round(max(ups), 2), "down_median_s": round(statistics.median(downs), 2)}
    print(json.dumps(result))
    print(f"up -> {nodes} nodes Ready: median {result['up_median_s']}s (min {result['up_min_s']}s, "
          f"max {result['up_max_s']}s) over {args.runs} runs; down median {result['down_median_s']}s")


if __name__ == "__main__":
    main()
