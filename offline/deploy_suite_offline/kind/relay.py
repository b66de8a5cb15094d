"""A TCP relay from the kind cluster's Docker network to a server on this machine's loopback.

The controllers process serves the operator's webhooks on 127.0.0.1 only (``webhook.py``); the
kind API server runs inside a node container, whose 127.0.0.1 is its own. So ``cluster up
--provider kind`` runs this relay on the host's address in the cluster's own Docker network (the
network's gateway, reachable only from that network's containers), and inside the control-plane
node a ``socat`` listening on the node's 127.0.0.1 forwards there: the webhook's URL and its
certificate for IP 127.0.0.1 stay valid unchanged.

Run as ``python -m deploy_suite_offline.kind.relay --listen HOST:PORT --to HOST:PORT``.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import socket
import sys
import threading


def _pump(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := src.recv(65536):
            dst.sendall(chunk)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def _serve_one(conn: socket.socket, target: tuple[str, int]) -> None:
    try:
        upstream = socket.create_connection(target, timeout=10)
    except OSError:
        conn.close()
        return
    upstream.settimeout(None)
    back = threading.Thread(target=_pump, args=(upstream, conn), daemon=True)
    back.start()
    _pump(conn, upstream)
    back.join()
    conn.close()
    upstream.close()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deploy_suite_offline.kind.relay")
    parser.add_argument("--listen", required=True, help="HOST:PORT to accept on (the cluster network's gateway)")
    parser.add_argument("--to", required=True, help="HOST:PORT to forward to (a loopback server)")
    parser.add_argument("--state", default="", help="the cluster directory (names the owner in the command line)")
    args = parser.parse_args(argv)
    listen, target = _address(args.listen), _address(args.to)
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(listen)
    server.listen(64)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"relaying {args.listen} -> {args.to}", flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=_serve_one, args=(conn, target), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
