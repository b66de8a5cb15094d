"""``cluster down`` leaves no process of its kwok cluster running (issue 30, item 6).

Seen once: the ZMQ broker of an agg DGD that a disagg DGD of the same name had replaced ran on
after ``down``, its working directory deleted. Here an agg DGD is deleted and a disagg one of the
same name created at once (a run's step 3 then step 5), then replaced by the agg and that again by
the disagg while the agg's serving starts; ``down`` must end every process the cluster started:
the control plane, the controllers, and each Dynamo process the operator replica started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from deploy_suite import clock
from deploy_suite.access.kube import Kube
from deploy_suite.access.watch import Watch
from deploy_suite_offline import procs
from deploy_suite_offline.cluster import CONTROLLERS, OfflineCluster, wait_exit
from tests.integration.replica import ALPHA, manifest, wait_state
from tests.support.processes import of_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
SERVED = 120.0  # the serving of a DGD: broker, mocker and frontend up, the model listed


def _serving(workdir: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads((workdir / "serving.json").read_text())
    except (OSError, ValueError):
        return {}
    return data


def _recorded(workdir: Path) -> set[int]:
    """The pids the DGD's pid file names (what ``down`` and the replica stop by)."""
    try:
        return {int(p) for p in json.loads((workdir / "pids").read_text())["pids"].values()}
    except (OSError, ValueError, KeyError):
        return set()


ROLES = {"broker": "zmq-broker.json", "frontend": "dynamo.frontend", "mocker": "dynamo.mocker"}


def _in(workdir: Path, role: str) -> list[int]:
    """Live processes running in ``workdir`` whose command line plays ``role``."""
    return [p for p in of_cluster(workdir) if ROLES[role] in procs.cmdline(p)]


def _serves(kube: Kube, ns: str, workdir: Path, model: str) -> None:
    """Until the DGD's serving is ``model``'s and the DGD is Ready."""
    assert procs.poll(lambda: True if _serving(workdir).get("served_model") == model else None, SERVED), \
        f"{model} never served from {workdir}"
    wait_state(kube, ALPHA, ns, "alpha-agg", "successful", timeout=SERVED)


def _replace(kube: Kube, ns: str, doc: dict[str, Any]) -> None:
    """Delete the DGD ``alpha-agg``, wait until it is gone, create ``doc`` in its place."""
    kube.delete(ALPHA, "alpha-agg", ns)
    kube.wait_for(Watch(ALPHA, ns, name="alpha-agg"), lambda objs: (not objs, f"{len(objs)} left"),
                  awaited="alpha-agg deleted", timeout=60)
    kube.apply(doc, ns)


def test_down_ends_every_process_also_of_dgds_replaced_during_the_clusters_life(tmp_path: Path) -> None:
    name = f"x{os.getpid()}"
    cluster = OfflineCluster(name, "default", kubeconfig=tmp_path / "kc.yaml", log=lambda _m: None)
    root = cluster.dir
    agg, disagg = manifest("dgd-alpha-agg.yaml"), manifest("dgd-alpha-disagg.yaml", rename="alpha-agg")
    try:
        cluster.up()
        kube = cluster.kube()
        ns = "replaced"
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        workdir = root / "dynamo" / ns / "alpha-agg"
        kube.apply(agg, ns)
        _serves(kube, ns, workdir, "qwen3-alpha-agg")
        first = set(_serving(workdir)["roles"].values())
        # As step 3 then step 5 of a run do (the webhook refuses a new topology in place): the agg
        # DGD deleted, a disagg one of the same name created at once; the replica's stop of the one
        # and start of the other overlap.
        _replace(kube, ns, disagg)
        _serves(kube, ns, workdir, "r1-distill")
        assert all(wait_exit(pid, 30) for pid in first), "the deleted DGD's processes still run"
        # Once more while the agg's serving starts (its broker runs, nothing is listed yet).
        second = set(_serving(workdir)["roles"].values())
        _replace(kube, ns, agg)
        assert procs.poll(lambda: True if set(_in(workdir, "broker")) - second else None, SERVED), \
            "the agg's broker never started"
        _replace(kube, ns, disagg)
        _serves(kube, ns, workdir, "r1-distill")
        kube.close()

        def one_each() -> bool | None:
            running = {r: _in(workdir, r) for r in ROLES}
            return True if all(len(p) == 1 for p in running.values()) else None

        # Each replaced serving was ended, and what runs is what the DGD's pid file names.
        assert procs.poll(one_each, 30), {r: _in(workdir, r) for r in ROLES}
        assert {p for r in ROLES for p in _in(workdir, r)} <= _recorded(workdir)
        pids = cluster.status().pids
        assert {CONTROLLERS, "etcd", "kube-apiserver"} <= set(pids)
        running = procs.marked(cluster.mark)  # every process of the cluster carries its mark
        assert set(pids.values()) | set(_in(workdir, "broker")) <= set(running)
        # A record lost as before the fix (a start beside a stop overwrote the DGD's pid file): the
        # broker is named nowhere but by its mark.
        record = json.loads((workdir / "pids").read_text())
        broker = record["pids"].pop("broker")
        (workdir / "pids").write_text(json.dumps(record))
        started = clock.monotonic()
        down = subprocess.run([sys.executable, "-m", "deploy_suite.cli", "cluster", "down", "--name", name],
                              capture_output=True, text=True, timeout=300, check=False)
        assert down.returncode == 0, down.stderr
        swept = [line for line in down.stdout.splitlines() if "no pid file named" in line]
        assert len(swept) == 1 and f"stopping 1 process(es) no pid file named: pid {broker}: " in swept[0], down.stdout
        assert swept[0].endswith("zmq-broker.json"), swept
        assert not procs.alive(broker)
        assert of_cluster(root) == [], [procs.cmdline(p) for p in of_cluster(root)]
        assert not any(procs.alive(p) for p in running)
        assert clock.monotonic() - started < 120
        assert not root.exists()
    finally:
        OfflineCluster(name, log=lambda _m: None).down()  # idempotent: nothing left even on failure
