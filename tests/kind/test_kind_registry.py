"""The nodes' registry answers every pull as a registry answers a tag that does not exist, and each
node's containerd asks only it (no fallback to the real, unreachable host). No Docker needed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import httpx
import pytest

from deploy_suite.offline.kind import registry


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
