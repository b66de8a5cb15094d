"""The offline cluster's host processes: start, watch, stop, and read their log files.

Every process of the offline cluster goes through here: kwokctl's control-plane components
(restarted by ``restart.py``), the controllers process (``cluster.py``), the Dynamo frontend,
mocker, broker and fault proxy of each DGD (``dynamo_runtime.py``) and the one-off helpers that
build things (kwokctl, ``go build``, pip). Long-lived processes run in their own session, so they
outlive the caller (``cluster up`` returns while the cluster runs) and are stopped as a group;
one-off helpers can be tied to the caller with the kernel's parent-death signal instead.

Every process a cluster starts carries the cluster's mark: the environment variable
``DEPLOY_SUITE_CLUSTER`` set to the cluster's directory (:func:`spawn` and :func:`run` add the mark
given, else the caller's own, so the controllers process passes its mark on to every Dynamo
process it starts, and those to theirs). ``down`` ends every live process carrying its mark
(:func:`end_cluster`), whatever pid file was lost or overwritten on the way.

Pids get reused: nothing here signals a process the caller has not identified as its own (by
command line or mark) first. Reads of ``/proc`` are Linux-only, like the offline cluster itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import select
import signal
import socket
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from deploy_suite import clock

# The kernel's parent-death signal, as the smoke test's port-forward uses it (one implementation).
from deploy_suite.access.portforward import parent_death_signal as die_with_parent
from deploy_suite_offline.errors import ClusterError

# Local processes answer in milliseconds: poll them often, with a cap for backoffs.
POLL_S = 0.1
# The environment variable marking a cluster's processes; its value is the cluster's directory.
MARK = "DEPLOY_SUITE_CLUSTER"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_T = TypeVar("_T")
# Where a cluster's lines of progress go (a terminal, a test's output), one line a call: every
# builder and controller of the offline clusters takes one.
Log = Callable[[str], None]


# --------------------------------------------------------------------------- /proc


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, process group) of ``pid``, or None when it does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[2])


def _live_state(pid: int, state: str) -> bool:
    # A multithreaded process whose main thread exited shows "Z" while other threads still run
    # (and it cannot be reaped yet): it only counts as gone once it is down to that one task.
    if state not in ("Z", "X"):
        return True
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False


def alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie is dead for our purposes."""
    stat = _stat(pid)
    return stat is not None and _live_state(pid, stat[0])


def cmdline(pid: int) -> str:
    """The command line of ``pid``, arguments joined by spaces ("" when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def group_members(pgid: int) -> list[int]:
    """Live processes of process group ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            pid = int(entry.name)
            stat = _stat(pid)
            if stat is not None and stat[1] == pgid and _live_state(pid, stat[0]):
                members.append(pid)
    return members


def mark_of(pid: int) -> str | None:
    """The cluster mark in the environment ``pid`` was started with (None: none, gone, or not ours
    to read)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    prefix = f"{MARK}=".encode()
    for item in environ.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode(errors="replace")
    return None


def marked(mark: str) -> list[int]:
    """Live processes started with cluster mark ``mark`` (never this process itself)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            pid = int(entry.name)
            if mark_of(pid) == mark and alive(pid):
                found.append(pid)
    return sorted(found)


def marked_env(env: Mapping[str, str] | None, mark: str | None) -> dict[str, str]:
    """``env`` (default: this process's) carrying ``mark``, else the one ``env`` has, else the
    caller's own mark if it has one."""
    out = dict(os.environ if env is None else env)
    tag = mark or out.get(MARK) or os.environ.get(MARK)
    if tag:
        out[MARK] = tag
    return out


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


# --------------------------------------------------------------------------- waiting


def poll(check: Callable[[], _T | None], timeout: float, interval: float = POLL_S,
         cap: float | None = None) -> _T | None:
    """Call ``check`` until it returns something other than None, at most ``timeout`` seconds.

    For local state that offers nothing to watch (a file appearing, a port answering, a process
    group emptying). ``cap`` doubles the interval after each try up to that value. Returns None
    when time ran out; ``check`` may raise to stop early.
    """
    deadline = clock.monotonic() + timeout
    delay = interval
    while True:
        result = check()
        if result is not None:
            return result
        remaining = deadline - clock.monotonic()
        if remaining <= 0:
            return None
        clock.sleep(min(delay, remaining))
        if cap is not None:
            delay = min(delay * 2, cap)


