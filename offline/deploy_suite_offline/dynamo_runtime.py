"""Run a real Dynamo frontend and mocker engine per DGD as local processes.

The offline cluster has no containers, so a DGD "pod" cannot serve anything by itself. This module
gives each DGD a real ``dynamo.frontend`` + ``dynamo.mocker`` pair (from the ``ai-dynamo`` wheel,
CPU only, in the environment ``dynamo_env.py`` builds) that the Kubernetes wiring (kwok
port-forward, the operator simulator's serving) points the pod's port 8000 at, so the OpenAI smoke
test talks to genuine Dynamo code.

``start_serving`` / ``Serving`` are the processes of one DGD, each in its own session so it
outlives the caller and is killed as a group (:mod:`deploy_suite_offline.procs`); pid files let
``stop_all`` clean up after a crash. Fault switches are served by ``faultproxy.py`` (stdlib only)
run in front of the frontend.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from deploy_suite import clock
from deploy_suite.errors import InputError, WaitTimeout, cut
from deploy_suite_offline import procs
from deploy_suite_offline.dynamo_env import OFFLINE_ENV, DynamoEnv
from deploy_suite_offline.errors import ClusterError

FAULTS = ("chat-500", "never-list", "error-object", "model-not-ready")
# As accepted by `python -m dynamo.frontend --router-mode` in 1.6.1.
ROUTER_MODES = ("round-robin", "random", "power-of-two", "kv", "direct", "least-loaded", "device-aware-weighted")

# Bounded waits; local processes answer in milliseconds.
_FRONTEND_UP_S = 60.0
_STOP_GRACE_S = 10.0

# In direct mode (the default) every ZMQ PUB socket binds tcp://0.0.0.0 (hard-coded in 1.6.1;
# DYN_EVENT_PLANE_HOST only changes the advertised address). In broker mode publishers *connect*
# to an XSUB and subscribers to an XPUB, so a loopback-only broker per serving keeps every
# listening socket on 127.0.0.1. pyzmq comes with the Dynamo venv.
_BROKER_SCRIPT = r"""
import json, os, sys, zmq
ctx = zmq.Context()
xsub = ctx.socket(zmq.XSUB); xsub.bind("tcp://127.0.0.1:*")
xpub = ctx.socket(zmq.XPUB); xpub.bind("tcp://127.0.0.1:*")
out = sys.argv[1]
with open(out + ".tmp", "w") as f:
    json.dump({"xsub": xsub.getsockopt_string(zmq.LAST_ENDPOINT),
               "xpub": xpub.getsockopt_string(zmq.LAST_ENDPOINT)}, f)
