"""The other roles, played for a test: the cluster admin and user-interviewer.

* :func:`admin_namespace` plays the cluster admin: a fresh namespace and ``hf-token-secret`` (the
  harness never creates either);
* :func:`write_experiment` plays user-interviewer: a copy of the sample experiment whose workload
  names the test's kube context and namespace, optionally with another DGD, other support
  manifests, another GPU ceiling or handoff timeouts, every hash recomputed;
* :class:`Target` is one test's namespace on an offline cluster with its scratch space: it writes
  experiments aimed at itself, runs the suite on them and switches kwok faults on for its pods;
  :func:`admin_target` makes one and, afterwards, removes its faults, reaps any orphan
  ``kubectl port-forward`` of its namespace and deletes the namespace.
"""

from __future__ import annotations

import contextlib
import copy
import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from deploy_suite import yamlio
from deploy_suite.access.kube import Kube, Obj
from deploy_suite.access.watch import Watch
from deploy_suite.fixtures.experiments.make_experiment import (
    SAMPLE_ROOT,
    Experiment,
    make_experiment,
    refresh,
    set_line,
)
from deploy_suite.procedure import waits
from deploy_suite_offline import faults
from deploy_suite_offline.cluster import MANIFESTS, OfflineCluster
from deploy_suite_offline.fixtures.cluster import HF_SECRET, admin_prerequisites
from tests.support.processes import kill_and_reap, port_forwards
from tests.support.runs import SuiteRun, run_suite

SECRET = HF_SECRET
SAMPLE_SUPPORT = SAMPLE_ROOT / "inputs"  # the sample's model-cache.yaml and model-download.yaml
_SAMPLE_SUPPORT_FILES = ("model-cache.yaml", "model-download.yaml")


