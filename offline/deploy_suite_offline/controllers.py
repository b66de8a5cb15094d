"""Host-process controllers that complete the offline cluster, started and stopped with it.

Kubernetes has no storage provisioner without a CSI driver, so this process runs a small
dynamic provisioner for the offline storage classes (the role external-provisioner plays on a
real cluster): it honours ``WaitForFirstConsumer`` by waiting for the scheduler's
``volume.kubernetes.io/selected-node`` annotation, creates a PV sized and moded like the claim,
pre-bound through ``claimRef``, and deletes released PVs (reclaim policy ``Delete``). The real PV
controller in kube-controller-manager does the binding.

It serves the operator's admission webhooks over TLS on 127.0.0.1 (:mod:`deploy_suite_offline.webhook`)
and runs the Dynamo operator simulator (:mod:`deploy_suite_offline.operator_sim`): DGDs become
Deployments, Services and status, and get a local Dynamo frontend + mocker behind kwok port-forwards.

Run as ``python -m deploy_suite_offline.controllers --kubeconfig K --context C --cluster-dir D``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deploy_suite import clock
from deploy_suite.access.kube import Kube, Obj
from deploy_suite.errors import Conflict, KubeError, NotFound
from deploy_suite_offline.kai import KaiBinder
from deploy_suite_offline.operator_sim import profiles
from deploy_suite_offline.operator_sim.controller import OperatorSim
from deploy_suite_offline.pools import PROVISIONER
from deploy_suite_offline.webhook import WebhookServer

SELECTED_NODE = "volume.kubernetes.io/selected-node"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"


def log(message: str) -> None:
    print(f"{clock.iso_now()} {message}", flush=True)


class Provisioner:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.classes: dict[str, Obj] = {}

    def storage_class(self, name: str) -> Obj | None:
        if name not in self.classes:
            sc = self.kube.get_or_none("StorageClass", name)
            if sc is None:
                return None
            self.classes[name] = sc
        return self.classes[name]

    def on_claim(self, etype: str, pvc: Obj) -> None:
        if etype == "DELETED" or (pvc.get("status") or {}).get("phase") != "Pending":
            return
        spec = pvc.get("spec") or {}
        if spec.get("volumeName"):
            return  # already bound or being bound by the PV controller
        class_name = spec.get("storageClassName")
        sc = self.storage_class(class_name) if class_name else None
        if sc is None or sc.get("provisioner") != PROVISIONER:
            return
        meta = pvc["metadata"]
        annotations = meta.get("annotations") or {}
        node = annotations.get(SELECTED_NODE)
        if sc.get("volumeBindingMode") == "WaitForFirstConsumer" and not node:
            return  # the scheduler picks the node first
        pv: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"pvc-{meta['uid']}", "annotations": {PROVISIONED_BY: PROVISIONER}},
            "spec": {
                "capacity": {"storage": (spec.get("resources") or {}).get("requests", {}).get("storage", "1Gi")},
                "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy", "Delete"),
                "storageClassName": class_name,
                "volumeMode": spec.get("volumeMode", "Filesystem"),
                "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": meta["namespace"],
                             "name": meta["name"], "uid": meta["uid"]},
                "hostPath": {"path": f"/var/lib/deploy-suite/pv/{meta['uid']}"},
            },
        }
        if node:
            pv["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}
        try:
            self.kube.create(pv)
            log(f"provisioned {pv['metadata']['name']} for {meta['namespace']}/{meta['name']}")
        except Conflict:
            pass

    def on_volume(self, etype: str, pv: Obj) -> None:
        meta = pv.get("metadata") or {}
        if etype == "DELETED" or (meta.get("annotations") or {}).get(PROVISIONED_BY) != PROVISIONER:
            return
        if (pv.get("status") or {}).get("phase") == "Released" and \
                (pv.get("spec") or {}).get("persistentVolumeReclaimPolicy") == "Delete":
            self.kube.delete("PersistentVolume", meta["name"])
            log(f"deleted released {meta['name']}")


def run_loop(name: str, events: Callable[[], Any], handler: Callable[[str, Obj], None],
             stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            for etype, obj in events():
                try:
                    handler(etype, obj)
                except NotFound:
                    continue
                except KubeError as exc:
                    log(f"{name}: {exc}")
        except KubeError as exc:  # the watch itself failed: start over
            log(f"{name}: watch failed: {exc}")
            clock.wait_event(stop, 0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deploy_suite_offline.controllers")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--context", required=True)
    parser.add_argument("--cluster-dir", required=True, help="the cluster's state directory")
    parser.add_argument("--no-serving", action="store_true",
                        help="do not start Dynamo frontends/mockers for DGDs (status and children only)")
    parser.add_argument("--discovery", choices=["kubernetes"], default=None,
                        help="shape the DGDs' pods for Kubernetes discovery (their RBAC, downward-API env, "
                             "discovery labels): where the pods are real containers (kind)")
    parser.add_argument("--operator", default=profiles.DEFAULT_PROFILE, choices=sorted(profiles.PROFILES),
                        help="the operator generation the replica plays")
    parser.add_argument("--with", dest="orchestrators", action="append", default=[], choices=profiles.ORCHESTRATORS,
                        help="a multinode orchestrator whose API the cluster has (repeatable)")
    parser.add_argument("--webhook-port", type=int, default=0, help="serve the admission webhooks on 127.0.0.1:PORT")
    parser.add_argument("--webhook-dir", default=None, help="directory holding the webhook's tls.crt and tls.key")
    args = parser.parse_args(argv)
    profile = profiles.get(args.operator)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    kube = Kube(args.context, args.kubeconfig, user_agent="deploy-suite-controllers")
    prov = Provisioner(kube)
    # Its own client: the simulator's worker and serving threads must not queue behind watches.
    sim = OperatorSim(Kube(args.context, args.kubeconfig, user_agent="deploy-suite-operator-sim"),
                      Path(args.cluster_dir), log, serve=not args.no_serving, profile=profile,
                      orchestrators=profiles.orchestrators(args.orchestrators),
                      k8s_discovery=args.discovery == "kubernetes")
    loops = [
        ("provisioner/claims", lambda: kube.watch_events("PersistentVolumeClaim", stop), prov.on_claim),
        ("provisioner/volumes", lambda: kube.watch_events("PersistentVolume", stop), prov.on_volume),
        *sim.loops(stop),
    ]
    if args.webhook_port and args.webhook_dir:
        WebhookServer(args.webhook_port, Path(args.webhook_dir), profile, log).start(stop)
        log(f"admission webhooks on https://127.0.0.1:{args.webhook_port}")
    if "grove" in args.orchestrators:  # pods of the Grove path go to a KAI-like binder
        kai = KaiBinder(Kube(args.context, args.kubeconfig, user_agent="deploy-suite-kai"), log)
        loops += kai.loops(stop)
        kai.start(stop)
    sim.start(stop)
    threads = [threading.Thread(target=run_loop, args=(n, e, h, stop), daemon=True, name=n) for n, e, h in loops]
    for t in threads:
        t.start()
    log(f"controllers running against context {args.context} (operator {profile.name}"
        f"{''.join(' --with ' + o for o in args.orchestrators)}): {', '.join(n for n, _, _ in loops)}")
    stop.wait()
    log("controllers stopping")
    return 0


if __name__ == "__main__":
    sys.exit(main())