os.replace(out + ".tmp", out)
zmq.proxy(xsub, xpub)
"""
# Decimal ids as the mocker/frontend print them, hex as a gaie sidecar prints them.
_DECIMAL_ID = re.compile(r"(?:worker_id[=:]\s*|for worker |instance_id=)(\d+)\b")
_HEX_ID = re.compile(r"instance_id=0x([0-9a-fA-F]+)\b")


def parse_instance_ids(text: str) -> list[int]:
    """Worker instance ids found in log text, in order, deduplicated; decimal or ``0x`` hex accepted."""
    text = procs.strip_ansi(text)
    found: list[tuple[int, int]] = [(m.start(), int(m.group(1))) for m in _DECIMAL_ID.finditer(text)]
    found += [(m.start(), int(m.group(1), 16)) for m in _HEX_ID.finditer(text)]
    return list(dict.fromkeys(value for _pos, value in sorted(found)))


def _is_ours(pid: int, venv: Path) -> bool:
    """Pids get reused: only signal a process whose command line still names our venv."""
    return str(venv) in procs.cmdline(pid)


def _owner(venv: Path) -> Callable[[int], bool]:
    """Which processes a serving from ``venv`` may signal (see :func:`_is_ours`)."""
    return lambda pid: _is_ours(pid, venv)


@dataclass
class Serving:
    """The local processes standing in for one DGD's frontend and worker pods.

    ``port`` is where the pod's port 8000 should be forwarded: the fault proxy when a fault is
    set, else the frontend. ``pids`` lists every process we started (each leads its own process
    group); ``roles`` maps broker/frontend/mocker/proxy to them. The processes outlive this
    handle; another process finds them again with ``load_serving(workdir)`` or ``stop_all``.
    The handle that started them also collects their exit status, so call ``stop()`` on it
    rather than just dropping it (Python warns about a dropped child that still runs).
    """

    key: str
    served_model: str
    workdir: Path
    router_mode: str
    fault: str | None
    venv: Path
    frontend_port: int
    proxy_port: int | None
    roles: dict[str, int]
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)

    @property
    def port(self) -> int:
        return self.proxy_port if self.proxy_port is not None else self.frontend_port

    @property
    def pids(self) -> list[int]:
        return list(self.roles.values())

    @property
    def frontend_log(self) -> Path:
        return self.workdir / "frontend.log"

    @property
    def worker_log(self) -> Path:
        return self.workdir / "mocker.log"

    @property
    def sidecar_log(self) -> Path:
        return self.workdir / "sidecar.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        """True while every process of this serving is running."""
        # Poll every child (not just up to the first dead one) so exited ones are reaped.
        exited = [proc.pid for proc in self._procs.values() if proc.poll() is not None]
        return bool(self.roles) and not exited and all(procs.alive(pid) for pid in self.roles.values())

    def worker_instance_ids(self, timeout: float = 30.0) -> list[int]:
        """Decimal instance ids of the mocker workers, read from the logs (waits until one appears)."""

        def found() -> list[int] | None:
            ids = parse_instance_ids("".join(procs.read(p) for p in (self.worker_log, self.frontend_log)))
            if ids:
                return ids
            if not self.alive():
                raise WaitTimeout(f"a worker instance id in {self.worker_log}", timeout,
                                  last_state="a serving process exited")
            return None

        ids = procs.poll(found, timeout)
        if ids is None:
            raise WaitTimeout(f"a worker instance id in {self.worker_log}", timeout,
                              last_state=procs.tail(self.worker_log, 5))
        # What a gaie sidecar would print (it logs the id in hex); consumers must convert back.
        already = procs.read(self.sidecar_log)
        with self.sidecar_log.open("a") as out:
            for worker_id in ids:
                line = f"registered worker instance_id=0x{worker_id:x}"
                if line not in already:
                    out.write(f"{clock.iso_now()} {line} model={self.served_model}\n")
        return ids

    def worker_instance_id(self, timeout: float = 30.0) -> int:
        """The first worker's instance id, in decimal (what ``x-dynamo-worker-instance-id`` takes)."""
        return self.worker_instance_ids(timeout)[0]

    def wait_model_listed(self, timeout: float = 60.0) -> float:
        """Wait until the *frontend* lists the served model (the mocker registered); returns seconds."""
        started = clock.monotonic()
        url = f"http://127.0.0.1:{self.frontend_port}/v1/models"
        last = ["no answer"]
        with httpx.Client(timeout=5.0) as client:

            def listed() -> bool | None:
                try:
                    resp = client.get(url)
                    last[0] = f"HTTP {resp.status_code} {cut(resp.text, 300)}"
                    if resp.status_code == 200 and any(
                            m.get("id") == self.served_model for m in resp.json().get("data", [])):
                        return True
                except (httpx.HTTPError, ValueError) as exc:
                    last[0] = f"{type(exc).__name__}: {exc}"
                if not self.alive():
                    raise ClusterError(f"serving {self.key}: a process exited before {self.served_model} was "
                                       f"listed\n{procs.tail(self.worker_log)}")
                return None

            if procs.poll(listed, timeout):
                return clock.monotonic() - started
        raise WaitTimeout(f"{self.served_model} in {url}", timeout, last_state=last[0])

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory per role (whole process group), for the figures in the docs."""
        return {role: sum(procs.rss_bytes(p) for p in procs.group_members(pid)) for role, pid in self.roles.items()}

    def stop(self) -> None:
        """SIGTERM every process group, wait a bounded time, SIGKILL what is left."""

        def reap() -> None:
            for proc in self._procs.values():
                proc.poll()

        procs.terminate_groups(self.pids, _owner(self.venv), _STOP_GRACE_S, reap)
        for proc in self._procs.values():
            # Gone from /proc already, so this returns at once; it collects the exit status.
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=_STOP_GRACE_S)
        # Only our own record: a later serving of the same DGD may have written the file since.
        if set(_pids_from(self.workdir / "pids")[1]) <= set(self.pids):
            (self.workdir / "pids").unlink(missing_ok=True)


def _serving_env(env: DynamoEnv, workdir: Path, broker: dict[str, str]) -> dict[str, str]:
    # Inherited DYN_*/NATS/etcd settings would point the processes at some other control plane.
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DYN_", "NATS_", "ETCD_")) and k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    }
    loopback = "127.0.0.1"
    return {
        **base,
        **OFFLINE_ENV,
        "VIRTUAL_ENV": str(env.venv),
        "PATH": f"{env.venv / 'bin'}{os.pathsep}{base.get('PATH', '')}",
        "DYN_DISCOVERY_BACKEND": "file",
        "DYN_FILE_KV": str(workdir / "kv"),
        "DYN_HTTP_HOST": loopback,
        "DYN_HTTP_RPC_HOST": loopback,
        "DYN_TCP_RPC_HOST": loopback,
        "DYN_TCP_RESPONSE_STREAM_HOST": loopback,
        "DYN_EVENT_PLANE_HOST": loopback,
        "DYN_SYSTEM_HOST": loopback,
        "DYN_ZMQ_BROKER_URL": f"xsub={broker['xsub']},xpub={broker['xpub']}",
        # Self-hosted model cards would need a system port; shared storage is the file store.
        "DYN_SELF_HOST_METADATA": "0",
    }


def _wait_file(path: Path, proc: subprocess.Popen[bytes], role: str, log: Path, timeout: float) -> str:
    """Wait for a file a child writes atomically once it is listening (no port probing)."""

    def written() -> bool | None:
        if path.is_file():
            return True
        if proc.poll() is not None:
            raise ClusterError(f"{role} exited with {proc.returncode} before it was ready\n{procs.tail(log)}")
        return None

    if procs.poll(written, timeout, procs.POLL_S / 2) is None:
        raise WaitTimeout(f"{role} to write {path}", timeout, last_state=procs.tail(log, 5))
    return path.read_text()


def _wait_http(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> bool:
    """True once the frontend answers HTTP; False if it exited (the caller inspects the log)."""
    with httpx.Client(timeout=2.0) as client:

        def answered() -> bool | None:
            if proc.poll() is not None:
                return False
            try:
                client.get(f"http://127.0.0.1:{port}/health")
                return True
            except httpx.HTTPError:
                return None

        result = procs.poll(answered, timeout)
    if result is None:
        raise WaitTimeout(f"frontend HTTP on 127.0.0.1:{port}", timeout, last_state=procs.tail(log, 5))
    return result


def start_serving(
    key: str,
    served_model: str,
    workdir: Path,
    *,
    router_mode: str = "round-robin",
    env: DynamoEnv,
    fault: str | None = None,
    workers: int = 1,
) -> Serving:
    """Start a loopback-only ZMQ broker, a frontend, a mocker and (with ``fault``) the fault proxy.

    Returns once the frontend answers HTTP; the model is listed only after the mocker registers,
    which ``Serving.wait_model_listed`` awaits. Processes run in their own sessions, so they
    outlive the caller; ``<workdir>/pids`` lets ``stop_all`` find them later.
    """
    if router_mode not in ROUTER_MODES:
        raise InputError("router_mode", f"{router_mode!r} is not a Dynamo router mode", f"use one of {ROUTER_MODES}")
    if fault is not None and fault not in FAULTS:
        raise InputError("fault", f"{fault!r} is not a fault switch", f"use one of {FAULTS} or None")
    if workers < 1:
        raise InputError("workers", f"{workers} workers", "use 1 or more")
    workdir.mkdir(parents=True, exist_ok=True)
    workdir = workdir.resolve()
    live = [pid for pid in _pids_from(workdir / "pids")[1] if _is_ours(pid, env.venv) and procs.alive(pid)]
    if live:
        raise ClusterError(
            f"serving {key}: processes {live} from {workdir} are still running; "
            f"fix: stop them first (Serving.stop() or stop_all({workdir}))"
        )
    # A previous run's registrations in the file store would point the frontend at dead workers.
    shutil.rmtree(workdir / "kv", ignore_errors=True)
    for stale in ("zmq-broker.json", "proxy.port", "sidecar.log", "serving.json"):
        (workdir / stale).unlink(missing_ok=True)

    children: dict[str, subprocess.Popen[bytes]] = {}
    serving = Serving(key, served_model, workdir, router_mode, fault, env.venv, 0, None, {}, children)

    def spawn(role: str, argv: list[str], child_env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = workdir / f"{role}.log"
        children[role] = procs.spawn(argv, log, log, cwd=workdir, env=child_env, truncate=True)
        serving.roles[role] = children[role].pid
        # Written after every spawn so a crash mid-start still leaves every pid findable.
        procs.write_atomic(workdir / "pids", json.dumps({"venv": str(env.venv), "key": key, "pids": serving.roles},
                                                        indent=2))
        return children[role]

    python = str(env.python)
    try:
        broker_proc = spawn("broker", [python, "-c", _BROKER_SCRIPT, str(workdir / "zmq-broker.json")],
                            {**os.environ, "PYTHONPATH": ""})
        broker = json.loads(_wait_file(workdir / "zmq-broker.json", broker_proc, "broker", workdir / "broker.log",
                                       30.0))
        child_env = _serving_env(env, workdir, broker)
        spawn("mocker", [python, "-m", "dynamo.mocker", "--model-path", str(env.tokenizer_dir), "--model-name",
                         served_model, "--discovery-backend", "file", "--speedup-ratio", "100", "--num-workers",
                         str(workers)], child_env)
        for _attempt in range(3):
            port = procs.free_port()  # released before the frontend binds it: retried on a lost race
            frontend = spawn("frontend", [python, "-m", "dynamo.frontend", "--http-host", "127.0.0.1", "--http-port",
                                          str(port), "--router-mode", router_mode, "--discovery-backend", "file"],
                             child_env)
            if _wait_http(port, frontend, serving.frontend_log, _FRONTEND_UP_S):
                serving.frontend_port = port
                break
            if "in use" not in procs.read(serving.frontend_log).lower():
                raise ClusterError(
                    f"serving {key}: frontend exited with {frontend.returncode}\n{procs.tail(serving.frontend_log)}"
                )
        else:
            raise ClusterError(f"serving {key}: frontend lost the race for a free port three times")
        if fault is not None:
            proxy = spawn("proxy", [python, "-I", str(Path(__file__).with_name("faultproxy.py")), "--upstream-port",
                                    str(serving.frontend_port), "--fault", fault, "--port-file",
                                    str(workdir / "proxy.port")], child_env)
            serving.proxy_port = int(_wait_file(workdir / "proxy.port", proxy, "proxy", workdir / "proxy.log", 30.0))
    except BaseException:
        serving.stop()
        raise
    procs.write_atomic(workdir / "serving.json", json.dumps({
        "key": key, "served_model": served_model, "router_mode": router_mode, "fault": fault, "venv": str(env.venv),
        "frontend_port": serving.frontend_port, "proxy_port": serving.proxy_port, "roles": serving.roles,
    }, indent=2))
    return serving


def load_serving(workdir: Path) -> Serving:
    """Rebuild the handle of a serving started by another process (e.g. an earlier `cluster up`)."""
    try:
        data = json.loads((workdir / "serving.json").read_text())
    except (OSError, ValueError) as exc:
        raise ClusterError(f"no serving state in {workdir}: {exc}") from exc
    return Serving(data["key"], data["served_model"], workdir.resolve(), data["router_mode"], data["fault"],
                   Path(data["venv"]), int(data["frontend_port"]), data["proxy_port"],
                   {str(k): int(v) for k, v in data["roles"].items()})


def _pids_from(path: Path) -> tuple[Path | None, list[int]]:
    try:
        data = json.loads(path.read_text())
        return Path(data["venv"]), [int(p) for p in data["pids"].values()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None, []


def stop_all(root: Path) -> list[int]:
    """Kill every serving whose ``pids`` file lies under ``root``; returns the process groups stopped.

    Only processes whose command line still names the Dynamo venv recorded in the pid file are
    signalled, so a recycled pid never takes an unrelated process down.
    """
    stopped: list[int] = []
    for pid_file in sorted(root.rglob("pids")):
        venv, pids = _pids_from(pid_file)
        # A venv path outside our cache layout means the file is not ours: ignore it.
        if venv is None or "dynamo-venv" not in venv.parts:
            continue
        stopped += procs.terminate_groups(pids, _owner(venv), _STOP_GRACE_S)
        pid_file.unlink(missing_ok=True)
    return stopped
