"""``cluster up --provider kind``: the pool layout as a kind cluster of real kubelets.

One control-plane node and one worker per pool node, from the node image built here
(``nodeimage.py``) or a stock ``kindest/node`` image; context ``kind-<name>`` (kind's own), in its
own Docker network ``deploy-suite-<name>``, the API server published on 127.0.0.1. After kind
has created the nodes, ``up``:

1. writes each node's CNI configuration and the routes between nodes' pod CIDRs (no kindnetd),
   and refuses pod traffic to Service addresses kube-proxy has not rewritten (``config.service_guard``);
2. makes worker i the layout's pool node i: its labels (GPU Feature Discovery's included), taints,
   and ``nvidia.com/gpu`` advertised in the node's status as an extended resource;
3. installs the operator replica's CRDs and webhooks (as ``cluster.py`` does for kwok) and starts
   the controllers process (operator replica, storage provisioner, webhooks) on this machine with
   ``--no-serving``: pods are real containers here, nothing is served by local processes;
4. relays the webhooks' 127.0.0.1 port into the control-plane node (``relay.py``) and points every
   node's containerd at a registry of ours for the registries DGDs name (``registry.py``);
5. waits for kubeadm's CoreDNS Deployment to be available, so pods resolve Service names.

State lives under ``~/.cache/deploy-suite/kind/clusters/<name>``; its marker names the provider,
so ``status`` and ``down`` find it. ``down`` removes only this cluster's containers, their
volumes and its network, and ends every host process carrying the cluster's mark (``procs.MARK``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy_suite import clock, yamlio
from deploy_suite.access.kube import Kube, Obj
from deploy_suite.access.watch import Watch
from deploy_suite.constants import GPU_RESOURCE
from deploy_suite.errors import WaitTimeout
from deploy_suite_offline import binaries, pools, procs, webhook
from deploy_suite_offline.cluster import (
    CONTROLLERS,
    MANIFESTS,
    MARKER,
    ClusterInfo,
    checked_choices,
    node_ready,
    read_marker,
    read_nodes,
    wait_established,
)
from deploy_suite_offline.errors import ClusterError
from deploy_suite_offline.kind import config, docker, dynamo_image, nodeimage, python_image, registry, tools
from deploy_suite_offline.operator_sim import profiles
from deploy_suite_offline.procs import Log

PROVIDER = "kind"
RELAY = "deploy-suite-webhook-relay"
REGISTRY = "deploy-suite-registry"
UP_TIMEOUT_S = 300.0  # `up`'s default bound: real kubelets pull and start their pods (provider.ClusterProvider.up)
CLUSTER_LABEL = "io.x-k8s.kind.cluster"  # the label kind puts on its node containers


@dataclass(frozen=True)
class CreateRequest:
    """What kind's ``create cluster`` is given: names, binaries, image, config, and environment."""

    name: str
    kind: Path
    image: str
    config: Path
    kubeconfig: Path
    env: dict[str, str]
    kubectl: Path


Creator = Callable[[CreateRequest], None]


def workdir() -> Path:
    return binaries.cache_root() / "kind"


def context_name(name: str) -> str:
    return f"kind-{name}"


def network_name(name: str) -> str:
    return f"deploy-suite-{name}"


def exists(name: str) -> bool:
    """A kind cluster of this name was made by us (its marker exists)."""
    return (workdir() / "clusters" / name / MARKER).is_file()


def _docker_name(ref: str) -> str:
    """The name containerd gives an image Docker saved: docker.io/ and library/ spelled out."""
    first = ref.split("/", 1)[0]
    if "." in first or ":" in first or first == "localhost":
        return ref
    return f"docker.io/{ref}" if "/" in ref else f"docker.io/library/{ref}"


