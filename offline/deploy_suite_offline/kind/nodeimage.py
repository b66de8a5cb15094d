"""The kind node image, built offline from Debian's packages and the binaries built here.

No registry is reachable, so every image a kind cluster runs is made on this machine:

1. a Debian root file system (``debootstrap --variant=minbase``) with systemd, containerd, runc,
   the CNI plugins, iptables and the other tools a node needs, plus our files (``files/``): the
   entrypoint, the kubelet's units, containerd's configuration;
2. the component images kubeadm asks for (``kubeadm config images list``): the API server,
   controller manager, scheduler, etcd, pause and CoreDNS as one static binary each on an empty
   root, kube-proxy on the Debian root (it needs iptables); each under the name kubeadm expects, so
   nothing is pulled (docs/offline-cluster.md, "The kind provider");
3. the node image: the root file system with kubelet, kubeadm, kubectl in ``/usr/bin``,
   ``/kind/version`` and the component images imported into its containerd, committed with the
   entrypoint, the way kind's own node images are laid out.

Each step is cached under its inputs' hash: the root file system as a tar under
``~/.cache/deploy-suite/kind/``, the images in Docker under tags carrying the hash, so only a
changed input is rebuilt. Progress is printed while building.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from deploy_suite import clock
from deploy_suite_offline import binaries, procs
from deploy_suite_offline.errors import ClusterError
from deploy_suite_offline.kind import docker
from deploy_suite_offline.kind.tools import COREDNS_VERSION, FILES, Tools
from deploy_suite_offline.procs import Log

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = (
    "systemd", "systemd-sysv", "dbus", "containerd", "runc", "containernetworking-plugins", "iptables",
    "iproute2", "ethtool", "socat", "conntrack", "util-linux", "mount", "kmod", "ca-certificates", "procps",
    "libseccomp2", "nftables", "iputils-ping", "less",
)
# kubeadm v1.36.1 names etcd 3.6.8; ours is binaries.ETCD_VERSION, so the image carries its own
# version and the cluster's kubeadm configuration names that tag (provider.py).
ETCD_TAG = binaries.ETCD_VERSION.lstrip("v") + "-0"
# Unit files systemd would start in a container to no use, or that fail there.
MASKED_UNITS = ("systemd-binfmt.service", "getty.target", "systemd-udevd.service", "systemd-modules-load.service")
NODE_REPO = "deploy-suite/kind-node"
# The Debian root under a name of our own in every node's containerd (no pull needed): the kind
# tests' workloads (a crash loop, an OOM kill, a small HTTP server for port-forward) run from it.
TESTBOX = "deploy-suite.local/debian:bookworm"
NODE_FILES = (  # files/<name> -> where the node image holds it
    ("entrypoint", "/usr/local/bin/entrypoint"), ("kubelet.service", "/etc/systemd/system/kubelet.service"),
    ("10-kubeadm.conf", "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf"),
    ("kubelet.slice", "/etc/systemd/system/kubelet.slice"), ("kubelet.default", "/etc/default/kubelet"),
    ("crictl.yaml", "/etc/crictl.yaml"), ("sysctl.conf", "/etc/sysctl.d/10-deploy-suite.conf"),
    ("default-storage.yaml", "/kind/manifests/default-storage.yaml"),
)
# Programs their images run from the root: the runtime starts the sandbox as /pause, and kubeadm's
# CoreDNS Deployment gives only arguments (`-conf /etc/coredns/Corefile`) to the entrypoint /coredns.
AT_ROOT = ("pause", "coredns")


def cache_dir() -> Path:
    return binaries.cache_root() / "kind"


def digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:12]


def _file_digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def rootfs_key() -> str:
    return digest(SUITE, MIRROR, *PACKAGES)


def ensure_rootfs(log: Log) -> Path:
    """The Debian root file system as a tar (numeric owners), built once per package list."""
    tar = cache_dir() / f"rootfs-{SUITE}-{rootfs_key()}.tar"
    if tar.is_file():
        return tar
    if shutil.which("debootstrap") is None:
        raise ClusterError("debootstrap is not installed; fix: apt-get install -y debootstrap "
                           "(the node image's root file system is built from Debian's packages)")
    with procs.file_lock(tar.with_suffix(".lock"), waiting=lambda: log("waiting for another rootfs build")):
        if tar.is_file():
            return tar
        work = Path(tempfile.mkdtemp(prefix=".rootfs-", dir=cache_dir()))
        try:
            started = clock.monotonic()
            log(f"building the node's Debian {SUITE} root file system (debootstrap, {len(PACKAGES)} packages) ...")
            done = procs.run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE,
                              str(work / "root"), MIRROR], output=work / "debootstrap.log", tied=True, every=30.0,
                             heartbeat=lambda: log(f"  debootstrap still running [{clock.monotonic() - started:.0f}s]"))
            if done.returncode != 0:
                tail = (work / "debootstrap.log").read_text(errors="replace")[-1200:]
                raise ClusterError(f"debootstrap {SUITE} failed (exit {done.returncode}): {tail.strip()}; fix: check "
                                   f"access to {MIRROR}")
            root = work / "root"
            shutil.rmtree(root / "var" / "cache" / "apt" / "archives", ignore_errors=True)
            shutil.rmtree(root / "var" / "lib" / "apt" / "lists", ignore_errors=True)
            partial = tar.with_suffix(".partial")
            subprocess.run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."], check=True)
            partial.rename(tar)
            log(f"root file system built in {clock.monotonic() - started:.0f}s ({tar.stat().st_size >> 20} MiB)")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return tar


@dataclass(frozen=True)
class ComponentImage:
    ref: str        # the name kubeadm or kind expects, e.g. registry.k8s.io/kube-apiserver:v1.36.1
    binary: str     # the file in the binary caches that is the image's program
    debian: bool    # on the Debian root (needs its tools) rather than an empty one


def component_images(kubeadm_list: list[str]) -> list[ComponentImage]:
    """What to build for each image kubeadm names."""
    found: list[ComponentImage] = []
    for ref in kubeadm_list:
        repo = ref.rsplit(":", 1)[0].rsplit("/", 1)[-1]
        if repo == "coredns":
            tag = ref.rsplit(":", 1)[-1]
            if tag != COREDNS_VERSION:  # never a tag the binary inside does not match
                raise ClusterError(f"kubeadm asks for {ref}, this build makes CoreDNS {COREDNS_VERSION}; fix: set "
                                   "tools.COREDNS_VERSION and the version in deploy_suite_offline/kind/coredns/go.mod")
            found.append(ComponentImage(ref, "coredns", False))
        elif repo == "etcd":
            found.append(ComponentImage(f"{ref.rsplit(':', 1)[0]}:{ETCD_TAG}", "etcd", False))
        elif repo == "pause":
            found.append(ComponentImage(ref, "pause", False))
        elif repo == "kube-proxy":
            found.append(ComponentImage(ref, "kube-proxy", True))
        elif repo in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
            found.append(ComponentImage(ref, repo, False))
        else:
            raise ClusterError(f"kubeadm asks for image {ref}, which this build does not know; fix: add it to "
                               "offline/deploy_suite_offline/kind/nodeimage.py")
    return found


def kubeadm_images(tools: Tools) -> list[str]:
    done = procs.run([str(tools.node("kubeadm")), "config", "images", "list", "--kubernetes-version",
                      binaries.KUBERNETES_VERSION], split=True)
    if done.returncode != 0:
        raise ClusterError(f"kubeadm config images list failed: {done.output.strip()}; fix: rebuild the node binaries")
    return [line.strip() for line in done.output.splitlines() if line.strip()]


@dataclass(frozen=True)
class NodeImage:
    ref: str
    built_seconds: float  # 0 when it came from the cache
    images: tuple[str, ...]


def node_image_key(tools: Tools, rootfs: Path, images: list[ComponentImage]) -> str:
    # This module's own text too: a change to how the image is put together rebuilds it.
    parts: list[str] = [rootfs.name, binaries.KUBERNETES_VERSION, _file_digest(Path(__file__))]
    parts += [f"{p.name}={_file_digest(p)}" for p in sorted(FILES.iterdir()) if p.is_file()]
    parts += [f"{n}={_file_digest(tools.node(n))}" for n in ("kubeadm", "kubectl", "kubelet", "kube-proxy", "pause")]
    parts.append(f"crictl={_file_digest(tools.crictl)}")
    control = binaries.BinarySet(binaries.bin_dir())
    parts += [f"{c.ref}={_file_digest(_binary_path(tools, control, c.binary))}" for c in images]
    return digest(*parts)


def _binary_path(tools: Tools, control: binaries.BinarySet, name: str) -> Path:
    if name == "coredns":
        return tools.coredns
    node = tools.node(name)
    return node if node.exists() else control.path(name)


def ensure_node_image(tools: Tools, log: Log = print) -> NodeImage:
    """The node image's reference, built now if no image of the same inputs exists."""
    control = binaries.ensure_binaries(log)
    rootfs = ensure_rootfs(log)
    images = component_images(kubeadm_images(tools))
    key = node_image_key(tools, rootfs, images)
    ref = f"{NODE_REPO}:{binaries.KUBERNETES_VERSION}-{key}"
    refs = tuple(c.ref for c in images)
    if docker.image_exists(ref):
        return NodeImage(ref, 0.0, refs)
    with procs.file_lock(cache_dir() / ".node-image.lock", waiting=lambda: log("waiting for another node image build")):
        if docker.image_exists(ref):
            return NodeImage(ref, 0.0, refs)
        started = clock.monotonic()
        base = _base_image(rootfs, log)
        work = Path(tempfile.mkdtemp(prefix=".node-", dir=cache_dir()))
        try:
            archive = _component_archive(tools, control, base, images, work, log)
            _assemble(tools, base, ref, archive, images, log)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        seconds = clock.monotonic() - started
        log(f"node image {ref} built in {seconds:.0f}s ({docker.image_size(ref) >> 20} MiB)")
        return NodeImage(ref, seconds, refs)


