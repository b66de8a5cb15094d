"""Lifecycle of the offline fake-GPU cluster: ``up``, ``down``, ``status``.

The control plane is real: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the
kwok controller (which plays every kubelet) are started as host processes by
``kwokctl create cluster --runtime binary`` from the locally built binaries, all bound to
127.0.0.1. Our state lives under ``~/.cache/deploy-suite/kwok`` (kwok's workdir, never the user's
``~/.kwok`` or ``~/.kube/config``), and each cluster directory carries a marker file: a cluster
without it was not created by us and is never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import ssl
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from deploy_suite import clock, yamlio
from deploy_suite.access.kube import Kube, Obj
from deploy_suite.access.watch import Watch
from deploy_suite.errors import Conflict, KubeError, WaitTimeout
from deploy_suite_offline import binaries, dynamo_env, dynamo_runtime, pools, procs, restart, webhook
from deploy_suite_offline.errors import ClusterError
from deploy_suite_offline.operator_sim import profiles
from deploy_suite_offline.procs import Log
from deploy_suite_offline.procs import wait_exit as wait_exit  # tests wait on cluster processes by this name

MARKER = "deploy-suite.json"
MANIFESTS = Path(__file__).with_name("manifests")
KWOK_CRDS = ("Stage", "PortForward", "ClusterPortForward", "Logs", "ClusterLogs")
KWOK_CRD_PLURALS = ("stages", "portforwards", "clusterportforwards", "logs", "clusterlogs")
CONTROLLERS = "deploy-suite-controllers"
UP_TIMEOUT_S = 120.0  # `up`'s default bound on the wait for nodes and CRDs (provider.ClusterProvider.up)
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$")
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
# Metadata level: who did what to which object, never request or response bodies (no secrets).
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
"""
# One controller manager and one scheduler, and nothing restarts them: with leader election (their
# default) each exits once it cannot renew its lease through an apiserver outage longer than the
# renew deadline (10 s; "leaderelection lost/stopped"), which a kubelet would restart on a real
# control plane but nothing does here, so every later Job, Deployment and pod would hang.
KWOKCTL_CONFIG = """\
kind: KwokctlConfiguration
apiVersion: config.kwok.x-k8s.io/v1alpha1
options:
  runtime: binary
  bindAddress: 127.0.0.1
componentsPatches:
- name: kube-controller-manager
  extraArgs:
  - key: leader-elect
    value: "false"
- name: kube-scheduler
  extraArgs:
  - key: leader-elect
    value: "false"
"""