def wait_exit(pid: int, timeout: float) -> bool:
    """Wait for any process (not only a child) to exit, by its pidfd: an event, not a poll."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        return bool(ready) or not alive(pid)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- stopping


def kill(pid: int, sig: signal.Signals) -> None:
    """Signal one process; one that is already gone is fine."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def terminate(pids: Sequence[int], grace: float = 10.0) -> None:
    """SIGTERM each process, SIGKILL those still running after ``grace`` seconds (shared)."""
    for pid in pids:
        kill(pid, signal.SIGTERM)
    deadline = clock.monotonic() + grace
    for pid in pids:
        if not wait_exit(pid, max(0.0, deadline - clock.monotonic())):
            kill(pid, signal.SIGKILL)
            wait_exit(pid, 5.0)


def terminate_groups(pgids: Sequence[int], owned: Callable[[int], bool], grace: float = 10.0,
                     reap: Callable[[], None] = lambda: None) -> list[int]:
    """SIGTERM each process group led by one of ``pgids`` that holds a process ``owned`` accepts,
    SIGKILL what outlives ``grace``; returns the groups signalled. ``reap`` collects the exit
    status of children the caller started (called while waiting)."""
    # Judged by the members, not only the leader: a crashed leader can leave its children running.
    groups = [pgid for pgid in pgids if any(owned(m) for m in group_members(pgid))]

    def signal_and_wait(sig: signal.Signals) -> bool:
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)

        def empty() -> bool | None:
            reap()  # the leaders may have become zombies after the last reap
            return True if not any(group_members(pgid) for pgid in groups) else None

        return poll(empty, grace) is not None

    if not signal_and_wait(signal.SIGTERM):
        signal_and_wait(signal.SIGKILL)
    reap()
    return groups


def end_marked(mark: str, grace: float = 10.0, rounds: int = 3) -> list[int]:
    """End every process carrying cluster mark ``mark``: SIGTERM, SIGKILL what outlives ``grace``
    (waits on each process's exit, an event), then look again, since a process being stopped can
    start another; at most ``rounds`` times. Returns the marked processes still running (none,
    unless one cannot be killed)."""
    for _ in range(rounds):
        found = marked(mark)
        if not found:
            return []
        terminate(found, grace)
    return marked(mark)


def end_cluster(name: str, mark: str, log: Callable[[str], None]) -> None:
    """``down``'s last sweep (either provider): end every process still carrying cluster ``name``'s
    mark, whichever pid file lost it, and verify none remains (else fail, leaving the state)."""
    stray = marked(mark)
    if stray:  # none when every pid file was kept: name what one lost
        log(f"cluster {name}: stopping {len(stray)} process(es) no pid file named: {_named(stray)}")
    left = end_marked(mark) if stray else []
    if left:
        raise ClusterError(f"cluster {name}: processes still run after SIGKILL: {_named(left)}; fix: end them "
                           f"yourself, then run `deploy-suite cluster down --name {name}` again")


def _named(pids: Sequence[int]) -> str:
    """``pid <n>: <command line>`` each on one line, a long one cut in its middle (scripts given
    with ``-c`` are long; the arguments that say what it serves come last)."""
    shown = []
    for pid in pids:
        cmd = " ".join(cmdline(pid).split())
        shown.append(f"pid {pid}: {cmd if len(cmd) <= 160 else cmd[:80] + ' ... ' + cmd[-70:]}")
    return "; ".join(shown)


# --------------------------------------------------------------------------- starting


def spawn(argv: Sequence[str], stdout: Path | None, stderr: Path | None, *, cwd: Path | str | None = None,
          env: Mapping[str, str] | None = None, truncate: bool = False,
          mark: str | None = None) -> subprocess.Popen[bytes]:
    """Start a long-lived process in its own session (it outlives the caller; stop it as a group).

    Its output goes to ``stdout`` and ``stderr`` (one file when they are the same path, appended
    unless ``truncate``; None is /dev/null); stdin is /dev/null. It carries cluster mark ``mark``,
    else the caller's own (see :func:`marked_env`).
    """
    mode = "wb" if truncate else "ab"
    with contextlib.ExitStack() as stack:
        out: IO[bytes] | int = stack.enter_context(stdout.open(mode)) if stdout else subprocess.DEVNULL
        err: IO[bytes] | int = out
        if stderr is None:
            err = subprocess.DEVNULL
        elif stderr != stdout:
            err = stack.enter_context(stderr.open(mode))
        return subprocess.Popen(list(argv), cwd=cwd, env=marked_env(env, mark),
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True)


