"""The kind provider's ``down`` leaves no host process of its cluster running (issue 30, item 6).

The host side only, with real processes: the webhook relay started as ``up`` starts it, a daemon
standing in for the controllers process that starts a helper in a session of its own (recorded in
no pid file), and one whose pid file was lost. Docker and kind are not touched: ``down`` finds no
node container and no kind binary here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from deploy_suite_offline import procs
from deploy_suite_offline.cluster import CONTROLLERS
from deploy_suite_offline.kind import docker, provider, tools
from deploy_suite_offline.kind.provider import RELAY, KindProvider
from tests.support.processes import of_cluster

_DAEMON = """
import subprocess, sys, time
from pathlib import Path
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
Path(sys.argv[1]).write_text(str(helper.pid))
time.sleep(60)
"""


@pytest.fixture
def kind_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> KindProvider:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(docker, "containers", lambda _label: [])
    monkeypatch.setattr(docker, "run", lambda *_a, **_k: "")
    monkeypatch.setattr(docker, "exec_in", lambda *_a, **_k: "")  # the socat unit inside the node
    monkeypatch.setattr(tools, "kind_dir", lambda: tmp_path / "no-kind")
    kind = KindProvider("downtest", log=lambda _m: None)
    kind._write_marker(kubeconfig=str(tmp_path / "kc.yaml"), webhook_port=procs.free_port())
    return kind


def test_down_ends_every_host_process_the_kind_cluster_started(kind_host: KindProvider, tmp_path: Path) -> None:
    root = kind_host.dir
    kind_host._start_relay("127.0.0.1")  # as `up` starts it, on this machine's loopback here
    helper_pid = tmp_path / "helper.pid"
    kind_host._spawn(CONTROLLERS, [sys.executable, "-c", _DAEMON, str(helper_pid), str(root)])
    kind_host._spawn("lost", [sys.executable, "-c", "import time; time.sleep(60)", str(root)])
    (root / "pids" / "lost.pid").unlink()  # a record lost: only the mark still names it
    helper = procs.poll(lambda: int(helper_pid.read_text()) if helper_pid.is_file() else None, 10)
    assert helper is not None
    started = procs.marked(kind_host.mark)
    assert {RELAY, CONTROLLERS} <= set(kind_host.pids())
    assert helper in started and len(started) == 4  # relay, daemon, its helper, the unrecorded one
    assert provider.exists("downtest")
    kind_host.down()
    assert of_cluster(root) == []
    assert not any(procs.alive(p) for p in started)
    assert not root.exists()


def test_down_of_a_cluster_already_removed_still_ends_what_carries_its_mark(kind_host: KindProvider,
                                                                           tmp_path: Path) -> None:
    kind_host.down()
    straggler = procs.spawn([sys.executable, "-c", "import time; time.sleep(60)"], None, None, cwd=tmp_path,
                            mark=kind_host.mark)  # what an earlier `down` missed
    try:
        assert procs.marked(kind_host.mark) == [straggler.pid]
        kind_host.down()
        assert straggler.wait(10) == -15
    finally:
        straggler.kill()
        straggler.wait()