def read_marker(path: Path) -> dict[str, Any] | None:
    """A cluster's marker file (every provider's), or None when absent or unreadable."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data


def workdir() -> Path:
    return binaries.cache_root() / "kwok"


def context_name(name: str) -> str:
    return f"offline-{name}"


@dataclass
class ClusterInfo:
    name: str
    context: str
    kubeconfig: str
    cluster_dir: str
    audit_log: str
    pools: str
    server: str = ""
    nodes: list[str] = field(default_factory=list)
    state: str = "down"  # up | down | stale
    pids: dict[str, int] = field(default_factory=dict)
    created_at: str = ""
    operator: str = profiles.DEFAULT_PROFILE
    orchestrators: list[str] = field(default_factory=list)
    provider: str = "kwok"  # kwok (this module) or kind (offline/deploy_suite_offline/kind/provider.py)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def checked_choices(name: str, operator: str | None, orchestrators: tuple[str, ...] | list[str] | None
                    ) -> tuple[str | None, tuple[str, ...] | None]:
    """A cluster's name, operator profile and orchestrators checked before anything starts (either
    provider): one line naming the bad input and the fix."""
    if not _NAME.match(name):
        raise ClusterError(f"cluster name {name!r} is not a DNS label of at most 32 characters; "
                           "fix: use lowercase letters, digits and '-' (e.g. --name dev)")
    if operator is not None:
        profiles.get(operator)
    return operator, profiles.orchestrators(list(orchestrators)) if orchestrators is not None else None


class OfflineCluster:
    def __init__(self, name: str = "dev", pools_spec: str | Path = "default", kubeconfig: str | Path | None = None,
                 apiserver_port: int = 0, log: Log = print, operator: str | None = None,
                 orchestrators: tuple[str, ...] | list[str] | None = None,
                 conversion_webhook: bool | None = None) -> None:
        """``operator`` is the operator replica's profile (``0.9``, ``1.x``, ``latest``) and
        ``orchestrators`` the multinode APIs installed (``lws``, ``grove``); None keeps what a cluster
        of this name already runs (its marker), else the default profile without orchestrators.
        ``conversion_webhook`` (profile ``latest``) converts DGDs between the served versions through
        a TLS conversion webhook instead of serving one stored shape under both."""
        self._operator, self._orchestrators = checked_choices(name, operator, orchestrators)
        self._conversion = conversion_webhook
        self.name = name
        self.pools_spec = str(pools_spec)
        self.apiserver_port = apiserver_port
        self.log = log
        self.dir = workdir() / "clusters" / name
        self.kubeconfig = Path(kubeconfig).resolve() if kubeconfig else \
            binaries.cache_root() / "kubeconfigs" / f"{context_name(name)}.yaml"
        self.context = context_name(name)

    # ------------------------------------------------------------------ state
    @property
    def marker_path(self) -> Path:
        return self.dir / MARKER

    def _marker(self) -> dict[str, Any] | None:
        return read_marker(self.marker_path)

    @property
    def mark(self) -> str:  # carried by every process of this cluster (procs.MARK)
        return str(self.dir)

    def _pids(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for f in sorted((self.dir / "pids").glob("*.pid")):
            with contextlib.suppress(OSError, ValueError):
                found[f.stem] = int(f.read_text().strip())
        return found

    def _own_live_pids(self) -> dict[str, int]:
        """Live processes of this cluster: recorded pids whose command line names our directory."""
        mine = str(self.dir)
        return {k: p for k, p in self._pids().items()
                if procs.alive(p) and (mine in procs.cmdline(p) or k == CONTROLLERS)}

    def _dead_components(self) -> list[str]:
        """Control-plane processes recorded by kwokctl that are no longer running."""
        return sorted(k for k, p in self._pids().items() if k != CONTROLLERS and not procs.alive(p))

    @property
    def operator(self) -> str:
        """The operator profile: as asked, else as recorded in the marker, else the default."""
        if self._operator is not None:
            return self._operator
        return str((self._marker() or {}).get("operator", profiles.DEFAULT_PROFILE))

    @property
    def orchestrators(self) -> tuple[str, ...]:
        if self._orchestrators is not None:
            return self._orchestrators
        return profiles.orchestrators(list((self._marker() or {}).get("with", [])))

    @property
    def conversion_webhook(self) -> bool:
        if self._conversion is not None:
            return self._conversion
        return bool((self._marker() or {}).get("conversion_webhook", False))

    def info(self) -> ClusterInfo:
        marker = self._marker() or {}
        return ClusterInfo(
            name=self.name, context=self.context, kubeconfig=str(marker.get("kubeconfig", self.kubeconfig)),
            cluster_dir=str(self.dir), audit_log=str(self.dir / "logs" / "audit.log"),
            pools=str(marker.get("pools", self.pools_spec)), created_at=str(marker.get("created_at", "")),
            operator=str(marker.get("operator", self.operator)),
            orchestrators=list(marker.get("with", self.orchestrators)))

    def kube(self) -> Kube:
        return Kube(self.context, self.info().kubeconfig, user_agent=f"deploy-suite-cluster/{self.name}")

    # ------------------------------------------------------------------ status
    def status(self) -> ClusterInfo:
        info = self.info()
        if not self.dir.exists():
            return info
        if self._marker() is None:
            info.state = "foreign"
            return info
        info.pids = self._own_live_pids()
        if "kube-apiserver" not in info.pids or "etcd" not in info.pids:
            info.state = "stale"
            return info
        return read_nodes(info, self.kube, self.log)

    # ------------------------------------------------------------------ up
    def up(self, wait_timeout: float | None = None) -> ClusterInfo:
        wait_timeout = UP_TIMEOUT_S if wait_timeout is None else wait_timeout
        layout = pools.load(self.pools_spec)  # bad pool input fails before anything starts
        marker = self._marker()
        if self.dir.exists() and marker is None:
            raise ClusterError(f"{self.dir} exists but was not created by deploy-suite; fix: pick another "
                               "--name (this tool never touches a cluster it did not create)")
        if marker is not None:
            current = self.status()
            if current.state == "up":
                if marker.get("pools_source") and Path(marker["pools_source"]) != Path(layout.source):
                    raise ClusterError(f"cluster {self.name} is already up with pools {marker['pools']}; fix: "
                                       f"`deploy-suite cluster down --name {self.name}` first, or use another --name")
                running = (str(marker.get("operator", profiles.DEFAULT_PROFILE)),
                           profiles.orchestrators(list(marker.get("with", []))))
                if (self._operator is not None and self._operator != running[0]) or \
                        (self._orchestrators is not None and self._orchestrators != running[1]):
                    raise ClusterError(f"cluster {self.name} is already up with operator {running[0]}"
                                       f"{''.join(' --with ' + o for o in running[1])}; fix: `deploy-suite cluster "
                                       f"down --name {self.name}` first, or use another --name")
                self.log(f"cluster {self.name} is already up")
                self._write_kubeconfig()
                self._apply_layout(layout, wait_timeout)
                self._ensure_controllers()
                self._wait_webhook(wait_timeout)
                return self._report(self.status())
            raise ClusterError(f"stale state directory {self.dir}: the cluster's processes are not running; "
                               f"fix: run `deploy-suite cluster down --name {self.name}`, then `up` again")
        if self.apiserver_port and not procs.port_free(self.apiserver_port):
            raise ClusterError(f"port {self.apiserver_port} on 127.0.0.1 is in use; fix: pass a free "
                               "--apiserver-port, or 0 to pick one automatically")
        bins = binaries.ensure_binaries(self.log)
        started = clock.monotonic()
        for attempt in (1, 2, 3):
            try:
                self._create(bins)
                self._write_kubeconfig()
                self._apply_layout(layout, wait_timeout)
                break
            except (ClusterError, KubeError) as exc:
                if attempt == 3 or not (self._dead_components() or "address already in use" in str(exc)
                                        or "HTTP response to HTTPS client" in str(exc)):
                    raise
                # kwokctl picks free ports just before starting each process; a cluster starting
                # at the same moment can take one first. Start over with fresh ports.
                self.log(f"start-up lost a port race ({str(exc)[:200]}); retrying with new ports")
                self.down()
        self._ensure_controllers()
        self._wait_webhook(wait_timeout)
        self._wait_dynamo_env()
        info = self.status()
        self.log(f"cluster {self.name} up in {clock.monotonic() - started:.1f}s "
                 f"({len(info.nodes)} nodes Ready)")
        return self._report(info)

    def _wait_dynamo_env(self) -> None:
        """Up means ready to serve: the operator replica builds the Dynamo environment its DGDs' frontends
        and workers run in once per machine (minutes on a cold one) as it starts; wait for that build
        here (its lock), so that the first DGD's readiness is not charged with it."""
        try:
            dynamo_env.ensure_dynamo_env(log=self.log)
        except Exception as exc:  # the replica reports it too and serves nothing: `up` still succeeds
            self.log(f"the Dynamo environment cannot be built ({type(exc).__name__}: {exc}); DGDs get no serving")

    def _report(self, info: ClusterInfo) -> ClusterInfo:
        self.log(f"kubeconfig: {info.kubeconfig}")
        self.log(f"context: {info.context}")
        return info

    def _kwokctl_env(self) -> dict[str, str]:
        return {**os.environ, "KWOK_WORKDIR": str(workdir()), procs.MARK: self.mark}  # its components inherit it

    def _create(self, bins: binaries.BinarySet) -> None:
        conf_dir = workdir() / "configs" / self.name
        conf_dir.mkdir(parents=True, exist_ok=True)
        (conf_dir / "kwokctl.yaml").write_text(KWOKCTL_CONFIG)
        (conf_dir / "audit-policy.yaml").write_text(AUDIT_POLICY)
        cmd = [
            str(bins.path("kwokctl")), "--name", self.name, "--config", str(conf_dir / "kwokctl.yaml"),
            "create", "cluster", "--runtime", "binary",
            "--kube-apiserver-binary", str(bins.path("kube-apiserver")),
            "--kube-controller-manager-binary", str(bins.path("kube-controller-manager")),
            "--kube-scheduler-binary", str(bins.path("kube-scheduler")),
            "--kwok-controller-binary", str(bins.path("kwok")),
            "--etcd-binary", str(bins.path("etcd")),
            # kwokctl would otherwise merge into ~/.kube/config; we write our own file.
            "--kubeconfig", str(conf_dir / "kwokctl-kubeconfig.yaml"),
            "--kube-audit-policy", str(conf_dir / "audit-policy.yaml"),
            # Stages, port-forwards and logs as API objects: faults can be switched at runtime and
            # the operator simulator wires pods to local processes. kwokctl then loads no default
            # stages: ours (manifests/stages.yaml) are applied before any node exists.
            f"--enable-crds={','.join(KWOK_CRDS)}",
            "--wait", "60s",
        ]
        if self.apiserver_port:
            cmd += ["--kube-apiserver-port", str(self.apiserver_port)]
        self.log(f"starting cluster {self.name}: etcd, kube-apiserver, kube-controller-manager, "
                 "kube-scheduler, kwok-controller")
        # The marker exists before the first process starts: an `up` interrupted (Ctrl-C, SIGTERM)
        # while kwokctl starts etcd and the apiserver leaves a directory `down` recognises as ours.
        self.dir.mkdir(parents=True, exist_ok=True)
        self.marker_path.write_text(json.dumps({"name": self.name, "kubeconfig": str(self.kubeconfig),
                                                "created_by": "deploy-suite", "starting": True}))
        done = procs.run(cmd, env=self._kwokctl_env(), tied=True)
        if done.returncode != 0:
            tail = done.output[-1500:].strip()
            if self.dir.exists():
                self.marker_path.write_text(json.dumps({"name": self.name, "failed": True}))
            raise ClusterError(f"kwokctl create cluster {self.name} failed (exit {done.returncode}): {tail}; fix: "
                               f"see {self.dir / 'logs'}, then `deploy-suite cluster down --name {self.name}`")
        # The admission webhook's own CA and serving certificate, and its port, fixed for the
        # cluster's life: the apiserver's webhook configuration names both.
        webhook.make_tls(self.webhook_dir)
        self.marker_path.write_text(json.dumps({
            "name": self.name, "context": self.context, "kubeconfig": str(self.kubeconfig),
            "pools": self.pools_spec, "pools_source": str(pools.resolve(self.pools_spec).resolve()),
            "operator": self.operator, "with": list(self.orchestrators), "webhook_port": procs.free_port(),
            "conversion_webhook": self.conversion_webhook, "provider": "kwok",
            "created_at": clock.iso_now(), "created_by": "deploy-suite"}, indent=2))

    @property
    def webhook_dir(self) -> Path:
        return self.dir / "webhook"

    @property
    def webhook_port(self) -> int:
        """The admission webhook's port on 127.0.0.1 (0: a cluster made before webhooks)."""
        return int((self._marker() or {}).get("webhook_port") or 0)

    def _install_webhooks(self, kube: Kube) -> None:
        port = self.webhook_port
        if not port:
            self.log(f"cluster {self.name} was created without an admission webhook; `cluster down` then `up` "
                     "to get one")
            return
        kube.apply(webhook.info_configmap(port, self.webhook_dir))
        if profiles.get(self.operator).webhook:
            kube.apply(webhook.dgd_webhook_configuration(profiles.get(self.operator), port, self.webhook_dir))

    def _wait_webhook(self, timeout: float) -> None:
        """Until the controllers' webhook accepts TLS connections (with failurePolicy Fail, a DGD
        written before that would be refused), while the controllers process lives."""
        if self.webhook_port:
            webhook.wait_answering(self.webhook_port, self.webhook_dir / "ca.crt",
                                   lambda: procs.alive(self._pids().get(CONTROLLERS) or 0), timeout,
                                   self.dir / "logs" / f"{CONTROLLERS}.log")

    def _write_kubeconfig(self) -> None:
        """Our own kubeconfig for this cluster, context ``offline-<name>``, written atomically."""
        cluster, user = self._kwok_access()
        doc = {
            "apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": self.context, "cluster": cluster}],
            "users": [{"name": self.context, "user": user}],
            "contexts": [{"name": self.context, "context": {"cluster": self.context, "user": self.context}}],
            "current-context": self.context,
        }
        self.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        procs.write_atomic(self.kubeconfig, yamlio.dump(doc), mode=0o600)

    def _apply_layout(self, layout: pools.Layout, timeout: float) -> None:
        kube = self.kube()
        self._install_manifests(kube, timeout)
        for sc in layout.storage_class_manifests():
            kube.apply(sc)
        for node in layout.nodes():
            # Create (not apply): a Node's status is accepted on create, which is how kwok nodes
            # get their capacity, allocatable and GPU count.
            with contextlib.suppress(Conflict):
                kube.create(node)
        wanted = set(layout.node_names())

        def all_ready(objs: dict[str, Obj]) -> tuple[bool, str]:
            ready = {o["metadata"]["name"] for o in objs.values() if node_ready(o)}
            missing = sorted(wanted - ready)
            return not missing, f"{len(wanted & ready)}/{len(wanted)} nodes Ready" + (
                f" (waiting for {', '.join(missing[:5])})" if missing else "")

        deadline = clock.monotonic() + timeout
        while True:
            # Watch in short slices so that a component dying meanwhile (it stops producing node
            # events at all) is noticed within seconds, not at the end of the whole timeout.
            try:
                kube.wait_for(Watch("Node", label_selector="type=kwok"), all_ready, awaited="all offline nodes Ready",
                              timeout=max(0.1, min(5.0, deadline - clock.monotonic())))
                return
            except WaitTimeout as exc:
                dead = self._dead_components()
                if dead or clock.monotonic() >= deadline:
                    why = f"{', '.join(dead)} exited" if dead else str(exc)
                    raise ClusterError(f"nodes never became Ready: {why}; fix: see "
                                       f"{self.dir / 'logs'}") from exc

    def _install_manifests(self, kube: Kube, timeout: float) -> None:
        """Our CRDs (DGD, DCD) and kwok's default stages, before any node or workload exists."""
        crds = profiles.shape_crds(profiles.get(self.operator), yamlio.load_all(MANIFESTS / "crds.yaml"))
        if self.conversion_webhook and self.webhook_port and profiles.get(self.operator).storage == "v1beta1":
            for crd in crds:
                if crd["metadata"]["name"] == "dynamographdeployments.nvidia.com":
                    crd["spec"]["conversion"] = webhook.conversion_stanza(self.webhook_port, self.webhook_dir)
        for orchestrator in self.orchestrators:  # the multinode APIs the operator detects
            crds += yamlio.load_all(MANIFESTS / f"{orchestrator}-crds.yaml")
        for crd in crds:
            kube.apply(crd)
        wait_established(kube, [c["metadata"]["name"] for c in crds], timeout)
        if "grove" in self.orchestrators:  # KAI's queue the operator uses by default
            kube.apply({"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "dynamo"},
                        "spec": {"resources": {"gpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}})
        self._install_webhooks(kube)
        if kube.get_or_none("CustomResourceDefinition", "stages.kwok.x-k8s.io") is None:
            # A cluster created before Stages became objects runs kwokctl's built-in stages.
            self.log(f"cluster {self.name}: kwok Stage CRD absent (created by an older version); "
                     "runtime fault switches need `cluster down` then `up`")
            return
        wait_established(kube, [f"{plural}.kwok.x-k8s.io" for plural in KWOK_CRD_PLURALS], timeout)
        kube.apply_file(MANIFESTS / "stages.yaml", None)

    def _ensure_controllers(self) -> None:
        pid = self._pids().get(CONTROLLERS)
        if pid and procs.alive(pid) and "deploy_suite_offline.controllers" in procs.cmdline(pid):
            return
        log = self.dir / "logs" / f"{CONTROLLERS}.log"
        proc = procs.spawn([sys.executable, "-m", "deploy_suite_offline.controllers", "--kubeconfig",
                            str(self.kubeconfig), "--context", self.context, "--cluster-dir", str(self.dir),
                            "--operator", self.operator, *[a for o in self.orchestrators for a in ("--with", o)],
                            *(["--webhook-port", str(self.webhook_port), "--webhook-dir", str(self.webhook_dir)]
                              if self.webhook_port else [])],
                           log, log, cwd=self.dir, mark=self.mark)
        # A daemon that outlives this process by design (like kwokctl's components); `down` stops it by pid.
        (self.dir / "pids" / f"{CONTROLLERS}.pid").write_text(str(procs.detach(proc)))

    # ------------------------------------------------------------------ restart (fault injection)
    def restart_component(self, name: str, timeout: float = 90.0, hard: bool = False,
                          grace: float = 5.0, hold: float = 0.0) -> restart.ComponentRestart:
        """Stop one of this cluster's processes and start it again exactly as it ran.

        ``name`` is a file stem under ``pids/``: ``etcd``, ``kube-apiserver``,
        ``kube-controller-manager``, ``kube-scheduler``, ``kwok-controller`` (or
        ``deploy-suite-controllers``). The command line, working directory, environment and log
        redirection are read from ``/proc/<pid>`` before the process is stopped (SIGTERM, then
        SIGKILL after ``grace`` seconds; ``hard=True`` sends SIGKILL at once, a crash) and kept down
        ``hold`` more seconds; the new pid is written to ``pids/<name>.pid``, and the call returns once
        the component's health endpoint and the apiserver's ``/readyz`` answer ``ok``. The outage is
        measured from the stop signal to that.

        The apiserver closes its listener at once on SIGTERM but may drain for its whole grace
        period; while the port is free, a cluster being created by someone else (kwokctl hands out
        the highest free ports) can take it, and the restart then fails naming the bind error.
        """
        before = self._own_live_pids()
        pid = before.get(name)
        if pid is None:
            raise ClusterError(f"cluster {self.name} has no running {name} process (known: "
                               f"{', '.join(sorted(self._pids())) or 'none'}); fix: `deploy-suite cluster up "
                               f"--name {self.name}`")
        done = restart.restart(self.dir, name, pid, self._apiserver_probe(), timeout=timeout,
                               stop=restart.Stop(hard, grace, hold))
        # A fault of one component must not silently take another with it (the cluster would look up
        # while every later test hung): name what died meanwhile.
        died = sorted(k for k, p in before.items() if k != name and not procs.alive(p))
        if died:
            raise ClusterError(f"cluster {self.name}: {', '.join(died)} exited while {name} restarted "
                               f"({done.outage_s:.1f}s out); see {self.dir / 'logs'}")
        return done

    def _kwok_access(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The cluster and user entries of the kubeconfig kwokctl wrote (server, CA, client cert)."""
        raw = yamlio.load_one(self.dir / "kubeconfig.yaml")
        return raw["clusters"][0]["cluster"], raw["users"][0]["user"]

    def _apiserver_probe(self) -> restart.Probe:
        """``GET /readyz`` on the apiserver with the cluster's own CA and client certificate."""
        cluster, user = self._kwok_access()
        ctx = ssl.create_default_context(cafile=cluster["certificate-authority"])
        ctx.load_cert_chain(user["client-certificate"], user["client-key"])
        return lambda: restart.probe(str(cluster["server"]).rstrip("/") + "/readyz", ctx)

    # ------------------------------------------------------------------ down
    def down(self) -> ClusterInfo:
        info = self.info()
        if not self.dir.exists():
            procs.end_cluster(self.name, self.mark, self.log)  # what an earlier `down` may have missed
            self.log(f"cluster {self.name} is not running (nothing to remove)")
            return info
        marker = self._marker()
        if marker is None:
            raise ClusterError(f"{self.dir} was not created by deploy-suite; fix: it is left untouched, "
                               "remove it yourself if it is yours")
        pids = self._own_live_pids()
        ctl = pids.pop(CONTROLLERS, None)
        if ctl is not None:
            procs.terminate([ctl])  # first, so it does not log errors while the apiserver goes away
        # The Dynamo frontends/mockers the operator simulator started run in their own sessions.
        stopped = dynamo_runtime.stop_all(self.dir / "dynamo") if (self.dir / "dynamo").is_dir() else []
        if stopped:
            self.log(f"stopped {len(stopped)} Dynamo serving process group(s)")
        bins = binaries.BinarySet(binaries.bin_dir())
        if bins.path("kwokctl").exists():
            conf = workdir() / "configs" / self.name / "kwokctl-kubeconfig.yaml"
            procs.run([str(bins.path("kwokctl")), "--name", self.name, "delete", "cluster", "--kubeconfig", str(conf)],
                      env=self._kwokctl_env(), tied=True)
        # Whatever kwokctl left (or when it is missing): our own processes, checked by command line.
        procs.terminate([p for p in pids.values() if procs.alive(p)])
        procs.end_cluster(self.name, self.mark, self.log)
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(workdir() / "configs" / self.name, ignore_errors=True)
        kubeconfig = Path(str(marker.get("kubeconfig", "")))
        if kubeconfig.is_file():
            kubeconfig.unlink()
        self.log(f"cluster {self.name} is down")
        return self.status()


def read_nodes(info: ClusterInfo, kube: Callable[[], Kube], log: Log) -> ClusterInfo:
    """``info`` with the apiserver's address and Ready nodes (state ``up``), or ``stale`` when it
    does not answer (every provider's ``status``)."""
    try:
        client = kube()
        nodes, _ = client.list_items("Node")
        info.server = client.server
        info.nodes = [n["metadata"]["name"] for n in nodes if node_ready(n)]
        info.state = "up"
    except (KubeError, ClusterError) as exc:
        info.state = "stale"
        log(f"apiserver not answering: {exc}")
    return info


def wait_established(kube: Kube, names: list[str], timeout: float) -> None:
    """Wait until each CRD is Established (watch) and discovery serves its kind in every served version:
    discovery follows Established asynchronously; an object created between is refused (kind not served)."""
    wanted = set(names)
    deadline = clock.monotonic() + timeout

    def established(objs: dict[str, Obj]) -> tuple[bool, str]:
        done = {o["metadata"]["name"] for o in objs.values()
                if any(c.get("type") == "Established" and c.get("status") == "True"
                       for c in (o.get("status") or {}).get("conditions") or [])}
        missing = sorted(wanted - done)
        return not missing, f"waiting for {', '.join(missing)}" if missing else "all Established"

    try:
        seen = kube.wait_for(Watch("CustomResourceDefinition"), established, awaited="CRDs Established",
                             timeout=timeout)
    except WaitTimeout as exc:
        raise ClusterError(f"{exc}; fix: see the kube-apiserver log") from exc
    pending = {(f"{crd['spec']['group']}/{v['name']}", crd["spec"]["names"]["plural"])
               for crd in seen.objects.values() if crd["metadata"]["name"] in wanted
               for v in crd["spec"].get("versions") or [] if v.get("served")}

    def discovered() -> bool | None:
        pending.difference_update({(gv, plural) for gv, plural in list(pending)
                                   if any(r.get("name") == plural for r in kube.group_resources(gv, fresh=True))})
        return True if not pending else None

    if procs.poll(discovered, max(0.1, deadline - clock.monotonic()), interval=0.05, cap=1.0) is None:
        raise ClusterError(f"CRDs Established but not in discovery: {', '.join(sorted(gv for gv, _ in pending))}; "
                           "fix: see the kube-apiserver log")


# The node lifecycle controller taints a new node until it has seen it Ready; pods created before
# that fail scheduling on "untolerated taint node.kubernetes.io/not-ready", so `up` waits it out.
_LIFECYCLE_TAINTS = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}


def node_ready(node: Obj) -> bool:
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in (node.get("status") or {}).get("conditions") or [])
    tainted = any(t.get("key") in _LIFECYCLE_TAINTS for t in (node.get("spec") or {}).get("taints") or [])
    return ready and not tainted
