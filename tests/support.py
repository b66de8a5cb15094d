"""Helpers shared by the test suites that run the harness as a user does (e2e, security,
reliability): a cluster admin's namespace with its secret, in-place YAML edits that keep layout,
handoff timeouts, schema-validated ledgers, and a decoy API server that counts connections."""

from __future__ import annotations

import json
import re
import socket
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from deploy_suite import ledger
from deploy_suite.kube import Kube

SECRET = "hf-token-secret"


def admin_namespace(kube: Kube, prefix: str, secret_value: str = "placeholder-not-a-real-token") -> str:
    """A unique namespace with ``hf-token-secret``, as the cluster admin creates them (the harness
    never creates either)."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET, "namespace": name},
                 "type": "Opaque", "stringData": {"HF_TOKEN": secret_value}}, name)
    return name


def set_line(path: Path, key: str, value: str) -> None:
    """Replace the value of the one ``key:`` line of a YAML file, keeping comments and layout."""
    text = path.read_text(encoding="utf-8")
    new, count = re.subn(rf"(?m)^(\s*{re.escape(key)}:\s*).*$", lambda m: f"{m.group(1)}{value}", text)
    if count != 1:
        raise ValueError(f"{path.name}: expected one {key!r} line, found {count}")
    path.write_text(new, encoding="utf-8")


def add_timeouts(handoff: Path, timeouts: Mapping[str, float]) -> None:
    """Add (or extend) the ``timeouts:`` mapping of a handoff file."""
    data: dict[str, Any] = yaml.safe_load(handoff.read_text(encoding="utf-8"))
    data["timeouts"] = {**(data.get("timeouts") or {}), **timeouts}
    handoff.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def read_ledger(path: Path) -> dict[str, Any]:
    """A ledger as JSON, validated against the schema (a torn or invalid file fails here)."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    ledger.validate(data)
    return data


class Listener:
    """A 127.0.0.1 TCP port that counts connections and closes them: a decoy API server."""

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
