"""The kind provider's costs: the image builds and `cluster up --provider kind`, its memory.

    python bench/bench_kind.py [--runs 1] [--pools default] [--cold-images]

With ``--cold-images`` the node image (not the root file system, not the Go binaries) is removed
first and rebuilt, timed. Each run then creates a fresh kind cluster, times ``KindProvider.up()``
from the call to every node Ready with the layout applied and the controllers started, reads the
node containers' memory (``docker stats``) and the RSS of the provider's processes on this machine
(controllers, registry, relay: psutil), and times ``down``. Prints one JSON line and a summary;
the figures go to docs/performance.md ("The kind provider").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import psutil

from deploy_suite_offline.kind import docker, nodeimage, tools
from deploy_suite_offline.kind.provider import CLUSTER_LABEL, KindProvider

_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def node_memory_bytes(name: str) -> int:
    """The sum of the cluster's node containers' memory use, as Docker's cgroups count it."""
    ids = [c["ID"] for c in docker.containers(f"{CLUSTER_LABEL}={name}")]
    out = docker.run("stats", "--no-stream", "--format", "{{.MemUsage}}", *ids)
    total = 0.0
    for line in out.splitlines():
        used = line.split("/")[0].strip()
        number = used.rstrip("BKMGi")
        total += float(number) * _UNITS[used[len(number):]]
    return int(total)


def host_rss_bytes(cluster: KindProvider) -> int:
    """The RSS of the provider's own processes on this machine (controllers, registry, relay) and their children."""
    total = 0
    for pid in cluster.pids().values():
        try:
            proc = psutil.Process(pid)
            total += sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)])
        except psutil.Error:
            continue
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--pools", default="default")
    parser.add_argument("--cold-images", action="store_true")
    args = parser.parse_args()
    kit = tools.ensure_tools(lambda _m: None)
    result: dict[str, object] = {"bench": "kind", "pools": args.pools, "runs": args.runs}
    if args.cold_images:
        ref = nodeimage.ensure_node_image(kit, lambda _m: None).ref
        docker.run("rmi", ref)
        built = nodeimage.ensure_node_image(kit, lambda _m: None)
        result["node_image_build_s"] = round(built.built_seconds, 1)
        result["node_image_mib"] = docker.image_size(built.ref) >> 20
    ups: list[float] = []
    downs: list[float] = []
    memory: list[int] = []
    host: list[int] = []
    for i in range(args.runs):
        cluster = KindProvider(f"bk{os.getpid() % 10000}-{i}", args.pools, log=lambda _m: None)
        t0 = time.perf_counter()
        info = cluster.up()
        ups.append(time.perf_counter() - t0)
        result["nodes"] = len(info.nodes)
        memory.append(node_memory_bytes(cluster.name))
        host.append(host_rss_bytes(cluster))
        t0 = time.perf_counter()
        cluster.down()
        downs.append(time.perf_counter() - t0)
    result.update({"up_median_s": round(statistics.median(ups), 1), "up_max_s": round(max(ups), 1),
                   "down_median_s": round(statistics.median(downs), 1),
                   "node_memory_mib_median": int(statistics.median(memory)) >> 20,
                   "host_rss_mib_median": int(statistics.median(host)) >> 20})
    print(json.dumps(result))
    print(f"cluster up --provider kind -> {result.get('nodes')} nodes Ready: median {result['up_median_s']}s "
          f"(max {result['up_max_s']}s) over {args.runs} runs; node containers' memory "
          f"{result['node_memory_mib_median']} MiB, the provider's processes here {result['host_rss_mib_median']} MiB "
          f"RSS; down median {result['down_median_s']}s")


if __name__ == "__main__":
    main()
