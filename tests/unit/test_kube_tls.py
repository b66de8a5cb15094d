"""A TLS connection the apiserver resets before its handshake is closed at once (deploy_suite.access.tls).

An apiserver that is killed or restarting resets connections the kernel accepted for it. The
server here resets every connection; the client's TCP connect is held until the reset has arrived,
so each TLS handshake starts on a reset socket: the case CPython's ssl leaks (docs/reliability.md).
"""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from urllib3.util import connection

from deploy_suite import yamlio
from deploy_suite.access.kube import Kube
from deploy_suite.errors import Unavailable


@pytest.fixture
def reset_before_handshake(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A local port whose every connection is reset (RST) once the client's TCP connect has
    returned; urllib3's connect returns only when that reset has arrived."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    connected = threading.Semaphore(0)
    stop = threading.Event()

    def reset_each() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            connected.acquire(timeout=5)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    real = connection.create_connection

    def connect_then_wait_for_the_reset(*args: Any, **kwargs: Any) -> socket.socket:
        sock = real(*args, **kwargs)
        connected.release()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                sock.getpeername()
            except OSError:
                break
            time.sleep(0.005)
        return sock

    thread = threading.Thread(target=reset_each, daemon=True)
    thread.start()
    monkeypatch.setattr(connection, "create_connection", connect_then_wait_for_the_reset)
    yield server.getsockname()[1]
    stop.set()
    thread.join(5)
    server.close()


def _kubeconfig(path: Path, port: int) -> Path:
    path.write_text(yamlio.dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}]}))
    return path


def _open_sockets() -> set[str]:
    fds = Path("/proc/self/fd")
    found = set()
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):
            if os.readlink(fd).startswith("socket:"):
                found.add(fd.name)
    return found


def test_a_connection_reset_before_its_tls_handshake_is_closed_at_once(tmp_path: Path,
                                                                       reset_before_handshake: int) -> None:
    kube = Kube("ctx", kubeconfig=_kubeconfig(tmp_path / "kubeconfig", reset_before_handshake), request_timeout=5)
    before = _open_sockets()
    gc.disable()  # closed by the client, not by a collection that happens to run
    try:
        with pytest.raises(Unavailable, match="reset by peer"):
            kube.get("Namespace", "default")
        kube.close()
        left = _open_sockets() - before
    finally:
        gc.enable()
    assert left == set(), "sockets left open by a failed request"
