"""The offline cluster's process helpers: polling on the fake clock, real short-lived children."""

from __future__ import annotations

import fcntl
import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deploy_suite import clock
from deploy_suite_offline import procs


@pytest.fixture
def fake_clock(request: pytest.FixtureRequest) -> clock.FakeClock:
    fake = clock.FakeClock()
    request.addfinalizer(functools.partial(clock.install, clock.install(fake)))  # the real clock comes back
    return fake


def test_poll_returns_the_first_answer_and_backs_off_up_to_the_cap(fake_clock: clock.FakeClock) -> None:
    answers = iter([None, None, None, None, "up"])
    assert procs.poll(lambda: next(answers), timeout=10, interval=0.1, cap=0.3) == "up"
    assert fake_clock.slept == pytest.approx([0.1, 0.2, 0.3, 0.3])


def test_poll_gives_up_at_its_bound_without_sleeping_past_it(fake_clock: clock.FakeClock) -> None:
    started = fake_clock.monotonic()
    assert procs.poll(lambda: None, timeout=1.0, interval=0.3) is None
    assert fake_clock.monotonic() - started == pytest.approx(1.0)
    assert fake_clock.slept[-1] == pytest.approx(0.1)  # the last sleep is cut to what is left


def _sleeper(tmp_path: Path, script: str = "import time; print('started', flush=True); time.sleep(30)",
             ) -> subprocess.Popen[bytes]:
    log = tmp_path / "child.log"
    return procs.spawn([sys.executable, "-c", script], log, log, cwd=tmp_path)


def test_a_spawned_process_runs_in_its_own_session_and_terminate_ends_it(tmp_path: Path) -> None:
    proc = _sleeper(tmp_path)
    try:
        assert procs.poll(lambda: True if "started" in procs.read(tmp_path / "child.log") else None, 10)
        assert procs.alive(proc.pid)
        assert "time.sleep(30)" in procs.cmdline(proc.pid)
        assert os.getpgid(proc.pid) == proc.pid != os.getpgid(0)
        procs.terminate([proc.pid], grace=5)
        assert procs.wait_exit(proc.pid, 5)
        assert proc.wait(5) == -15  # SIGTERM was enough
    finally:
        proc.kill()
        proc.wait()
    assert not procs.alive(proc.pid)


def test_terminate_groups_signals_only_groups_holding_a_process_of_ours(tmp_path: Path) -> None:
    # A leader with a child in the same group: both must go.
    script = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); " \
             "time.sleep(30)"
    proc = _sleeper(tmp_path, script)
    try:
        assert procs.poll(lambda: True if len(procs.group_members(proc.pid)) == 2 else None, 10)
        assert procs.terminate_groups([proc.pid], owned=lambda _pid: False, grace=1, reap=proc.poll) == []
        assert len(procs.group_members(proc.pid)) == 2  # not ours: untouched
        owned = procs.terminate_groups([proc.pid], owned=lambda pid: sys.executable in procs.cmdline(pid), grace=5,
                                       reap=proc.poll)
        assert owned == [proc.pid]
        assert procs.group_members(proc.pid) == []
    finally:
        proc.kill()
        proc.wait()


def test_run_returns_the_exit_status_and_the_output(tmp_path: Path) -> None:
    script = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    merged = procs.run([sys.executable, "-c", script])
    assert merged.returncode == 3
    assert sorted(merged.output.split()) == ["err", "out"]
    split = procs.run([sys.executable, "-c", script], split=True)
    assert (split.output, split.errors) == ("out\n", "err\n")
    log = tmp_path / "install.log"
    log.write_text("before\n")
    assert procs.run([sys.executable, "-c", "print('appended')"], output=log, tied=True).output == ""
    assert log.read_text() == "before\nappended\n"


def test_run_calls_the_heartbeat_while_the_helper_runs() -> None:
    beats: list[int] = []
    procs.run([sys.executable, "-c", "import time; time.sleep(0.5)"], heartbeat=lambda: beats.append(1), every=0.05)
    assert len(beats) >= 2


def test_files_are_replaced_atomically_and_tails_lose_colour_codes(tmp_path: Path) -> None:
    target = tmp_path / "kubeconfig"
    procs.write_atomic(target, "secret: 1\n", mode=0o600)
    assert target.read_text() == "secret: 1\n"
    assert target.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["kubeconfig"]  # no temporary file left
    log = tmp_path / "frontend.log"
    log.write_text("one\n\x1b[32mtwo\x1b[0m\nthree\n")
    assert procs.tail(log, 2) == "two\nthree"
    assert procs.tail(tmp_path / "missing.log") == "(no log)"
    assert procs.read(tmp_path / "missing.log") == ""


def test_a_held_file_lock_makes_the_next_holder_say_it_waits(tmp_path: Path) -> None:
    lock = tmp_path / "build.lock"
    said: list[str] = []
    with lock.open("a") as other:
        fcntl.flock(other, fcntl.LOCK_EX)  # another process building

        def waiting() -> None:
            said.append("waiting")
            fcntl.flock(other, fcntl.LOCK_UN)  # ... which finishes now

        with procs.file_lock(lock, waiting):
            said.append("locked")
    assert said == ["waiting", "locked"]
    with procs.file_lock(lock, lambda: said.append("unexpected")):
        pass
    assert said == ["waiting", "locked"]


def test_ports() -> None:
    port = procs.free_port()
    assert procs.port_free(port)


# A daemon that starts a helper in a session of its own (recorded nowhere, as a serving's broker
# was once), and a helper that ignores SIGTERM; each writes its pid, then sleeps.
_ESCAPER = """
import signal, subprocess, sys, time
from pathlib import Path
here = Path(sys.argv[1])
stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
for name, code in (("detached", "import time; time.sleep(60)"), ("stubborn", stubborn)):
    child = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    (here / f"{name}.pid").write_text(str(child.pid))
time.sleep(60)
"""


def test_a_mark_passes_to_every_descendant_and_end_marked_ends_them_all(tmp_path: Path) -> None:
    mark = f"{tmp_path}/cluster"
    daemon = procs.spawn([sys.executable, "-c", _ESCAPER, str(tmp_path)], None, None, cwd=tmp_path, mark=mark)
    bystander = _sleeper(tmp_path)  # not marked: never touched
    try:
        pids = procs.poll(lambda: [int((tmp_path / f"{n}.pid").read_text()) for n in ("detached", "stubborn")]
                          if (tmp_path / "stubborn.pid").is_file() else None, 10)
        assert pids is not None
        everyone = sorted([daemon.pid, *pids])
        assert procs.poll(lambda: True if procs.marked(mark) == everyone else None, 10), procs.marked(mark)
        assert procs.mark_of(pids[0]) == mark and procs.mark_of(bystander.pid) is None
        assert procs.marked(f"{mark}-other") == []
        assert procs.end_marked(mark, grace=0.5) == []
        assert not any(procs.alive(p) for p in everyone)
        assert procs.alive(bystander.pid)
    finally:
        for proc in (daemon, bystander):
            proc.kill()
            proc.wait()


def test_an_explicit_environment_keeps_a_mark_it_has_unless_one_is_given() -> None:
    assert procs.marked_env({"A": "1"}, "x") == {"A": "1", procs.MARK: "x"}
    assert procs.marked_env({procs.MARK: "y"}, None) == {procs.MARK: "y"}
    assert procs.marked_env({procs.MARK: "y"}, "x") == {procs.MARK: "x"}
