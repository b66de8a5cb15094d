"""The nodes' registry serves the Dynamo image under the names DGDs use (released versions only), answers every
other pull as a registry answers a tag that does not exist, and each
node's containerd asks only it (no fallback to the real, unreachable host). No Docker needed."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from deploy_suite_offline.kind import registry


@pytest.fixture
def served() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), registry._Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_api_root_answers_and_any_manifest_is_unknown(served: str) -> None:
    assert httpx.get(f"http://{served}/v2/").status_code == 200
    reply = httpx.get(f"http://{served}/v2/nvidia/ai-dynamo/vllm-runtime/manifests/1.6.1")
    assert reply.status_code == 404
    assert reply.headers["Docker-Distribution-API-Version"] == "registry/2.0"
    assert reply.json()["errors"][0]["code"] == "MANIFEST_UNKNOWN"
    assert httpx.head(f"http://{served}/v2/x/manifests/latest").status_code == 404


def test_containerd_is_pointed_at_it_as_the_server_so_it_never_falls_back() -> None:
    text = registry.hosts_toml("172.20.0.1:5000")
    assert text.startswith('server = "http://172.20.0.1:5000"')
    assert '[host."http://172.20.0.1:5000"]' in text and '"pull", "resolve"' in text
    assert "nvcr.io" in registry.REGISTRIES


def test_the_dynamo_images_dgds_name_are_served_at_released_versions_only() -> None:
    assert registry.served_name("nvcr.io", "nvidia/ai-dynamo/vllm-runtime", "1.3.0")
    assert registry.served_name("nvcr.io", "nvidia/ai-dynamo/sglang-runtime", "0.8.1.post1")
    assert registry.served_name("nvcr.io", "nvidia/ai-dynamo/dynamo-frontend", "1.6.1")
    assert not registry.served_name("nvcr.io", "nvidia/ai-dynamo/vllm-runtime", "0.0.0-does-not-exist")
    assert not registry.served_name("nvcr.io", "nvidia/ai-dynamo/vllm-runtime", "9.9.9")
    assert not registry.served_name("nvcr.io", "nvidia/ai-dynamo/vllm-runtime", "latest")
    assert not registry.served_name("nvcr.io", "nvidia/ai-dynamo/kubernetes-operator", "1.6.1")
    assert not registry.served_name("docker.io", "nvidia/ai-dynamo/vllm-runtime", "1.6.1")
    # The EPP of a gaie DGD: its own manifest (another entry point), released versions only.
    assert registry.served_name("nvcr.io", registry.EPP_REPO, "1.6.1") == "epp"
    assert registry.served_name("nvcr.io", "nvidia/ai-dynamo/vllm-runtime", "1.6.1") == "image"
    assert registry.served_name("nvcr.io", registry.EPP_REPO, "9.9.9") is None


@pytest.fixture
def image(tmp_path: Path) -> Iterator[registry.Served]:
    """A saved image as `docker save` lays it out: manifest.json, the config, one layer tar."""
    (tmp_path / "cfg.json").write_text('{"rootfs": {}, "config": {"Entrypoint": ["/e"], "Cmd": ["/bin/bash"]}}')
    (tmp_path / "l1").mkdir()
    (tmp_path / "l1" / "layer.tar").write_bytes(b"layer-bytes")
    (tmp_path / "manifest.json").write_text(json.dumps([{"Config": "cfg.json", "Layers": ["l1/layer.tar"]}]))
    registry.describe(tmp_path)
    served = registry.Served.load(tmp_path)
    registry._Handler.images = {registry.DYNAMO: served}
    yield served
    registry._Handler.images = {}


def test_a_served_name_answers_the_manifest_and_its_blobs(served: str, image: registry.Served) -> None:
    reply = httpx.get(f"http://{served}/v2/nvidia/ai-dynamo/vllm-runtime/manifests/1.3.0?ns=nvcr.io")
    assert reply.status_code == 200
    assert reply.headers["Docker-Content-Digest"] == image.digest()
    manifest = reply.json()
    assert manifest["mediaType"] == registry.OCI_MANIFEST
    layer = manifest["layers"][0]
    assert layer["digest"] == "sha256:" + hashlib.sha256(b"layer-bytes").hexdigest()
    blob = httpx.get(f"http://{served}/v2/nvidia/ai-dynamo/vllm-runtime/blobs/{layer['digest']}?ns=nvcr.io")
    assert blob.content == b"layer-bytes"
    by_digest = httpx.get(f"http://{served}/v2/nvidia/ai-dynamo/vllm-runtime/manifests/{image.digest()}")
    assert by_digest.status_code == 200
    # An image name nothing serves stays a registry's "not found".
    missing = httpx.get(f"http://{served}/v2/nvidia/ai-dynamo/vllm-runtime/manifests/0.0.0-does-not-exist?ns=nvcr.io")
    assert missing.status_code == 404 and missing.json()["errors"][0]["code"] == "MANIFEST_UNKNOWN"
    assert httpx.get(f"http://{served}/v2/x/blobs/sha256:00").status_code == 404


def test_the_epp_name_gets_the_same_layers_with_the_epp_stand_in_as_entry_point(
        served: str, image: registry.Served) -> None:
    runtime = httpx.get(f"http://{served}/v2/nvidia/ai-dynamo/vllm-runtime/manifests/1.6.1?ns=nvcr.io").json()
    reply = httpx.get(f"http://{served}/v2/{registry.EPP_REPO}/manifests/1.6.1?ns=nvcr.io")
    assert reply.status_code == 200 and reply.headers["Docker-Content-Digest"] == image.digest("epp")
    epp = reply.json()
    assert epp["layers"] == runtime["layers"] and epp["config"]["digest"] != runtime["config"]["digest"]
    config = httpx.get(f"http://{served}/v2/{registry.EPP_REPO}/blobs/{epp['config']['digest']}?ns=nvcr.io").json()
    assert config["config"]["Entrypoint"] == registry.EPP_ENTRYPOINT and config["config"]["Cmd"] is None
    assert httpx.get(f"http://{served}/v2/{registry.EPP_REPO}/manifests/{image.digest('epp')}").status_code == 200
