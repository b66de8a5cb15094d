"""The registry the kind nodes pull from instead of the real ones (no registry is reachable here).

A read-only OCI distribution endpoint on the gateway of the cluster's own Docker network. It serves
two images built here. The Dynamo image (``dynamo_image.py``) under every name a DGD gives NVIDIA's
Dynamo images: ``nvcr.io/nvidia/ai-dynamo/<vllm|sglang|tensorrtllm>-runtime``, ``dynamo-frontend``
and ``dynamo-planner`` with a released version's tag (``RELEASED``; ``X.Y.Z`` or a ``.postN``/
``-postN`` of it). The Python image (``python_image.py``) under the official image's names a
support Job uses, ``docker.io/library/python`` (``python``) with a tag of ``PYTHON_TAGS``. Every
other name is answered the way a registry answers a tag that does not
exist (404 ``MANIFEST_UNKNOWN``), so the kubelet reports ``ErrImagePull`` with containerd's
``not found``, as on a real cluster. Without it containerd would try the real registry's host and
fail on the network (``dial tcp: lookup ...``), which the harness rightly retries instead of judging.

The EPP image a gaie DGD names (``nvcr.io/nvidia/ai-dynamo/dynamo-epp``) is the same layers with
another entry point, the EPP stand-in of the Dynamo image (``dynamo_files/dynamo_offline_epp.py``),
as its own manifest and config (``EPP_ENTRYPOINT``), so the operator's EPP arguments start it.

The image is served from a ``docker save`` of it, extracted once per image id under the cache
(``export``): an OCI manifest whose layers are the saved, uncompressed layer tars, so the nodes
pull it as they pull any image, on demand. Each node's containerd is pointed at this registry for
the registries DGDs name (``hosts_toml``; the file's ``server`` is this registry, so containerd
does not fall back to the real host).

Run as ``python -m deploy_suite_offline.kind.registry --listen HOST:PORT --state DIR [--image DIR]
[--python-image DIR]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qs, urlsplit

REGISTRIES = ("nvcr.io", "docker.io", "ghcr.io", "quay.io", "public.ecr.aws", "registry.k8s.io")
DYNAMO_REPOS = ("nvidia/ai-dynamo/vllm-runtime", "nvidia/ai-dynamo/sglang-runtime",
                "nvidia/ai-dynamo/tensorrtllm-runtime", "nvidia/ai-dynamo/dynamo-frontend",
                "nvidia/ai-dynamo/dynamo-planner")
EPP_REPO = "nvidia/ai-dynamo/dynamo-epp"
EPP_ENTRYPOINT = ["/opt/dynamo/bin/python3", "-m", "dynamo_offline_epp"]
# The manifests of an export: the image as built, and its EPP variant (another config, same layers).
MANIFESTS = {"image": "oci-manifest.json", "epp": "epp-oci-manifest.json"}
# ai-dynamo's released versions (docs/offline-cluster.md, "Every image a DGD names is served"); an
# image tag names the release without the wheel's `.postN` (1.3.0 for the wheel 1.3.0.post1).
RELEASED = frozenset({
    "1.6.1", "1.6.0", "1.5.1", "1.5.0", "1.4.2", "1.4.1", "1.4.0", "1.3.1", "1.3.0", "1.2.1", "1.2.0", "1.1.1",
    "1.1.0", "1.0.2", "1.0.1", "1.0.0", "0.9.1", "0.9.0", "0.8.1", "0.8.0", "0.7.1", "0.7.0", "0.6.1", "0.6.0",
    "0.5.1", "0.5.0", "0.4.1", "0.4.0", "0.3.2", "0.3.1", "0.3.0", "0.2.1", "0.2.0", "0.1.1", "0.1.0"})
# The official Python image's tags support Jobs may name (docs/offline-cluster.md, "Support images
# and the hub replica"): the recipes' 3.10 and the 3.11 the image holds, each plain and -slim.
PYTHON_REPO = "library/python"
PYTHON_TAGS = frozenset({"3.10", "3.10-slim", "3.11", "3.11-slim"})
DYNAMO, PYTHON = "dynamo", "python"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_TAG = re.compile(r"^(\d+\.\d+\.\d+)(?:[.-]post\d+)?$")


def hosts_toml(address: str) -> str:
    """``/etc/containerd/certs.d/<registry>/hosts.toml``: this registry is the only host asked."""
    return f'server = "http://{address}"\n\n[host."http://{address}"]\n  capabilities = ["pull", "resolve"]\n'


def served_name(upstream: str, name: str, tag: str) -> str | None:
    """Which manifest (``MANIFESTS``) answers ``upstream/name:tag`` when it is one of the Dynamo images a
    DGD names, at a released version; None otherwise (containerd names the upstream in ``?ns=`` when
    it asks a host other than the image's own)."""
    found = _TAG.match(tag)
    if upstream not in ("nvcr.io", "") or found is None or found.group(1) not in RELEASED:
        return None
    return "image" if name in DYNAMO_REPOS else "epp" if name == EPP_REPO else None


def served_image(upstream: str, name: str, tag: str) -> tuple[str, str] | None:
    """Which image (``DYNAMO``, ``PYTHON``) and which of its manifests (``MANIFESTS``) answer
    ``upstream/name:tag``, or None: not found."""
    variant = served_name(upstream, name, tag)
    if variant:
        return DYNAMO, variant
    if upstream in ("docker.io", "") and name == PYTHON_REPO and tag in PYTHON_TAGS:
        return PYTHON, "image"
    return None


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return "sha256:" + hashlib.file_digest(f, "sha256").hexdigest()


def export(ref: str, image_id: str, root: Path, docker: str = "docker") -> Path:
    """``docker save ref`` extracted under ``root/<image id>`` with ``oci-manifest.json`` (its
    layers' and config's digests), once per image id; the caller holds the build lock."""
    dest = root / image_id.removeprefix("sha256:")[:16]
    if all((dest / m).is_file() for m in MANIFESTS.values()):
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    save = subprocess.Popen([docker, "save", ref], stdout=subprocess.PIPE)
    done = subprocess.run(["tar", "-x", "-C", str(dest)], stdin=save.stdout, check=False, capture_output=True)
    if save.stdout is not None:
        save.stdout.close()
    if save.wait() != 0 or done.returncode != 0:
        shutil.rmtree(dest, ignore_errors=True)
        raise OSError(f"docker save {ref} into {dest} failed: {done.stderr.decode(errors='replace')[-500:]}")
    describe(dest)
    return dest


def describe(dest: Path) -> None:
    """Write the manifests of ``MANIFESTS`` and ``blobs.json`` for a ``docker save`` extracted in ``dest``."""
    saved = json.loads((dest / "manifest.json").read_text())[0]
    config = dest / saved["Config"]
    layers = [dest / layer for layer in saved["Layers"]]
    doc = json.loads(config.read_text())
    doc.setdefault("config", {}).update({"Entrypoint": EPP_ENTRYPOINT, "Cmd": None})
    epp_config = dest / "epp-config.json"
    epp_config.write_text(json.dumps(doc, separators=(",", ":")))
    blobs = {_sha256(p): str(p.relative_to(dest)) for p in [config, epp_config, *layers]}
    for variant, cfg in (("image", config), ("epp", epp_config)):
        manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": _sha256(cfg),
                               "size": cfg.stat().st_size},
                    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": _sha256(p),
                                "size": p.stat().st_size} for p in layers]}
        (dest / MANIFESTS[variant]).write_text(json.dumps(manifest, separators=(",", ":")))
    (dest / "blobs.json").write_text(json.dumps(blobs))


