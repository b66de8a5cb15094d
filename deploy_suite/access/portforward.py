"""``kubectl port-forward`` as an owned child process (started by :meth:`deploy_suite.access.kube.Kube.port_forward`).

The smoke test reaches the deployment through it; the child listens on 127.0.0.1 only and never
outlives the harness (see :func:`parent_death_signal`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable

from deploy_suite import clock
from deploy_suite.errors import WaitTimeout

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when the harness dies (Linux only).

    ``stop()`` always ends the port-forward, but a harness killed with SIGKILL (OOM killer, CI
    timeout, a person) runs no cleanup: kubectl, in its own session, would live on forever holding
    a local port and a stream through the apiserver. The kernel's parent-death signal ends it. The
    function only calls prctl (libc is loaded here, in the parent, not in the forked child).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the harness died before prctl took effect
            os._exit(1)

    return preexec


class PortForward:
    """A ``kubectl port-forward`` child process; learns its local port from kubectl's first line.

    The child is tied to the life of the thread that starts it (the kernel's parent-death signal
    follows the creating thread): start it from the thread that owns the smoke test.
    """

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True, preexec_fn=parent_death_signal())  # noqa: PLW1509
        self.local_port: int | None = None
        self.output: list[str] = []
        self._reader: threading.Thread | None = None

    def wait_ready(self, timeout: float) -> int:
        """Read kubectl's output until it prints 'Forwarding from 127.0.0.1:<port>'."""
        done = threading.Event()

        def reader() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line.rstrip())
                if self.local_port is None and "Forwarding from 127.0.0.1:" in line:
                    self.local_port = int(line.split("127.0.0.1:")[1].split()[0])
                    done.set()
            done.set()

        self._reader = threading.Thread(target=reader, daemon=True)
        self._reader.start()
        clock.wait_event(done, timeout)
        if self.local_port is None:
            self.stop()
            raise WaitTimeout("kubectl port-forward to listen", timeout,
                              " | ".join(self.output[-3:]) or "no output")
        return self.local_port

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        if self._reader is not None:
            self._reader.join(5)  # EOF after the process exits
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> PortForward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
