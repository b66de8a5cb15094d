"""The registry the kind nodes pull from instead of the real ones (no registry is reachable here).

A read-only OCI distribution endpoint on the gateway of the cluster's own Docker network: it
serves no image yet, so every pull of a name the nodes do not already hold is answered the way a
registry answers a tag that does not exist (404 ``MANIFEST_UNKNOWN``), and the kubelet reports
``ErrImagePull`` with containerd's ``not found``, as on a real cluster. Without it containerd
would try the real registry's host and fail on the network (``dial tcp: lookup ...``), which the
harness rightly retries instead of judging.

Each node's containerd is pointed at it for the registries DGDs name (``hosts_toml``; the file's
``server`` is this registry, so containerd does not fall back to the real host).

Run as ``python -m deploy_suite.offline.kind.registry --listen HOST:PORT --state DIR``.
"""

from __future__ import annotations

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REGISTRIES = ("nvcr.io", "docker.io", "ghcr.io", "quay.io", "public.ecr.aws", "registry.k8s.io")


def hosts_toml(address: str) -> str:
    """``/etc/containerd/certs.d/<registry>/hosts.toml``: this registry is the only host asked."""
    return f'server = "http://{address}"\n\n[host."http://{address}"]\n  capabilities = ["pull", "resolve"]\n'


class _Handler(BaseHTTPRequestHandler):
    server_version = "deploy-suite-registry/1"

    def _answer(self, status: int, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v2":
            self._answer(200, {})
            return
        name, _, ref = self.path.removeprefix("/v2/").partition("/manifests/")
        code = "MANIFEST_UNKNOWN" if ref else "NAME_UNKNOWN"
        self._answer(404, {"errors": [{"code": code, "message": "manifest unknown",
                                       "detail": {"name": name, "tag": ref.split("?")[0]}}]})

    do_HEAD = do_GET

    def log_message(self, format: str, *args: object) -> None:
        print(f"{self.address_string()} {format % args}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deploy_suite.offline.kind.registry")
    parser.add_argument("--listen", required=True, help="HOST:PORT (the cluster network's gateway)")
    parser.add_argument("--state", default="", help="the cluster directory (names the owner in the command line)")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    server = ThreadingHTTPServer((host, int(port)), _Handler)
    print(f"registry on http://{args.listen} (no images: every pull is not found)", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
