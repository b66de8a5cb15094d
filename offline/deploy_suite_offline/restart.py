"""Restart one process of a running offline cluster exactly as it ran (fault injection).

kwokctl starts the control-plane components as host processes; a reliability test kills one
(SIGTERM, or SIGKILL for a crash) and starts it again with the same command line, working
directory, environment and log files, read from ``/proc/<pid>`` before the stop. The restart is
done once the component's own health endpoint and the apiserver's ``/readyz`` answer ``ok``.
:meth:`deploy_suite_offline.cluster.OfflineCluster.restart_component` is the entry point.
"""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from deploy_suite import clock
from deploy_suite_offline import procs
from deploy_suite_offline.errors import ClusterError

Probe = Callable[[], bool]


@dataclass(frozen=True)
class ComponentRestart:
    """One restarted component: pids and how long it was out (stop signal -> exited -> healthy)."""

    name: str
    old_pid: int
    new_pid: int
    stop_s: float
    outage_s: float


@dataclass(frozen=True)
class Snapshot:
    """How a process was started, read from /proc before it is stopped."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    stdout: str | None
    stderr: str | None
    log_offset: list[int] = field(default_factory=lambda: [0])  # where the latest start's output begins

    def start(self) -> int:
        """Start it again, a daemon like the one it replaces (kwokctl's components outlive kwokctl)."""
        if self.stdout:
            with contextlib.suppress(OSError):
                self.log_offset[0] = Path(self.stdout).stat().st_size
        out = Path(self.stdout) if self.stdout else None
        err = Path(self.stderr) if self.stderr else None
        return procs.detach(procs.spawn(self.argv, out, err, cwd=self.cwd, env=self.env))

    def flag(self, name: str) -> str | None:
        for arg in self.argv[1:]:
            if arg.startswith(f"{name}="):
                return arg.split("=", 1)[1]
        return None

    def health_url(self, name: str) -> str | None:
        if name == "etcd":
            urls = self.flag("--listen-client-urls") or self.flag("--advertise-client-urls")
            return f"{urls.split(',')[0].rstrip('/')}/health" if urls else None
        if name in ("kube-apiserver", "kube-scheduler", "kube-controller-manager"):
            port = self.flag("--secure-port")
            path = "/readyz" if name == "kube-apiserver" else "/healthz"
            return f"https://127.0.0.1:{port}{path}" if port else None
        if name == "kwok-controller":
            addr = self.flag("--server-address")
            return f"https://{addr}/healthz" if addr else None
        return None

    def log_tail(self) -> str:
        if not self.stdout:
            return "no log"
        try:
            with Path(self.stdout).open("rb") as fh:
                fh.seek(self.log_offset[0])
                text = fh.read().decode(errors="replace")
            return " | ".join(text.strip().splitlines()[-3:])
        except OSError:
            return "no log"


def snapshot(pid: int) -> Snapshot:
    """Read how ``pid`` was started from /proc (command line, cwd, environment, log files)."""
    proc = Path(f"/proc/{pid}")
    try:
        argv = [a.decode(errors="surrogateescape") for a in (proc / "cmdline").read_bytes().split(b"\0")]
        while argv and not argv[-1]:
            argv.pop()
        env: dict[str, str] = {}
        for item in (proc / "environ").read_bytes().split(b"\0"):
            key, sep, value = item.decode(errors="surrogateescape").partition("=")
            if sep:
                env[key] = value
        cwd = os.readlink(proc / "cwd")
        if argv and not os.path.isabs(argv[0]) and os.sep not in argv[0]:
            argv[0] = os.readlink(proc / "exe")
    except OSError as exc:
        raise ClusterError(f"cannot read how pid {pid} was started from /proc: {exc}") from exc

    def target(fd: int) -> str | None:
        with contextlib.suppress(OSError):
            path = os.readlink(proc / "fd" / str(fd))
            if path.startswith("/") and Path(path).is_file():
                return path
        return None  # a pipe, a socket or /dev/null: the new process gets /dev/null

    return Snapshot(argv, cwd, env, target(1), target(2))


def probe(url: str, ctx: ssl.SSLContext | None) -> bool:
    """True when ``url`` answers 200 right now."""
    try:
        with urllib.request.urlopen(url, timeout=2.0, context=ctx if url.startswith("https") else None) as resp:
            return bool(resp.status == 200)
    except (OSError, ValueError):  # refused, reset, TLS handshake against a half-started server, 5xx
        return False


def _insecure_local() -> ssl.SSLContext:
    # Only for the loopback health endpoints of the scheduler, controller-manager and kwok, which
    # serve self-signed certificates: the probe reads "ok", nothing is sent.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


@dataclass(frozen=True)
class Stop:
    """How a component goes down: SIGTERM, then SIGKILL after ``grace`` seconds (``hard``: SIGKILL at
    once, a crash); it then stays down ``hold`` more seconds (a slow comeback)."""

    hard: bool = False
    grace: float = 5.0
    hold: float = 0.0


def restart(cluster_dir: Path, name: str, pid: int, apiserver_ready: Probe, *, timeout: float,
            stop: Stop) -> ComponentRestart:
    """Stop ``pid`` (the cluster's ``name`` process) as ``stop`` says and start it again; see the
    module docstring. The new pid is written to ``pids/<name>.pid``. The outage is measured from the
    stop signal to healthy.
    """
    snap = snapshot(pid)
    stopped_at = clock.monotonic()
    procs.kill(pid, signal.SIGKILL if stop.hard else signal.SIGTERM)
    if not procs.wait_exit(pid, 0.0 if stop.hard else stop.grace):
        procs.kill(pid, signal.SIGKILL)
        if not procs.wait_exit(pid, 10.0):
            raise ClusterError(f"{name} (pid {pid}) did not exit after SIGKILL")
    down_at = clock.monotonic()
    if stop.hold > 0:
        clock.sleep(stop.hold)
    deadline = stopped_at + stop.hold + timeout
    probes = [apiserver_ready]
    own = snap.health_url(name)
    if own is not None and name != "kube-apiserver":
        probes.insert(0, lambda: probe(own, _insecure_local()))
    logs = cluster_dir / "logs"

    def attempt() -> int | None:
        new_pid = snap.start()
        # `cluster down` and kwokctl find the new process by this file.
        procs.write_atomic(cluster_dir / "pids" / f"{name}.pid", str(new_pid))
        return new_pid if _healthy(name, new_pid, snap, probes, deadline, logs) else None

    # Another cluster's kwokctl probes free ports by binding them for an instant (and hands out
    # the highest free ones): a start that lost its port is tried again until time is up.
    new_pid = procs.poll(attempt, deadline - clock.monotonic(), 0.05, cap=1.0)
    if new_pid is None:
        raise ClusterError(f"{name} could not bind its port again after the restart (taken by another process: "
                           f"{snap.log_tail()}); fix: `deploy-suite cluster down --name {cluster_dir.name}` and "
                           "`up` again")
    ready_at = clock.monotonic()
    return ComponentRestart(name, pid, new_pid, round(down_at - stopped_at, 3), round(ready_at - stopped_at, 3))


def _healthy(name: str, pid: int, snap: Snapshot, probes: list[Probe], deadline: float, logs: Path) -> bool:
    """True once every probe answers ok; False when the process exited because its port was taken."""

    # Nothing to watch while the apiserver itself is down: a short capped backoff on /readyz.
    def check() -> bool | None:
        if not procs.alive(pid):
            tail = snap.log_tail()
            if "address already in use" in tail:
                return False
            raise ClusterError(f"{name} exited right after its restart (pid {pid}): {tail}; fix: see {logs}")
        return True if all(p() for p in probes) else None

    result = procs.poll(check, deadline - clock.monotonic(), 0.05, cap=0.5)
    if result is None:
        raise ClusterError(f"{name} restarted (pid {pid}) but /readyz did not answer ok in time; fix: see {logs}")
    return result