class KindProvider:
    def __init__(self, name: str = "dev", pools_spec: str | Path = "default", kubeconfig: str | Path | None = None,
                 log: Log = print, operator: str | None = None,
                 orchestrators: tuple[str, ...] | list[str] | None = None, node_image: str | None = None,
                 creator: Creator | None = None) -> None:
        """``creator`` runs kind's own ``create cluster`` (default: the kind binary; the test
        fixture passes pytest-kind's ``KindCluster``); everything before and after is ours."""
        self._operator, self._orchestrators = checked_choices(name, operator, orchestrators)
        self.name = name
        self.pools_spec = str(pools_spec)
        self.log = log
        self.node_image = node_image
        self.creator = creator
        self.dir = workdir() / "clusters" / name
        self.context = context_name(name)
        self.kubeconfig = Path(kubeconfig).resolve() if kubeconfig else \
            binaries.cache_root() / "kubeconfigs" / f"{self.context}.yaml"

    # ------------------------------------------------------------------ state
    @property
    def marker_path(self) -> Path:
        return self.dir / MARKER

    def _marker(self) -> dict[str, Any] | None:
        return read_marker(self.marker_path)

    def _write_marker(self, **fields: Any) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        procs.write_atomic(self.marker_path, json.dumps({
            "name": self.name, "provider": PROVIDER, "created_by": "deploy-suite", **fields}, indent=2))

    @property
    def mark(self) -> str:  # carried by every host process of this cluster (procs.MARK)
        return str(self.dir)

    def _recorded(self, key: str, default: Any) -> Any:
        return (self._marker() or {}).get(key, default)

    @property
    def operator(self) -> str:
        """As asked, else as the marker records, else the default profile."""
        return self._operator or str(self._recorded("operator", profiles.DEFAULT_PROFILE))

    @property
    def orchestrators(self) -> tuple[str, ...]:
        chosen = self._orchestrators
        return chosen if chosen is not None else profiles.orchestrators(list(self._recorded("with", [])))

    def pids(self) -> dict[str, int]:
        """This provider's own live host processes by name (controllers, registry, relay), from their pid files."""
        found: dict[str, int] = {}
        for f in sorted((self.dir / "pids").glob("*.pid")):
            with contextlib.suppress(OSError, ValueError):
                pid = int(f.read_text().strip())
                if procs.alive(pid) and str(self.dir) in procs.cmdline(pid):
                    found[f.stem] = pid
        return found

    def info(self) -> ClusterInfo:
        marker = self._marker() or {}
        return ClusterInfo(
            name=self.name, context=self.context, kubeconfig=str(marker.get("kubeconfig", self.kubeconfig)),
            cluster_dir=str(self.dir), audit_log="", pools=str(marker.get("pools", self.pools_spec)),
            created_at=str(marker.get("created_at", "")), operator=str(marker.get("operator", self.operator)),
            orchestrators=list(marker.get("with", self.orchestrators)), provider=PROVIDER)

    def kube(self) -> Kube:
        return Kube(self.context, self.info().kubeconfig, user_agent=f"deploy-suite-kind/{self.name}")

    def node_containers(self) -> list[str]:
        return sorted(c["Names"] for c in docker.containers(f"{CLUSTER_LABEL}={self.name}"))

    # ------------------------------------------------------------------ status
    def status(self) -> ClusterInfo:
        info = self.info()
        marker = self._marker()
        if marker is None:
            info.state = "foreign" if self.dir.exists() else "down"
            return info
        info.pids = self.pids()
        running = [c for c in docker.containers(f"{CLUSTER_LABEL}={self.name}") if c.get("State") == "running"]
        if not running or marker.get("starting"):
            info.state = "stale"
            return info
        return read_nodes(info, self.kube, self.log)

    # ------------------------------------------------------------------ up
    def up(self, wait_timeout: float | None = None) -> ClusterInfo:
        wait_timeout = UP_TIMEOUT_S if wait_timeout is None else wait_timeout
        layout = pools.load(self.pools_spec)  # bad input fails before anything starts
        why = docker.available()
        if why is not None:
            raise ClusterError(f"no Docker engine answers ({why}); fix: {docker.INSTALL_HINT}")
        marker = self._marker()
        if self.dir.exists() and marker is None:
            raise ClusterError(f"{self.dir} exists but was not created by deploy-suite; fix: pick another --name")
        if marker is not None:
            return self._up_again(marker, layout, wait_timeout)
        started = clock.monotonic()
        kit = tools.ensure_tools(self.log)
        image = self.node_image or nodeimage.ensure_node_image(kit, self.log).ref
        built_here = image.startswith(nodeimage.NODE_REPO + ":")
        shared = self.dir / "pv"
        # The marker exists before the first container: an interrupted `up` is cleaned by `down`.
        self._write_marker(starting=True, kubeconfig=str(self.kubeconfig))
        shared.mkdir(parents=True, exist_ok=True)
        cfg = self.dir / "kind-config.yaml"
        cfg.write_text(yamlio.dump(config.kind_config(layout, str(shared), built_here)))
        self.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        self.log(f"creating kind cluster {self.name} ({1 + len(layout.node_names())} nodes, image {image}) ...")
        env = {"KIND_EXPERIMENTAL_PROVIDER": "docker", "KIND_EXPERIMENTAL_DOCKER_NETWORK": network_name(self.name)}
        request = CreateRequest(self.name, kit.kind, image, cfg, self.kubeconfig, env, kit.node("kubectl"))
        for attempt in (1, 2):
            try:
                (self.creator or self._kind_create)(request)
                break
            except ClusterError as exc:
                # On a loaded machine kubeadm's join can miss its 10 s request deadline
                # (docs/offline-cluster.md); kind has removed the nodes: try once more.
                if attempt == 2:
                    raise
                self.log(f"kind create cluster failed ({str(exc)[:300]}); retrying once")
                self._kind_delete(kit.kind)
        webhook.make_tls(self.dir / "webhook")
        self._write_marker(context=self.context, kubeconfig=str(self.kubeconfig), pools=self.pools_spec,
                           pools_source=str(pools.resolve(self.pools_spec).resolve()), operator=self.operator,
                           node_image=image, webhook_port=procs.free_port(), registry_port=procs.free_port(),
                           **{"with": list(self.orchestrators)},
                           created_at=clock.iso_now())
        self._complete(layout, wait_timeout)
        info = self.status()
        self.log(f"cluster {self.name} up in {clock.monotonic() - started:.1f}s ({len(info.nodes)} nodes Ready)")
        return self._report(info)

    def _kind_create(self, req: CreateRequest) -> None:
        started = clock.monotonic()
        done = procs.run([str(req.kind), "create", "cluster", "--name", req.name, "--image", req.image,
                          "--config", str(req.config), "--kubeconfig", str(req.kubeconfig), "--retain"],
                         env={**os.environ, **req.env}, output=self.dir / "kind-create.log", tied=True, every=30.0,
                         heartbeat=lambda: self.log(f"  kind create cluster still running "
                                                    f"[{clock.monotonic() - started:.0f}s]"))
        if done.returncode != 0:
            tail = (self.dir / "kind-create.log").read_text(errors="replace")[-1500:].strip()
            raise ClusterError(f"kind create cluster {self.name} failed (exit {done.returncode}): {tail}; fix: see "
                               f"{self.dir / 'kind-create.log'} and `docker logs {self.name}-control-plane`, then "
                               f"`deploy-suite cluster down --name {self.name}`")

    def _kind_delete(self, kind: Path) -> None:
        procs.run([str(kind), "delete", "cluster", "--name", self.name, "--kubeconfig", str(self.kubeconfig)],
                  env={**os.environ, "KIND_EXPERIMENTAL_PROVIDER": "docker"}, tied=True)

    def _up_again(self, marker: dict[str, Any], layout: pools.Layout, wait_timeout: float) -> ClusterInfo:
        if marker.get("starting"):
            raise ClusterError(f"cluster {self.name} did not finish starting; fix: `deploy-suite cluster down "
                               f"--name {self.name}`, then `up` again")
        running = (str(marker.get("operator", profiles.DEFAULT_PROFILE)),
                   profiles.orchestrators(marker.get("with", [])))
        if (self._operator is not None and self._operator != running[0]) or \
                (self._orchestrators is not None and self._orchestrators != running[1]) or \
                Path(str(marker.get("pools_source", ""))) != pools.resolve(self.pools_spec).resolve():
            raise ClusterError(f"cluster {self.name} is already up with pools {marker.get('pools')}, operator "
                               f"{running[0]}; fix: `deploy-suite cluster down --name {self.name}` first, or use "
                               "another --name")
        stopped = [c["Names"] for c in docker.containers(f"{CLUSTER_LABEL}={self.name}") if c.get("State") != "running"]
        if stopped:
            self.log(f"starting stopped node containers: {', '.join(sorted(stopped))}")
            docker.run("start", *sorted(stopped))
        self.log(f"cluster {self.name} is already up")
        self._complete(layout, wait_timeout)
        return self._report(self.status())

    def _report(self, info: ClusterInfo) -> ClusterInfo:
        self.log(f"kubeconfig: {info.kubeconfig}")
        self.log(f"context: {info.context}")
        return info

    def _complete(self, layout: pools.Layout, timeout: float) -> None:
        """Everything after kind's own work; safe to repeat on a running cluster."""
        kube = self.kube()
        roles = config.worker_roles(self.name, layout)
        self._configure_cni(kube, timeout)
        self._wait_nodes(kube, [r.node for r in roles] + [f"{self.name}-control-plane"], timeout)
        for role in roles:
            self._play(kube, role)
        self._install_manifests(kube, layout, timeout)
        gateway = self._gateway()
        self._start_relay(gateway)
        self._start_registry(gateway)
        self._ensure_controllers()
        self._wait_dns(kube, timeout)  # last: CoreDNS starts while the steps above run

    # ------------------------------------------------------------------ nodes
    def _node_addresses(self) -> dict[str, str]:
        found = {}
        for name in self.node_containers():
            nets = docker.inspect(name)["NetworkSettings"]["Networks"]
            net = nets.get(network_name(self.name)) or next(iter(nets.values()))
            found[name] = str(net["IPAddress"])
        return found

    def _configure_cni(self, kube: Kube, timeout: float) -> None:
        deadline = clock.monotonic() + timeout
        while True:  # the controller manager allocates pod CIDRs once each node has registered
            nodes, _ = kube.list_items("Node")
            cidrs = {n["metadata"]["name"]: str((n.get("spec") or {}).get("podCIDR") or "") for n in nodes}
            if len(cidrs) == len(self.node_containers()) and all(cidrs.values()):
                break
            if clock.monotonic() >= deadline:
                raise ClusterError(f"nodes got no pod CIDR within {timeout:.0f}s ({cidrs}); fix: see "
                                   f"`docker exec {self.name}-control-plane crictl logs` of kube-controller-manager")
            clock.sleep(1.0)
        addresses = self._node_addresses()
        for node, cidr in sorted(cidrs.items()):
            docker.exec_in(node, "sh", "-c", config.service_guard())  # before any pod can start
            docker.exec_in(node, "sh", "-c", "mkdir -p /etc/cni/net.d && cat > /etc/cni/net.d/10-deploy-suite.conflist",
                           input_bytes=config.cni_conflist(cidr).encode())
            for other_cidr, via in config.routes(node, cidrs, addresses):
                docker.exec_in(node, "ip", "route", "replace", other_cidr, "via", via)

    def _wait_nodes(self, kube: Kube, names: list[str], timeout: float) -> None:
        wanted = set(names)

        def all_ready(objs: dict[str, Obj]) -> tuple[bool, str]:
            ready = {o["metadata"]["name"] for o in objs.values() if node_ready(o)}
            missing = sorted(wanted - ready)
            return not missing, f"{len(wanted & ready)}/{len(wanted)} nodes Ready" + (
                f" (waiting for {', '.join(missing[:5])})" if missing else "")

        try:
            kube.wait_for(Watch("Node"), all_ready, awaited="all kind nodes Ready", timeout=timeout)
        except WaitTimeout as exc:
            raise ClusterError(f"{exc}; fix: see `docker exec <node> journalctl -u kubelet`") from exc

    def _wait_dns(self, kube: Kube, timeout: float) -> None:
        """kubeadm's CoreDNS Deployment is Available (a ready replica answers the kube-dns Service),
        so pods resolve Service names once ``up`` returns (docs/offline-cluster.md, "The kind
        provider")."""
        def available(objs: dict[str, Obj]) -> tuple[bool, str]:
            dep = next(iter(objs.values()), None) or {}
            status = dep.get("status") or {}
            done = any(c.get("type") == "Available" and c.get("status") == "True"
                       for c in status.get("conditions") or [])
            wanted = (dep.get("spec") or {}).get("replicas")
            return done, f"CoreDNS {int(status.get('readyReplicas') or 0)}/{wanted} ready"

        try:
            kube.wait_for(Watch("Deployment", "kube-system", "coredns"), available, awaited="CoreDNS available",
                          timeout=timeout)
        except WaitTimeout as exc:
            raise ClusterError(f"{exc}; fix: see `kubectl -n kube-system describe pods -l k8s-app=kube-dns` "
                               f"(context {self.context})") from exc

    def _play(self, kube: Kube, role: config.WorkerRole) -> None:
        """Worker ``role.node`` plays pool node ``role.pool_node``: labels, taints, GPUs."""
        kube.apply({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": role.node, "labels": role.labels},
                    "spec": {"taints": role.taints}})
        if role.gpus:
            # An extended resource advertised in the node's status, as Kubernetes documents it
            # ("Advertise Extended Resources for a Node"); the kubelet keeps it in allocatable.
            gpus = {GPU_RESOURCE: str(role.gpus)}
            kube.patch_status("Node", role.node, None, {"capacity": gpus, "allocatable": gpus})

    def _install_manifests(self, kube: Kube, layout: pools.Layout, timeout: float) -> None:
        crds = profiles.shape_crds(profiles.get(self.operator), yamlio.load_all(MANIFESTS / "crds.yaml"))
        for orchestrator in self.orchestrators:
            crds += yamlio.load_all(MANIFESTS / f"{orchestrator}-crds.yaml")
        # The platform's discovery CRD: the pods here are real Dynamo runtimes (operator_sim/discovery.py).
        crds += yamlio.load_all(MANIFESTS / "discovery-crd.yaml")
        for crd in crds:
            kube.apply(crd)
        wait_established(kube, [c["metadata"]["name"] for c in crds], timeout)
        for sc in layout.storage_class_manifests():
            kube.apply(sc)
        port = int((self._marker() or {}).get("webhook_port") or 0)
        kube.apply(webhook.info_configmap(port, self.dir / "webhook"))
        if profiles.get(self.operator).webhook:
            kube.apply(webhook.dgd_webhook_configuration(profiles.get(self.operator), port, self.dir / "webhook"))

    # ------------------------------------------------------------------ host processes
    def _spawn(self, key: str, argv: list[str]) -> None:
        if key in self.pids():
            return
        (self.dir / "pids").mkdir(parents=True, exist_ok=True)
        log = self.dir / "logs" / f"{key}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        proc = procs.spawn(argv, log, log, cwd=self.dir, mark=self.mark)
        (self.dir / "pids" / f"{key}.pid").write_text(str(procs.detach(proc)))

    def _gateway(self) -> str:
        """This machine's address in the cluster's own network: reachable from its nodes only."""
        net = docker.run("network", "inspect", network_name(self.name), "--format",
                         "{{range .IPAM.Config}}{{.Gateway}} {{end}}").split()
        gateway = next((g for g in net if "." in g), "")
        if not gateway:
            raise ClusterError(f"network {network_name(self.name)} has no IPv4 gateway; fix: `cluster down`, then up")
        return gateway

    def _start_relay(self, gateway: str) -> None:
        port = int((self._marker() or {}).get("webhook_port") or 0)
        self._spawn(RELAY, [sys.executable, "-m", "deploy_suite_offline.kind.relay", "--listen", f"{gateway}:{port}",
                            "--to", f"127.0.0.1:{port}", "--state", str(self.dir)])
        plane = f"{self.name}-control-plane"
        # A transient unit of the node's systemd: restarted if it dies, gone with the container.
        docker.exec_in(plane, "sh", "-c", f"systemctl is-active -q {RELAY} || systemd-run -q --unit {RELAY} "
                       f"-p Restart=always socat TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr TCP:{gateway}:{port}")

    def _start_registry(self, gateway: str) -> None:
        port = int((self._marker() or {}).get("registry_port") or 0)
        if not port:
            return
        address = f"{gateway}:{port}"
        if REGISTRY not in self.pids():
            self._spawn(REGISTRY, [sys.executable, "-m", "deploy_suite_offline.kind.registry", "--listen", address,
                                   "--state", str(self.dir), "--image", str(self._dynamo_export()),
                                   "--python-image", str(self._python_export())])
        hosts = registry.hosts_toml(address).encode()
        for node in self.node_containers():
            for name in registry.REGISTRIES:
                docker.exec_in(node, "sh", "-c", f"mkdir -p /etc/containerd/certs.d/{name} && "
                               f"cat > /etc/containerd/certs.d/{name}/hosts.toml", input_bytes=hosts)

    def _dynamo_export(self) -> Path:
        """The Dynamo image, saved for the registry to serve under the names DGDs use (built and
        saved once per machine; docs/offline-cluster.md, "Every image a DGD names is served")."""
        return self._export(dynamo_image.ensure_dynamo_image(log=self.log).ref, "dynamo")

    def _python_export(self) -> Path:
        """The Python image support Jobs run, saved for the registry as ``python:<X.Y>[-slim]``
        (docs/offline-cluster.md, "Support images and the hub replica")."""
        return self._export(python_image.ensure_python_image(log=self.log).ref, "python")

    def _export(self, ref: str, what: str) -> Path:
        with procs.file_lock(nodeimage.cache_dir() / f".{what}-image.lock",
                             waiting=lambda: self.log(f"waiting for another {what} image build")):
            return registry.export(ref, str(docker.inspect(ref)["Id"]), nodeimage.cache_dir() / "registry",
                                   docker.docker_binary())

    def _ensure_controllers(self) -> None:
        port = int((self._marker() or {}).get("webhook_port") or 0)
        self._spawn(CONTROLLERS, [
            sys.executable, "-m", "deploy_suite_offline.controllers", "--kubeconfig", str(self.kubeconfig),
            "--context", self.context, "--cluster-dir", str(self.dir), "--operator", self.operator, "--no-serving",
            "--discovery", "kubernetes",
            *[a for o in self.orchestrators for a in ("--with", o)],
            "--webhook-port", str(port), "--webhook-dir", str(self.dir / "webhook")])

    def load_image(self, ref: str, aliases: list[str], nodes: list[str] | None = None) -> None:
        """Import a Docker image into the nodes' containerd under ``aliases`` (the names pods use)."""
        for node in nodes or self.node_containers():
            self.log(f"loading {ref} into {node} as {', '.join(aliases)} ...")
            docker.save_into(ref, node, "ctr", "-n", "k8s.io", "images", "import", "--no-unpack", "-")
            for alias in aliases:
                docker.exec_in(node, "ctr", "-n", "k8s.io", "images", "tag", "--force", _docker_name(ref), alias)

    # ------------------------------------------------------------------ down
    def down(self) -> ClusterInfo:
        info = self.info()
        marker = self._marker()
        if marker is None:
            if self.dir.exists():
                raise ClusterError(f"{self.dir} was not created by deploy-suite; fix: it is left untouched")
            procs.end_cluster(self.name, self.mark, self.log)  # what an earlier `down` may have missed
            self.log(f"cluster {self.name} is not running (nothing to remove)")
            return info
        procs.terminate(list(self.pids().values()))
        procs.end_cluster(self.name, self.mark, self.log)  # also what the relay, registry or controllers started
        kind = tools.kind_dir() / "kind"
        if kind.exists():
            self._kind_delete(kind)
        left = self.node_containers()  # kind missing, or it failed: our labelled containers only
        if left:
            docker.run("rm", "-f", "-v", *left, check=False)
        docker.run("network", "rm", network_name(self.name), check=False)
        shutil.rmtree(self.dir, ignore_errors=True)
        kubeconfig = Path(str(marker.get("kubeconfig", "")))
        if kubeconfig.is_file():
            kubeconfig.unlink()
        self.log(f"cluster {self.name} is down")
        info.state = "down"
        return info
