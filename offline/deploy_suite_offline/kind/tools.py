"""kind and the node's Kubernetes binaries, built from the Go module proxy and cached.

kind and crictl are pinned (``KIND_VERSION``, ``CRICTL_VERSION``) and installed with ``go install``;
the node's kubelet, kubeadm, kubectl and kube-proxy come from the same Go wrapper module as the control plane
(``offline/deploy_suite_offline/gomod``, see ``binaries.py``), the pod sandbox's ``pause`` from
``files/pause.go``, and CoreDNS (``COREDNS_VERSION``, the version kubeadm names) from our own small
module ``coredns/``: CoreDNS as a library with only the plugins kubeadm's Corefile uses. Each set
lives in a directory named by its versions (CoreDNS's also by the hash of its module's files) under
``~/.cache/deploy-suite/bin/`` and appears complete or not at all (built in a staging directory,
then renamed), so a second ``cluster up`` reuses it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from deploy_suite import clock
from deploy_suite_offline import binaries, procs
from deploy_suite_offline.errors import ClusterError
from deploy_suite_offline.procs import Log

KIND_VERSION = "v0.33.0"
CRICTL_VERSION = "v1.37.0"  # cri-tools: `crictl` inside the nodes, as on kind's own images
# kubeadm v1.36.1's CoreDNS (`kubeadm config images list`); coredns/go.mod requires the same.
COREDNS_VERSION = "v1.14.2"
FILES = Path(__file__).with_name("files")
COREDNS_MODULE = Path(__file__).with_name("coredns")
COREDNS_FILES = ("go.mod", "go.sum", "main.go")
NODE_BINARIES: tuple[binaries.Binary, ...] = tuple(
    binaries.Binary(name, f"k8s.io/kubernetes/cmd/{name}", "")
    for name in ("kubeadm", "kubectl", "kubelet", "kube-proxy"))



@dataclass(frozen=True)
class Tools:
    kind: Path
    node_bin: Path  # kubeadm, kubectl, kubelet, kube-proxy, pause
    crictl: Path
    coredns: Path

    def node(self, name: str) -> Path:
        return self.node_bin / name


def kind_dir() -> Path:
    return binaries.cache_root() / "bin" / f"kind-{KIND_VERSION}"


def crictl_dir() -> Path:
    return binaries.cache_root() / "bin" / f"crictl-{CRICTL_VERSION}"


def node_bin_dir() -> Path:
    return binaries.cache_root() / "bin" / f"node-k8s-{binaries.KUBERNETES_VERSION}"


def coredns_dir() -> Path:
    h = hashlib.sha256()
    for name in COREDNS_FILES:  # our main and its pinned module graph: a change rebuilds
        h.update((COREDNS_MODULE / name).read_bytes())
    return binaries.cache_root() / "bin" / f"coredns-{COREDNS_VERSION}-{h.hexdigest()[:12]}"


def _complete(directory: Path, names: list[str]) -> bool:
    return all(os.access(directory / n, os.X_OK) for n in names)


def _staged(directory: Path, names: list[str], fill: Callable[[Path], None], log: Log) -> Path:
    """``directory`` holding ``names``, built by ``fill(staging)`` when missing, under a lock."""
    if _complete(directory, names):
        return directory
    with procs.file_lock(directory.parent / f".{directory.name}.lock",
                         waiting=lambda: log(f"waiting for another build of {directory.name}")):
        if _complete(directory, names):
            return directory
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=directory.parent))
        try:
            fill(staging)
            if directory.exists():
                shutil.rmtree(directory)
            staging.rename(directory)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return directory


def _go_env() -> dict[str, str]:
    return {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local"}


def _go_install(staging: Path, target: str, log: Log) -> None:
    started = clock.monotonic()
    log(f"building {target} (go install) ...")
    done = procs.run([binaries.go_binary(), "install", target],
                     env={**_go_env(), "GOBIN": str(staging), "GOFLAGS": ""}, tied=True, every=30.0,
                     heartbeat=lambda: log(f"  still building {target} ... [{clock.monotonic() - started:.0f}s]"))
    if done.returncode != 0:
        raise ClusterError(f"go install {target} failed (exit {done.returncode}): {done.output[-1200:].strip()}; "
                           "fix: check access to the Go module proxy (GOPROXY)")
    log(f"built {target} in {clock.monotonic() - started:.0f}s")


def _build_pause(staging: Path, log: Log) -> None:
    work = Path(tempfile.mkdtemp(prefix="pause-", dir=staging.parent))
    try:
        shutil.copy2(FILES / "pause.go", work / "main.go")
        done = procs.run([binaries.go_binary(), "build", "-trimpath", "-ldflags", "-s -w", "-o",
                          str(staging / "pause"), "main.go"],
                         cwd=work, env={**_go_env(), "GO111MODULE": "off", "GOFLAGS": ""}, tied=True)
        if done.returncode != 0:
            raise ClusterError(f"go build of pause failed: {done.output[-800:].strip()}; fix: check the Go toolchain")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log("built pause")


def _build_coredns(staging: Path, log: Log) -> None:
    """CoreDNS from ``coredns/`` (readonly: the module graph is pinned), static and stripped."""
    work = Path(tempfile.mkdtemp(prefix="coredns-", dir=staging.parent))
    started = clock.monotonic()
    try:
        for name in COREDNS_FILES:
            shutil.copy2(COREDNS_MODULE / name, work / name)
        log(f"building CoreDNS {COREDNS_VERSION} (kubeadm's Corefile plugins only) ...")
        ldflags = f"-s -w -X github.com/coredns/coredns/coremain.GitCommit=deploy-suite-{COREDNS_VERSION}"
        done = procs.run([binaries.go_binary(), "build", "-trimpath", "-ldflags", ldflags, "-o",
                          str(staging / "coredns"), "."],
                         cwd=work, env={**_go_env(), "GOFLAGS": "-mod=readonly"}, tied=True, every=30.0,
                         heartbeat=lambda: log(f"  still building CoreDNS ... [{clock.monotonic() - started:.0f}s]"))
        if done.returncode != 0:
            raise ClusterError(f"go build of CoreDNS failed (exit {done.returncode}): {done.output[-1200:].strip()}; "
                               "fix: check access to the Go module proxy (GOPROXY)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log(f"built CoreDNS in {clock.monotonic() - started:.0f}s")


def ensure_tools(log: Log = print) -> Tools:
    """kind, the node binaries and CoreDNS, from the cache or built now (minutes on a cold machine)."""
    kind = _staged(kind_dir(), ["kind"], lambda d: _go_install(d, f"sigs.k8s.io/kind@{KIND_VERSION}", log), log)
    crictl = _staged(crictl_dir(), ["crictl"],
                     lambda d: _go_install(d, f"sigs.k8s.io/cri-tools/cmd/crictl@{CRICTL_VERSION}", log), log)

    def fill_node(staging: Path) -> None:
        node_dir = node_bin_dir()
        for b in NODE_BINARIES:  # keep what a previous, interrupted build finished
            if os.access(node_dir / b.name, os.X_OK):
                shutil.copy2(node_dir / b.name, staging / b.name)
        missing = [b for b in NODE_BINARIES if not (staging / b.name).exists()]
        if missing:
            binaries.build(missing, staging, log)
        _build_pause(staging, log)

    node = _staged(node_bin_dir(), [b.name for b in NODE_BINARIES] + ["pause"], fill_node, log)
    coredns = _staged(coredns_dir(), ["coredns"], lambda d: _build_coredns(d, log), log)
    return Tools(kind=kind / "kind", node_bin=node, crictl=crictl / "crictl", coredns=coredns / "coredns")
