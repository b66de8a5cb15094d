"""A fault-injecting HTTP reverse proxy in front of a Dynamo frontend (stdlib only).

Run as its own process (``python faultproxy.py --upstream-port N --fault F --port-file P``) by
``dynamo_runtime.start_serving`` so it outlives the caller like the frontend does. It must not
import anything outside the standard library: it runs with the Dynamo venv's interpreter, where
``deploy_suite`` is not installed.

Faults (everything else is forwarded unchanged, headers such as ``x-dynamo-worker-instance-id``
included, and streamed responses are relayed chunk by chunk):
- ``chat-500``: ``POST /v1/chat/completions`` answers 500 with a JSON error body.
- ``never-list``: ``GET /v1/models`` answers 200 with an empty ``data`` list, forever.
- ``error-object``: ``POST /v1/chat/completions`` answers 200 with an ``error`` object, no choices.
- ``model-not-ready``: the model stays listed, ``POST /v1/chat/completions`` answers 503 ``Model not
  ready`` (a worker that registered but cannot serve).
- ``none``: a plain pass-through (useful to measure the proxy itself).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FAULTS = ("chat-500", "never-list", "error-object", "model-not-ready", "none")
CHAT_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"
# Hop-by-hop headers (RFC 9110 7.6.1) are per connection and must not be relayed.
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
_UPSTREAM_TIMEOUT_S = 300.0


def fault_response(fault: str, method: str, path: str) -> tuple[int, dict[str, Any]] | None:
    """The injected answer for this request, or None to forward it."""
    route = path.split("?", 1)[0].rstrip("/")
    if method == "POST" and route == CHAT_PATH:
        if fault == "chat-500":
            return 500, {"error": {"message": "injected fault chat-500", "type": "InternalServerError", "code": 500}}
        if fault == "model-not-ready":
            return 503, {"error": {"message": "Model not ready", "type": "Service Unavailable", "code": 503}}
        if fault == "error-object":
            return 200, {
                "error": {
                    "message": "injected fault error-object",
                    "type": "InternalServerError",
                    "code": 500,
                }
            }
    if method == "GET" and route == MODELS_PATH and fault == "never-list":
        return 200, {"object": "list", "data": []}
    return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked responses toward the client
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"{self.address_string()} {format % args}\n")

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _send_json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self) -> None:
        body = self._read_body()
        injected = fault_response(self.server.fault, self.command, self.path)
        if injected is not None:
            self._send_json(*injected)
            return
        upstream = http.client.HTTPConnection("127.0.0.1", self.server.upstream_port, timeout=_UPSTREAM_TIMEOUT_S)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            upstream.request(
                self.command,
                self.path,
                body=body if body or self.command == "POST" else None,
                headers=headers,
            )
            resp = upstream.getresponse()
        except OSError as exc:
            upstream.close()
            self._send_json(
                502,
                {
                    "error": {
                        "message": f"fault proxy: upstream unreachable: {exc}",
                        "type": "BadGateway",
                        "code": 502,
                    }
                },
            )
            return
        try:
            self._relay(resp)
        finally:
            upstream.close()

    def _relay(self, resp: http.client.HTTPResponse) -> None:
        self.send_response(resp.status, resp.reason)
        for key, value in resp.getheaders():
            if key.lower() not in _HOP:
                self.send_header(key, value)
        length = resp.getheader("Content-Length")
        if length is not None:
            self.send_header("Content-Length", length)
            self.end_headers()
            self.wfile.write(resp.read())
            return
        # Unknown length (SSE streams): relay each piece as it arrives, re-chunked.
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        while piece := resp.read1(65536):
            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _handle


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, upstream_port: int, fault: str) -> None:
        self.upstream_port = upstream_port
        self.fault = fault
        super().__init__(("127.0.0.1", port), _Handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--upstream-port", type=int, required=True)
    parser.add_argument("--fault", choices=FAULTS, required=True)
    parser.add_argument("--port", type=int, default=0, help="0 = any free port (written to --port-file)")
    parser.add_argument("--port-file", type=Path, required=True)
    args = parser.parse_args(argv)
    server = _Server(args.port, args.upstream_port, args.fault)
    # Written atomically once listening: the starter waits for this file instead of probing ports.
    tmp = args.port_file.with_suffix(".tmp")
    tmp.write_text(str(server.server_address[1]))
    os.replace(tmp, args.port_file)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
