"""The operator replica's servings: one DGD's starts and stops never overlap (issue 30, item 6).

A DGD replaced or deleted while its serving starts once had its start run beside the stop of the
next, both writing and removing the one pid file of the DGD's directory, so a serving's processes
could be left unrecorded and outlive ``cluster down``. The Dynamo processes are stand-ins here
that count how many starts and stops of the DGD are in progress at once.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from deploy_suite_offline import dynamo_runtime, procs
from deploy_suite_offline.operator_sim.serving import Servings

KEY = "ns/alpha-agg"


@dataclass
class Busy:
    """How many starts/stops of the DGD run at once (at most one, else they race)."""

    now: int = 0
    most: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def during(self, seconds: float) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(seconds)  # real threads: the window in which another start or stop would overlap
        with self.lock:
            self.now -= 1


@dataclass
class StandIn:
    model: str
    busy: Busy
    stopped: bool = False
    port: int = 1

    def wait_model_listed(self, _timeout: float) -> float:
        return 0.0

    def worker_instance_ids(self) -> list[int]:
        return [1]

    def alive(self) -> bool:
        return not self.stopped

    def stop(self) -> None:
        self.busy.during(0.05)
        self.stopped = True


def _plan(model: str) -> Any:
    return SimpleNamespace(key=KEY, serves=True, signature=(model, "round-robin"), served_model=model,
                           router_mode="round-robin")


def _servings(tmp_path: Path) -> Servings:
    kube = SimpleNamespace(get_or_none=lambda *_a: None)  # no serving fault configured
    servings = Servings(kube, tmp_path, lambda _m: None, lambda _k: None)  # type: ignore[arg-type]
    servings._env = SimpleNamespace()  # type: ignore[assignment]  # the Dynamo environment is built
    servings._env_ready.set()
    return servings


def test_starts_and_stops_of_one_dgd_never_overlap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    busy = Busy()
    started: list[StandIn] = []

    def start_serving(_key: str, model: str, _workdir: Path, **_kw: Any) -> StandIn:
        busy.during(0.2)
        started.append(StandIn(model, busy))
        return started[-1]

    monkeypatch.setattr(dynamo_runtime, "start_serving", start_serving)
    def stop_all(_root: Path) -> list[int]:
        busy.during(0.05)
        return []

    monkeypatch.setattr(dynamo_runtime, "stop_all", stop_all)
    servings = _servings(tmp_path)
    servings.ensure(_plan("qwen3-alpha-agg"))
    time.sleep(0.05)  # the agg's serving is starting ...
    servings.ensure(_plan("r1-distill"))  # ... when a disagg DGD of the same name replaces it
    time.sleep(0.05)
    servings.forget(KEY)  # deleted, and at once created again (a run's step 3 then step 5)
    servings.ensure(_plan("r1-distill"))

    def settled() -> bool | None:
        st = servings._states.get(KEY)
        return True if st is not None and st.state == "ready" and busy.now == 0 else None

    assert procs.poll(settled, 10), [(s.model, s.stopped) for s in started]
    time.sleep(0.3)  # a late stop would show now
    assert busy.most == 1
    final: Any = servings._states[KEY].serving
    assert final is not None and not final.stopped and final.model == "r1-distill"
    assert all(s.stopped for s in started if s is not final)


def test_a_serving_that_never_gets_ready_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in = StandIn("m", Busy())

    def never_listed(_timeout: float) -> float:
        raise TimeoutError("m never listed")

    stand_in.wait_model_listed = never_listed  # type: ignore[method-assign]
    monkeypatch.setattr(dynamo_runtime, "start_serving", lambda *_a, **_k: stand_in)
    monkeypatch.setattr(dynamo_runtime, "stop_all", lambda _root: [])
    servings = _servings(tmp_path)
    servings.ensure(_plan("m"))
    assert procs.poll(lambda: True if servings._states[KEY].state == "failed" else None, 10)
    assert stand_in.stopped


def test_a_stop_leaves_a_newer_servings_pid_file_alone(tmp_path: Path) -> None:
    old = dynamo_runtime.Serving(KEY, "m", tmp_path, "round-robin", None, tmp_path / "dynamo-venv", 0, None,
                                 {"broker": 2**22 + 1})  # gone: nothing to signal
    (tmp_path / "pids").write_text(json.dumps({"venv": str(old.venv), "key": KEY, "pids": {"broker": 2**22 + 2}}))
    old.stop()
    assert (tmp_path / "pids").is_file()  # the newer serving's record stays
    (tmp_path / "pids").write_text(json.dumps({"venv": str(old.venv), "key": KEY, "pids": old.roles}))
    old.stop()
    assert not (tmp_path / "pids").exists()