def detach(proc: subprocess.Popen[Any]) -> int:
    """Give up a daemon started with :func:`spawn` (stopped later by pid); returns its pid."""
    # Marking it reaped keeps Popen from warning, when the handle goes away, that it still runs.
    proc.returncode = 0
    return proc.pid


@dataclass(frozen=True)
class Finished:
    """A one-off helper's exit status and what it printed (when not sent to a file)."""

    returncode: int
    output: str  # stdout, and stderr too unless it was asked for apart
    errors: str = ""


def run(argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | str | None = None,
        output: Path | None = None, split: bool = False, tied: bool = False,
        heartbeat: Callable[[], None] | None = None, every: float = 30.0) -> Finished:
    """Run a one-off helper to its end.

    Its output is appended to ``output`` or returned (stderr apart when ``split``). ``tied`` gives
    it the parent-death signal: a ``cluster up`` killed with SIGKILL runs no cleanup, and the
    kwokctl or ``go build`` it started would run on. (The calling thread waits here, so it cannot
    end before the helper does; the controllers process, busy with many threads, does not ask for
    it, since a ``preexec_fn`` runs between fork and exec.) ``heartbeat`` is called every
    ``every`` seconds while it runs (a long build says it is alive). It carries the mark ``env``
    holds, else the caller's own (kwokctl's components inherit the one ``cluster.py`` gives it).
    """
    with contextlib.ExitStack() as stack:
        out: IO[bytes] = stack.enter_context(_sink(output))
        err: IO[bytes] | int = stack.enter_context(_sink(None)) if split else subprocess.STDOUT
        proc = subprocess.Popen(list(argv), cwd=cwd, env=marked_env(env, None), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err, preexec_fn=die_with_parent() if tied else None)  # noqa: PLW1509
        done = threading.Event()
        if heartbeat is not None:
            def beat() -> None:
                while not clock.wait_event(done, every):
                    heartbeat()

            threading.Thread(target=beat, daemon=True, name="procs/heartbeat").start()
        try:
            rc = proc.wait()
        finally:
            done.set()
        return Finished(rc, "" if output else _read_back(out), _read_back(err) if split else "")


def _sink(path: Path | None) -> IO[bytes]:
    """Where a helper's output goes: appended to ``path``, else a temporary file read back later."""
    return path.open("ab") if path is not None else tempfile.TemporaryFile()  # closed by the caller


def _read_back(handle: IO[bytes] | int) -> str:
    assert not isinstance(handle, int)
    handle.seek(0)
    return handle.read().decode(errors="replace")


# --------------------------------------------------------------------------- files and ports


def read(path: Path) -> str:
    """A log file's text ("" when it does not exist yet)."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def strip_ansi(text: str) -> str:
    """Text without terminal colour codes (what a runtime with no TTY would see)."""
    return _ANSI.sub("", text)


def tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a log file, colour codes stripped."""
    try:
        return strip_ansi("\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
    except OSError:
        return "(no log)"


def write_atomic(path: Path, text: str, mode: int | None = None) -> None:
    """Replace ``path`` in one step: a reader sees the old content or the new, never half."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    if mode is not None:
        tmp.chmod(mode)
    tmp.replace(path)


def port_free(port: int) -> bool:
    """Whether ``port`` on 127.0.0.1 can be bound right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port on 127.0.0.1 free right now; it is released before the caller binds it (a race the
    caller handles by retrying)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])



@contextlib.contextmanager
def file_lock(path: Path, waiting: Callable[[], None] | None = None) -> Iterator[None]:
    """An exclusive flock on ``path``, so two processes never build the same thing at once;
    ``waiting`` is called once when another process holds it (to say why we stand still)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting is not None:
                waiting()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