def admin_namespace(kube: Kube, prefix: str, secret_value: str = "placeholder-not-a-real-token") -> str:
    """A unique namespace with ``hf-token-secret`` holding ``secret_value``, as the cluster admin makes them."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin_prerequisites(kube, name, secret_value)
    return name


def write_experiment(dest: Path, *, context: str, namespace: str, dgd: Path | None = None,
                     support: Mapping[str, Path] | None = None, gpu_ceiling: int | None = None,
                     timeouts: Mapping[str, float] | None = None) -> Experiment:
    """A copy of the sample experiment under ``dest`` aimed at ``context``/``namespace``.

    ``dgd`` replaces the sample's DGD (``None`` keeps the sample: v1alpha1, aggregated). ``support``
    maps support types to files copied into ``inputs/``: ``None`` keeps the sample's model-cache and
    model-download, ``{}`` hands over none. ``timeouts`` are added to the handoff. Hashes are
    recomputed after every change; the handoff keeps its comments unless it had to be rewritten.
    """
    exp = make_experiment(dest)
    root = exp.exp_root
    inputs = root / "inputs"
    if dgd is not None:
        (inputs / "user_provided_dgd.yaml").write_text(dgd.read_text(encoding="utf-8"), encoding="utf-8")
    workload = root / "user_workload.yaml"
    set_line(workload, "kube_context", json.dumps(context))
    set_line(workload, "namespace", json.dumps(namespace))
    if gpu_ceiling is not None:
        set_line(workload, "gpu_ceiling", str(gpu_ceiling))
    exp = refresh(root)
    if support is None and not timeouts:
        return exp
    data: dict[str, Any] = yamlio.load_one(exp.handoff0)
    if support is not None:
        for sample_file in _SAMPLE_SUPPORT_FILES:
            (inputs / sample_file).unlink()
        data.pop("support", None)
        for kind, path in support.items():
            target = inputs / f"{kind}.yaml"
            target.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
            data.setdefault("support", {})[kind] = f"inputs/{target.name}"
    if timeouts:
        data["timeouts"] = {**(data.get("timeouts") or {}), **timeouts}
    exp.handoff0.write_text(yamlio.dump(data), encoding="utf-8")
    return exp


def slow_stage(name: str, default: str, selector: Sequence[faults.Expression], delay_s: float) -> faults.Fault:
    """The cluster's default kwok stage ``default`` (pod-ready, pod-complete, pod-delete) for the
    selected pods only, taking ``delay_s`` seconds: the same transition, later, so that a wait is
    certainly in progress when a fault lands. Weight 10000, like every fault."""
    stages = yamlio.load_all(MANIFESTS / "stages.yaml")
    found = [d for d in stages if isinstance(d, dict) and d.get("metadata", {}).get("name") == default]
    if not found:
        raise KeyError(f"no default kwok stage {default!r} in stages.yaml")
    stage: Obj = copy.deepcopy(found[0])
    stage["metadata"] = {"name": name, "labels": {faults.LABEL_FAULT: "true"}}
    spec = stage["spec"]
    spec["selector"]["matchExpressions"] = [*spec["selector"]["matchExpressions"], *selector]
    spec["weight"] = faults.FAULT_WEIGHT
    ms = int(delay_s * 1000)
    spec["delay"] = {"durationMilliseconds": ms, "jitterDurationMilliseconds": ms}
    return faults.Fault(name, (stage,))


@dataclass
class Target:
    """One test's namespace on an offline cluster, its scratch space and the faults it switched on."""

    cluster: OfflineCluster
    kube: Kube  # the cluster admin's client, never the harness's
    namespace: str
    tmp: Path
    kwok_faults: list[faults.Fault] = field(default_factory=list)  # switched on, removed afterwards

    @property
    def context(self) -> str:
        return self.cluster.context

    @property
    def kubeconfig(self) -> str:
        return self.cluster.info().kubeconfig

    @property
    def reports(self) -> Path:
        return self.tmp / "reports"

    def experiment(self, dgd: Path | None = None, **kwargs: Any) -> Experiment:
        """The sample experiment aimed at this namespace (see :func:`write_experiment`)."""
        return write_experiment(self.tmp / "scratch", context=self.context, namespace=self.namespace, dgd=dgd,
                                **kwargs)

    def suite(self, exp: Experiment, *args: str, iteration: int = 0, handoff: Path | None = None,
              env: Mapping[str, str] | None = None) -> SuiteRun:
        """A run of the suite on ``exp``, not started yet (register output triggers first)."""
        return SuiteRun(exp.exp_root, iteration, self.kubeconfig, self.reports, args, handoff, dict(env or {}))

    def run(self, exp: Experiment, *args: str, iteration: int = 0, handoff: Path | None = None) -> SuiteRun:
        """Run the suite on ``exp`` to the end."""
        return run_suite(exp.exp_root, iteration, self.kubeconfig, self.reports, *args, handoff=handoff)

    def apply_fault(self, fault: faults.Fault) -> None:
        """Switch a kwok fault on; it is cluster-scoped, so it is removed when the test ends."""
        faults.apply(self.kube, fault)
        self.kwok_faults.append(fault)

    def slow(self, default: str, selector: Sequence[faults.Expression], delay_s: float) -> None:
        """Make one pod transition take ``delay_s`` for the selected pods (see :func:`slow_stage`)."""
        self.apply_fault(slow_stage(f"slow-{default}-{self.namespace}", default, selector, delay_s))

    def hold_gpus(self, nodes: Sequence[str], gpus: int) -> list[str]:
        """Another tenant's pods bound straight to ``nodes``, each holding ``gpus`` GPUs, Running."""
        names = []
        for node in nodes:
            name = f"gpu-holder-{node}"
            self.kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
                "nodeName": node, "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "registry.local/holder:1",
                                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}, self.namespace)
            names.append(name)

        def running(objs: dict[str, Obj]) -> tuple[bool, str]:
            phases = {o["metadata"]["name"]: (o.get("status") or {}).get("phase") for o in objs.values()}
            return all(phases.get(n) == "Running" for n in names), str(phases)

        self.kube.wait_for(Watch("Pod", self.namespace), running, awaited="GPU holders Running", timeout=30)
        return names


TargetT = TypeVar("TargetT", bound=Target)


@contextlib.contextmanager
def admin_target(cluster: OfflineCluster, tmp: Path, prefix: str, kind: type[TargetT]) -> Iterator[TargetT]:
    """A :class:`Target` (or subclass ``kind``) in a fresh admin-made namespace; afterwards nothing
    of the test is left on the shared cluster."""
    kube = cluster.kube()
    target = kind(cluster, kube, admin_namespace(kube, prefix), tmp)
    try:
        yield target
    finally:
        for pid in port_forwards(target.namespace):  # a failed test's orphan, never left running
            kill_and_reap(pid)
        for fault in target.kwok_faults:
            faults.remove(kube, fault)  # cluster-scoped: never left behind for the next test
        kube.delete("Namespace", target.namespace)  # its DGDs, pods and serving processes go with it
        # Terminating pods still hold their GPUs (step 2 counts them, as it must): the next test on
        # this cluster starts only when this one's pods are gone.
        kube.wait(waits.pods_gone(target.namespace), timeout=120)
        kube.close()