@dataclass(frozen=True)
class Served:
    """One exported image: its manifests' bytes by variant (``MANIFESTS``), and its blobs by digest."""

    manifests: dict[str, bytes]
    blobs: dict[str, Path]

    @classmethod
    def load(cls, root: Path) -> Served:
        manifests = {v: (root / f).read_bytes() for v, f in MANIFESTS.items()}
        blobs = {d: root / p for d, p in json.loads((root / "blobs.json").read_text()).items()}
        return cls(manifests, blobs)

    def digest(self, variant: str = "image") -> str:
        return "sha256:" + hashlib.sha256(self.manifests[variant]).hexdigest()

    def manifest(self, ref: str, variant: str | None) -> bytes | None:
        """The manifest a pull by digest or by a served name's tag (``variant``) gets, if any."""
        by_digest = next((m for v, m in self.manifests.items() if self.digest(v) == ref), None)
        return by_digest if by_digest is not None else self.manifests.get(variant) if variant else None


class _Handler(BaseHTTPRequestHandler):
    server_version = "deploy-suite-registry/1"
    images: ClassVar[dict[str, Served]] = {}  # DYNAMO, PYTHON -> the exported image

    def _answer(self, status: int, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _unknown(self, name: str, ref: str, code: str) -> None:
        self._answer(404, {"errors": [{"code": code, "message": "manifest unknown" if ref else "blob unknown",
                                       "detail": {"name": name, "tag": ref}}]})

    def _send(self, media_type: str, size: int, digest: str, body: Path | bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", media_type)
        self.send_header("Docker-Content-Digest", digest)
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        if self.command == "HEAD":
            return
        if isinstance(body, bytes):
            self.wfile.write(body)
            return
        with body.open("rb") as f:
            shutil.copyfileobj(f, self.wfile, 1 << 20)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        upstream = (parse_qs(url.query).get("ns") or [""])[0]
        if url.path.rstrip("/") == "/v2":
            self._answer(200, {})
            return
        name, _, ref = url.path.removeprefix("/v2/").partition("/manifests/")
        images = type(self).images
        if ref:
            picked = served_image(upstream, name, ref)
            found = images[picked[0]].manifest(ref, picked[1]) if picked and picked[0] in images else None
            if found is None:  # a pull by digest
                found = next((m for i in images.values() if (m := i.manifest(ref, None)) is not None), None)
            if found is not None:
                self._send(OCI_MANIFEST, len(found), "sha256:" + hashlib.sha256(found).hexdigest(), found)
                return
            self._unknown(name, ref, "MANIFEST_UNKNOWN")
            return
        name, _, digest = url.path.removeprefix("/v2/").partition("/blobs/")
        blob = next((i.blobs[digest] for i in images.values() if digest in i.blobs), None)
        if blob is None:
            self._unknown(name, "", "BLOB_UNKNOWN" if digest else "NAME_UNKNOWN")
            return
        self._send("application/octet-stream", blob.stat().st_size, digest, blob)

    do_HEAD = do_GET

    def log_message(self, format: str, *args: object) -> None:
        print(f"{self.address_string()} {format % args}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deploy_suite_offline.kind.registry")
    parser.add_argument("--listen", required=True, help="HOST:PORT (the cluster network's gateway)")
    parser.add_argument("--state", default="", help="the cluster directory (names the owner in the command line)")
    parser.add_argument("--image", default="", help="an exported Dynamo image (export()) served under DYNAMO_REPOS")
    parser.add_argument("--python-image", default="", help="an exported Python image served as python:PYTHON_TAGS")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    exported = {DYNAMO: args.image, PYTHON: args.python_image}
    _Handler.images = {k: Served.load(Path(v)) for k, v in exported.items() if v}
    server = ThreadingHTTPServer((host, int(port)), _Handler)
    what = "; ".join([f"the Dynamo image {args.image} as {', '.join(DYNAMO_REPOS)} (and {EPP_REPO})"]
                     * bool(args.image) +
                     [f"the Python image {args.python_image} as python:{{{','.join(sorted(PYTHON_TAGS))}}}"]
                     * bool(args.python_image)) or "no image"
    print(f"registry on http://{args.listen}: {what}; every other pull is not found", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
