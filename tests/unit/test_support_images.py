"""Which names the kind nodes' registry serves (registry.py): the Dynamo image under NVIDIA's names, the Python
image under the official image's names support Jobs use (python:3.10/3.11, plain and -slim), nothing else."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from deploy_suite_offline.kind import registry


@pytest.mark.parametrize(("upstream", "name", "tag", "served"), [
    ("docker.io", "library/python", "3.10-slim", registry.PYTHON),  # the sample's model-download Job
    ("docker.io", "library/python", "3.10", registry.PYTHON),
    ("docker.io", "library/python", "3.11-slim", registry.PYTHON),
    ("", "library/python", "3.11", registry.PYTHON),  # asked directly, no ns=
    ("nvcr.io", "nvidia/ai-dynamo/vllm-runtime", "0.9.1", registry.DYNAMO),
    ("nvcr.io", registry.EPP_REPO, "1.6.1", registry.DYNAMO),  # its EPP manifest (test_kind_registry.py)
    ("docker.io", "library/python", "latest", None),
    ("docker.io", "library/python", "3.12-slim", None),
    ("docker.io", "library/python", "3.10-alpine", None),
    ("docker.io", "library/python", "3.10.14-slim", None),
    ("quay.io", "library/python", "3.10-slim", None),
    ("nvcr.io", "library/python", "3.10-slim", None),
    ("docker.io", "library/pypy", "3.10-slim", None),
    ("docker.io", "someone/python", "3.10-slim", None),
    ("docker.io", "nvidia/ai-dynamo/vllm-runtime", "0.9.1", None),
])
def test_names_served(upstream: str, name: str, tag: str, served: str | None) -> None:
    picked = registry.served_image(upstream, name, tag)
    assert (picked[0] if picked else None) == served


def _saved(dest: Path, layer: bytes) -> registry.Served:
    """An image as `docker save` lays it out, described for the registry."""
    dest.mkdir()
    (dest / "cfg.json").write_text(json.dumps({"rootfs": {}, "layer": layer.decode()}))
    (dest / "l1").mkdir()
    (dest / "l1" / "layer.tar").write_bytes(layer)
    (dest / "manifest.json").write_text(json.dumps([{"Config": "cfg.json", "Layers": ["l1/layer.tar"]}]))
    registry.describe(dest)
    return registry.Served.load(dest)


@pytest.fixture
def both(tmp_path: Path) -> Iterator[tuple[str, registry.Served, registry.Served]]:
    dynamo, python = _saved(tmp_path / "d", b"dynamo-layer"), _saved(tmp_path / "p", b"python-layer")
    registry._Handler.images = {registry.DYNAMO: dynamo, registry.PYTHON: python}
    server = ThreadingHTTPServer(("127.0.0.1", 0), registry._Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", dynamo, python
    server.shutdown()
    server.server_close()
    registry._Handler.images = {}


def test_each_name_gets_its_own_image_and_its_blobs(both: tuple[str, registry.Served, registry.Served]) -> None:
    url, dynamo, python = both
    slim = httpx.get(f"{url}/v2/library/python/manifests/3.10-slim?ns=docker.io")
    assert slim.status_code == 200 and slim.headers["Docker-Content-Digest"] == python.digest()
    runtime = httpx.get(f"{url}/v2/nvidia/ai-dynamo/vllm-runtime/manifests/0.9.1?ns=nvcr.io")
    assert runtime.headers["Docker-Content-Digest"] == dynamo.digest()
    layer = slim.json()["layers"][0]["digest"]
    assert httpx.get(f"{url}/v2/library/python/blobs/{layer}?ns=docker.io").content == b"python-layer"
    assert httpx.get(f"{url}/v2/library/python/manifests/{python.digest()}?ns=docker.io").status_code == 200
    missing = httpx.get(f"{url}/v2/library/python/manifests/3.12-slim?ns=docker.io")
    assert missing.status_code == 404 and missing.json()["errors"][0]["code"] == "MANIFEST_UNKNOWN"
