"""The harness's ``kubectl port-forward`` processes and an offline cluster's own processes, seen
from outside through ``/proc``.

Nothing signals a process start or a socket starting to listen, so the waits here re-read
``/proc`` with a short capped backoff, bounded by a deadline.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from deploy_suite_offline.procs import mark_of, wait_exit


def _cmdline(pid: int) -> list[str]:
    try:
        return [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting to be reaped)."""
    try:
        return (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def port_forwards(namespace: str) -> list[int]:
    """Live ``kubectl port-forward`` processes aimed at ``namespace`` (a test's own, unique)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        argv = _cmdline(int(entry.name))
        if argv and Path(argv[0]).name == "kubectl" and "port-forward" in argv and namespace in argv \
                and _alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def wait_for_port_forward(namespace: str, timeout: float = 60.0, exclude: Sequence[int] = ()) -> int:
    """The first ``kubectl port-forward`` of ``namespace`` to appear (other than ``exclude``)."""
    deadline = time.monotonic() + timeout
    delay = 0.002
    while time.monotonic() < deadline:
        pids = [p for p in port_forwards(namespace) if p not in exclude]
        if pids:
            return pids[0]
        threading.Event().wait(delay)
        delay = min(delay * 2, 0.02)
    raise AssertionError(f"no kubectl port-forward for namespace {namespace} appeared within {timeout:.0f}s")


def listening(pid: int) -> bool:
    """Whether process ``pid`` has a listening TCP socket (kubectl port-forward is forwarding)."""
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return False
    for table in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        if any(len(f) > 9 and f[3] == "0A" and f[9] in inodes for f in (r.split() for r in rows)):
            return True
    return False


def wait_listening(pid: int, timeout: float = 30.0) -> bool:
    """Until ``pid`` listens (True) or exits first (False)."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while not listening(pid):
        if not _alive(pid):
            return False
        if time.monotonic() > deadline:
            raise AssertionError(f"pid {pid} did not start listening within {timeout:.0f}s")
        threading.Event().wait(delay)
        delay = min(delay * 2, 0.05)
    return True


def kill_and_reap(pid: int, sig: signal.Signals = signal.SIGKILL) -> None:
    os.kill(pid, sig)
    assert wait_exit(pid, 30.0), f"pid {pid} survived {sig.name}"


def _runs_in(pid: int, root: Path) -> bool:
    """Whether ``pid``'s working directory is ``root`` or below it (also once deleted)."""
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd").removesuffix(" (deleted)")
    except OSError:
        return False
    return cwd == str(root) or cwd.startswith(f"{root}/")


def of_cluster(root: Path) -> list[int]:
    """Live processes of the cluster whose directory is ``root``: those carrying its mark (the
    directory, in ``DEPLOY_SUITE_CLUSTER``) and any whose working directory lies in it."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            pid = int(entry.name)
            if _alive(pid) and (mark_of(pid) == str(root) or _runs_in(pid, root)):
                found.append(pid)
    return sorted(found)
