"""The offline cluster's five binaries (plus kwokctl), built from the Go module proxy and cached.

The Go wrapper module in ``gomod/`` pins the versions below; kubernetes' own go.mod requires its
staging modules at ``v0.0.0`` (not on the proxy), so the wrapper replaces each of them with the
matching published ``v0.36.x``. Binaries go to a versioned cache outside the repository
(``${XDG_CACHE_HOME:-~/.cache}/deploy-suite/bin/<versions>/``) and are reused when complete.
Official release binaries are tried first where the network allows; offline that attempt fails
within seconds (short connect timeout) and we fall back to building.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from deploy_suite import clock
from deploy_suite_offline import procs
from deploy_suite_offline.errors import ClusterError
from deploy_suite_offline.procs import Log

# Versions verified to build together from the proxy with Go 1.26 (docs/offline-cluster.md, "Running the
# offline cluster").
KUBERNETES_VERSION = "v1.36.1"
ETCD_VERSION = "v3.6.10"
KWOK_VERSION = "v0.8.0"
GOMOD_DIR = Path(__file__).with_name("gomod")



@dataclass(frozen=True)
class Binary:
    name: str
    package: str
    release_url: str
    version_flag: str = "--version"


def _k8s_url(name: str) -> str:
    return f"https://dl.k8s.io/release/{KUBERNETES_VERSION}/bin/linux/amd64/{name}"


BINARIES: tuple[Binary, ...] = (
    Binary("kwokctl", "sigs.k8s.io/kwok/cmd/kwokctl",
           f"https://github.com/kubernetes-sigs/kwok/releases/download/{KWOK_VERSION}/kwokctl-linux-amd64"),
    Binary("kwok", "sigs.k8s.io/kwok/cmd/kwok",
           f"https://github.com/kubernetes-sigs/kwok/releases/download/{KWOK_VERSION}/kwok-linux-amd64"),
    Binary("etcd", "go.etcd.io/etcd/server/v3", ""),  # released only inside a tarball: build it
    Binary("kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler", _k8s_url("kube-scheduler")),
    Binary("kube-controller-manager", "k8s.io/kubernetes/cmd/kube-controller-manager",
           _k8s_url("kube-controller-manager")),
    Binary("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver", _k8s_url("kube-apiserver")),
)


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "deploy-suite"


def bin_dir() -> Path:
    return cache_root() / "bin" / f"k8s-{KUBERNETES_VERSION}_etcd-{ETCD_VERSION}_kwok-{KWOK_VERSION}"


def _ldflags() -> str:
    # Stamp versions like upstream's hack/lib/version.sh, so `--version` is truthful and kwokctl
    # picks the right flags for this Kubernetes minor.
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.gitVersion={KUBERNETES_VERSION}", f"-X {pkg}.gitMajor={major}",
                  f"-X {pkg}.gitMinor={minor}", f"-X {pkg}.gitTreeState=clean",
                  f"-X {pkg}.buildDate=1970-01-01T00:00:00Z"]
    return " ".join(flags)


@dataclass(frozen=True)
class BinarySet:
    directory: Path

    def path(self, name: str) -> Path:
        return self.directory / name

    @property
    def complete(self) -> bool:
        return (self.directory / "versions.json").is_file() and all(
            os.access(self.path(b.name), os.X_OK) for b in BINARIES)


def ensure_binaries(log: Log = print, allow_download: bool = True) -> BinarySet:
    """Return the cached binaries, downloading or building what is missing."""
    target = BinarySet(bin_dir())
    if target.complete:
        return target
    # Two `cluster up` at once must not build twice: the second waits, then finds the binaries.
    with procs.file_lock(target.directory.parent / f".{target.directory.name}.lock"):
        if target.complete:  # another process finished while we waited
            return target
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.directory.parent))
        try:
            missing = [b for b in BINARIES if not os.access(target.path(b.name), os.X_OK)]
            for b in BINARIES:
                if b not in missing:
                    shutil.copy2(target.path(b.name), staging / b.name)
            # DEPLOY_SUITE_NO_DOWNLOAD=1 forces the build path (tests, air-gapped mirrors).
            allow_download = allow_download and os.environ.get("DEPLOY_SUITE_NO_DOWNLOAD") != "1"
            to_build = [b for b in missing if not (allow_download and _download(b, staging / b.name, log))]
            if to_build:
                _build(to_build, staging, log)
            (staging / "versions.json").write_text(json.dumps({
                "kubernetes": KUBERNETES_VERSION, "etcd": ETCD_VERSION, "kwok": KWOK_VERSION}, indent=2))
            if target.directory.exists():
                shutil.rmtree(target.directory)
            staging.rename(target.directory)  # appears complete or not at all
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    log(f"binaries ready in {target.directory}")
    return target


def _download(b: Binary, dest: Path, log: Log) -> bool:
    if not b.release_url:
        return False
    try:
        # A short connect timeout: on a machine without that network this fails within seconds.
        with urllib.request.urlopen(b.release_url, timeout=3) as resp, dest.open("wb") as out:
            shutil.copyfileobj(resp, out)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        log(f"{b.name}: release download unavailable ({type(exc).__name__}); building from the Go module proxy")
        dest.unlink(missing_ok=True)
        return False
    dest.chmod(0o755)
    log(f"{b.name}: downloaded {b.release_url}")
    return True


def go_binary() -> str:
    go = shutil.which("go")
    if go is None:
        raise ClusterError(
            "Go toolchain not found on PATH: the offline cluster's binaries are built from the Go module "
            "proxy; fix: install Go >= 1.26 and put `go` on PATH (or pre-populate "
            f"{bin_dir()})")
    return go


def build(binaries: list[Binary], out: Path, log: Log = print) -> None:
    """Build ``binaries`` from the wrapper module into ``out`` (the kind provider's node binaries too)."""
    _build(binaries, out, log)


def _build(binaries: list[Binary], out: Path, log: Log) -> None:
    go = go_binary()
    work = Path(tempfile.mkdtemp(prefix="gomod-", dir=out.parent))
    try:
        for name in ("go.mod", "go.sum"):
            shutil.copy2(GOMOD_DIR / name, work / name)
        env = {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly"}
        started = clock.monotonic()
        for b in binaries:
            _build_one(go, b, work, out, env, started, log)
        log(f"built {len(binaries)} binaries in {clock.monotonic() - started:.0f}s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _build_one(go: str, b: Binary, work: Path, out: Path, env: dict[str, str], started: float,
               log: Log) -> None:
    def elapsed() -> str:
        return f"[{clock.monotonic() - started:.0f}s elapsed]"

    log(f"building {b.name} ({b.package}) ... {elapsed()}")
    cmd = [go, "build", "-trimpath", "-ldflags", _ldflags(), "-o", str(out / b.name), b.package]
    # A long build prints progress, so a person knows it is alive (apiserver: many minutes).
    done = procs.run(cmd, cwd=work, env=env, tied=True, every=30.0,
                     heartbeat=lambda: log(f"  still building {b.name} ... {elapsed()}"))
    if done.returncode != 0:
        raise ClusterError(f"go build of {b.name} failed (exit {done.returncode}): {done.output[-1500:].strip()}; "
                           "fix: check network access to the Go module proxy (GOPROXY) and the Go version (>= 1.26)")
    log(f"built {b.name} {elapsed()}")
