"""A decoy API server: a 127.0.0.1 TCP port that counts connections and closes them.

A run pointed at a kubeconfig whose current-context (or only cluster) is the decoy must make no
connection to it: every request is pinned to the workload's context, and step 1 and every refusal
happen without any request at all.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

from deploy_suite import yamlio


class Listener:
    """Counts the connections made to :attr:`port` (each is closed at once)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port: int = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="decoy-listener")
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


def decoy_kubeconfig(path: Path, real_kubeconfig: str | Path, real_context: str, decoy_port: int) -> Path:
    """The real kubeconfig plus a context ``decoy`` (server: the listener's port), made current-context."""
    doc: dict[str, Any] = yamlio.load_one(Path(real_kubeconfig))
    real = next(c for c in doc["contexts"] if c["name"] == real_context)
    doc["clusters"].append({"name": "decoy", "cluster": {"server": f"https://127.0.0.1:{decoy_port}",
                                                         "insecure-skip-tls-verify": True}})
    doc["contexts"].append({"name": "decoy", "context": {"cluster": "decoy", "user": real["context"]["user"]}})
    doc["current-context"] = "decoy"
    path.touch(mode=0o600)
    path.write_text(yamlio.dump(doc), encoding="utf-8")
    return path