def base_image(log: Log = print) -> str:
    """The Debian root as a Docker image (the Dynamo image builds on it too)."""
    return _base_image(ensure_rootfs(log), log)


def _base_image(rootfs: Path, log: Log) -> str:
    """The Debian root with our node files, as a Docker image (kept: kube-proxy's image uses it)."""
    ref = f"deploy-suite/kind-base:{digest(rootfs.name)}"
    if docker.image_exists(ref):
        return ref
    log(f"importing the root file system as {ref} ...")
    docker.import_tar(rootfs, ref, ["ENV container=docker",
                                    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"])
    return ref


def _program_image(src: Path, ref: str, work: Path) -> None:
    """An image of one static program at /usr/local/bin (the name kubeadm's manifests call), or
    at the root for ``AT_ROOT``'s, which is also the image's entrypoint."""
    root = work / f"root-{src.name}"
    (root / "usr" / "local" / "bin").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "tmp").mkdir()
    program = f"/{src.name}" if src.name in AT_ROOT else f"/usr/local/bin/{src.name}"
    shutil.copy2(src, root / program.lstrip("/"))
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534::/:/sbin/nologin\n")
    (root / "etc" / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
    entry = [program]
    tar = work / f"{src.name}.tar"
    subprocess.run(["tar", "--numeric-owner", "--owner=0", "--group=0", "-C", str(root), "-cf", str(tar), "."],
                   check=True)
    docker.import_tar(tar, ref, ["ENV PATH=/usr/local/bin:/usr/bin:/bin", f"ENTRYPOINT {json.dumps(entry)}"])


def _local_ref(ref: str) -> str:
    """The Docker-side name of a component image: under our own prefix, never a registry's name."""
    return "deploy-suite.local/" + ref


def _component_archive(tools: Tools, control: binaries.BinarySet, base: str, images: list[ComponentImage],
                       work: Path, log: Log) -> Path:
    for c in images:
        src = _binary_path(tools, control, c.binary)
        log(f"image {c.ref} <- {src.name}")
        if c.debian:
            name = f"deploy-suite-build-{c.binary}"
            container = docker.start_build_container(base, name)
            try:
                docker.copy_in(container, src, f"/usr/local/bin/{c.binary}")
                docker.commit(container, _local_ref(c.ref), ["ENTRYPOINT []", "CMD []"])
            finally:
                docker.remove_container(name)
        else:
            _program_image(src, _local_ref(c.ref), work)
    archive = work / "images.tar"
    docker.save([_local_ref(c.ref) for c in images], archive)
    return archive


def _assemble(tools: Tools, base: str, ref: str, archive: Path, images: list[ComponentImage], log: Log) -> None:
    name = "deploy-suite-build-node"
    container = docker.start_build_container(base, name)
    try:
        for binary in ("kubeadm", "kubectl", "kubelet"):
            docker.copy_in(container, tools.node(binary), f"/usr/bin/{binary}")
        docker.copy_in(container, tools.crictl, "/usr/bin/crictl")
        pause = next((c.ref for c in images if c.binary == "pause"), "registry.k8s.io/pause:3.10.1")
        script = _setup_script(pause)
        docker.exec_in(container, "bash", "-euc", script)
        for f, dest in NODE_FILES:
            docker.copy_in(container, FILES / f, dest)
        config = (FILES / "containerd-config.toml").read_text().replace("@PAUSE_IMAGE@", pause)
        docker.exec_in(container, "sh", "-c", "cat > /etc/containerd/config.toml", input_bytes=config.encode())
        docker.exec_in(container, "bash", "-euc", "chmod 755 /usr/local/bin/entrypoint /usr/bin/kube*; "
                       "systemctl enable kubelet.service containerd.service >/dev/null 2>&1; "
                       f"systemctl mask {' '.join(MASKED_UNITS)} >/dev/null 2>&1")
        log(f"importing {len(images)} component images into the node's containerd ...")
        _import_images(container, archive, images)
        docker.commit(container, ref, ['ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]', "CMD []",
                                       "ENV container=docker"])
    finally:
        docker.remove_container(name)


def _setup_script(pause: str) -> str:
    return "; ".join([
        "mkdir -p /kind/manifests /etc/systemd/system/kubelet.service.d /etc/containerd/certs.d /etc/cni/net.d "
        "/opt/cni /var/lib/kubelet /etc/kubernetes/manifests",
        # kind and kubeadm look for the CNI plugins in /opt/cni/bin; Debian puts them in /usr/lib/cni.
        "ln -sfn /usr/lib/cni /opt/cni/bin",
        f"printf '%s' {binaries.KUBERNETES_VERSION} > /kind/version",
        f"echo 'pause image: {pause}' > /kind/README.deploy-suite",
        "rm -f /etc/machine-id && touch /etc/machine-id",
    ])


def _import_images(container: str, archive: Path, images: list[ComponentImage]) -> None:
    docker.copy_in(container, archive, "/images.tar")
    # containerd serves the import, then is stopped before the commit.
    script = "\n".join([
        "set -eu",
        "containerd >/var/log/containerd-build.log 2>&1 & pid=$!",
        "for i in $(seq 1 100); do ctr version >/dev/null 2>&1 && break; sleep 0.2; done",
        "ctr -n k8s.io images import --no-unpack /images.tar >/dev/null",
        *[f"ctr -n k8s.io images tag --force {_local_ref(c.ref)} {c.ref} >/dev/null && "
          f"ctr -n k8s.io images rm {_local_ref(c.ref)} >/dev/null" for c in images],
        *[f"ctr -n k8s.io images tag --force {c.ref} {TESTBOX} >/dev/null" for c in images if c.debian][:1],
        "ctr -n k8s.io images ls -q",
        "kill $pid; wait $pid || true",
        "rm -f /images.tar /var/log/containerd-build.log",
    ])
    listed = docker.exec_in(container, "bash", "-c", script)
    missing = [c.ref for c in images if c.ref not in listed and f"docker.io/{c.ref}" not in listed]
    if missing:
        raise ClusterError(f"images missing from the node's containerd after import: {', '.join(missing)}; "
                           f"containerd listed: {listed.strip()[:600]}; fix: see `docker logs` of the build")
