"""A real Dynamo frontend + mocker per DGD, as the offline cluster runs them.

Builds (once, cached) the Dynamo venv: this must not be skipped in CI, it is what makes the
offline cluster answer the OpenAI smoke test. Everything listens on loopback only.
"""

from __future__ import annotations

import ipaddress
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from deploy_suite_offline import faultproxy
from deploy_suite_offline.dynamo_env import DynamoEnv, ensure_dynamo_env
from deploy_suite_offline.dynamo_runtime import Serving, load_serving, parse_instance_ids, start_serving, stop_all
from deploy_suite_offline.errors import ClusterError

pytestmark = pytest.mark.slow

MODEL = "demo-model"
SMOKE_BODY = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "Simply output the phrase: NVIDIA Dynamo"}],
    "max_tokens": 100,
    "temperature": 0,
}
HEADER = "x-dynamo-worker-instance-id"
LISTED_TIMEOUT_S = 60.0


@pytest.fixture(scope="session")
def dynamo_env() -> DynamoEnv:
    started = time.monotonic()
    env = ensure_dynamo_env(log=lambda line: print(line, flush=True))
    print(f"dynamo env ready in {time.monotonic() - started:.1f}s: {env}")
    return env


@pytest.fixture(scope="session")
def serving_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("servings")
    yield root
    stop_all(root)  # safety net: a failed test must not leave processes behind


def wait_listed(base_url: str, model: str = MODEL, timeout: float = LISTED_TIMEOUT_S) -> dict[str, Any]:
    """Poll /v1/models until ``model`` is listed (bounded, short interval)."""
    deadline = time.monotonic() + timeout
    last: object = None
    with httpx.Client(timeout=5.0) as client:
        while time.monotonic() < deadline:
            try:
                resp = client.get(f"{base_url}/v1/models")
                last = resp.status_code, resp.text
                if resp.status_code == 200 and any(m["id"] == model for m in resp.json()["data"]):
                    return resp.json()  # type: ignore[no-any-return]
            except httpx.HTTPError as exc:
                last = exc
            time.sleep(0.1)
    pytest.fail(f"{model} not listed at {base_url} within {timeout}s; last: {last!r}")


def serve(env: DynamoEnv, root: Path, name: str, **kwargs: object) -> Serving:
    return start_serving(f"ns/{name}", MODEL, root / "ns" / name, env=env, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def round_robin(dynamo_env: DynamoEnv, serving_root: Path) -> Iterator[Serving]:
    started = time.monotonic()
    serving = serve(dynamo_env, serving_root, "rr")
    wait_listed(f"http://127.0.0.1:{serving.port}")
    print(f"warm start to model listed: {time.monotonic() - started:.2f}s; rss: {serving.rss_bytes()}")
    yield serving
    serving.stop()


@pytest.fixture(scope="module")
def direct(dynamo_env: DynamoEnv, serving_root: Path) -> Iterator[Serving]:
    serving = serve(dynamo_env, serving_root, "direct", router_mode="direct")
    wait_listed(f"http://127.0.0.1:{serving.port}")
    yield serving
    serving.stop()


# ------------------------------------------------------------------ environment


def test_env_is_reused_when_complete(dynamo_env: DynamoEnv) -> None:
    started = time.monotonic()
    again = ensure_dynamo_env(dynamo_env.version, log=lambda _line: None)
    assert time.monotonic() - started < 5
    assert again.venv == dynamo_env.venv
    assert again.python.is_file()
    tok = dynamo_env.tokenizer_dir
    assert {"config.json", "tokenizer.json", "tokenizer_config.json"} <= {p.name for p in tok.iterdir()}
    assert json.loads((tok / "tokenizer_config.json").read_text())["chat_template"]


def test_a_failing_pip_step_is_a_cluster_error_naming_the_step(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"step 'pip install --no-deps ai-dynamo==0\.0\.0rc999.*fix:"):
        ensure_dynamo_env("0.0.0rc999", cache_root=tmp_path, log=lambda _line: None)
    # Without a marker the half-built venv is not mistaken for a complete one next time.
    assert not (tmp_path / "dynamo-venv" / "0.0.0rc999" / ".deploy-suite-complete").exists()


# ------------------------------------------------------------------ serving


def test_the_model_is_listed_once_the_mocker_registered(round_robin: Serving) -> None:
    models = wait_listed(round_robin.url)
    assert [m["id"] for m in models["data"]] == [MODEL]
    assert round_robin.port == round_robin.frontend_port  # no fault: no proxy
    assert round_robin.alive()


def test_the_smoke_chat_completion_succeeds(round_robin: Serving) -> None:
    resp = httpx.post(f"{round_robin.url}/v1/chat/completions", json=SMOKE_BODY, timeout=30)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["object"] == "chat.completion"
    assert body["choices"]


def test_a_handle_can_be_rebuilt_from_the_workdir(round_robin: Serving) -> None:
    loaded = load_serving(round_robin.workdir)
    assert loaded.port == round_robin.port
    assert loaded.pids == round_robin.pids
    assert loaded.alive()


def test_direct_routing_needs_the_worker_instance_header(direct: Serving) -> None:
    resp = httpx.post(f"{direct.url}/v1/chat/completions", json=SMOKE_BODY, timeout=30)
    assert resp.status_code == 400, resp.text

    worker_id = direct.worker_instance_id()
    resp = httpx.post(
        f"{direct.url}/v1/chat/completions", json=SMOKE_BODY, headers={HEADER: str(worker_id)}, timeout=30
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["object"] == "chat.completion"


def test_the_sidecar_log_carries_the_same_id_in_hex(direct: Serving) -> None:
    worker_id = direct.worker_instance_id()
    assert worker_id == parse_instance_ids(direct.worker_log.read_text())[0]
    line = direct.sidecar_log.read_text()
    assert f"registered worker instance_id=0x{worker_id:x}" in line
    hex_text = line.split("instance_id=0x", 1)[1].split()[0]
    assert int(hex_text, 16) == worker_id
    assert parse_instance_ids(line) == [worker_id]


def test_two_workers_register_two_instance_ids(dynamo_env: DynamoEnv, serving_root: Path) -> None:
    serving = serve(dynamo_env, serving_root, "two", workers=2)
    try:
        serving.wait_model_listed(LISTED_TIMEOUT_S)
        deadline = time.monotonic() + 30
        while len(ids := serving.worker_instance_ids()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(ids) == 2
    finally:
        serving.stop()


# ------------------------------------------------------------------ faults


@pytest.fixture
def faulty(request: pytest.FixtureRequest, dynamo_env: DynamoEnv, serving_root: Path) -> Iterator[Serving]:
    fault, router_mode = request.param
    serving = serve(dynamo_env, serving_root, f"fault-{fault}", fault=fault, router_mode=router_mode)
    serving.wait_model_listed(LISTED_TIMEOUT_S)  # from the frontend itself, behind the proxy
    yield serving
    serving.stop()


@pytest.mark.parametrize("faulty", [("chat-500", "round-robin")], indirect=True)
def test_chat_500_fails_chat_but_lists_the_model(faulty: Serving) -> None:
    assert faulty.port != faulty.frontend_port
    wait_listed(faulty.url)
    resp = httpx.post(f"{faulty.url}/v1/chat/completions", json=SMOKE_BODY, timeout=30)
    assert resp.status_code == 500
    assert resp.json()["error"]["message"]


@pytest.mark.parametrize("faulty", [("error-object", "round-robin")], indirect=True)
def test_error_object_answers_200_without_choices(faulty: Serving) -> None:
    resp = httpx.post(f"{faulty.url}/v1/chat/completions", json=SMOKE_BODY, timeout=30)
    assert resp.status_code == 200
    body = resp.json()
    assert body["error"]
    assert "choices" not in body


@pytest.mark.parametrize("faulty", [("never-list", "direct")], indirect=True)
def test_never_list_hides_the_model_but_forwards_everything_else(faulty: Serving) -> None:
    # The frontend lists it (the fixture waited); through the proxy it never appears.
    for _ in range(5):
        resp = httpx.get(f"{faulty.url}/v1/models", timeout=5)
        assert resp.status_code == 200
        assert resp.json()["data"] == []
        time.sleep(0.1)
    # Forwarded unchanged, the direct-routing header included.
    resp = httpx.post(f"{faulty.url}/v1/chat/completions", json=SMOKE_BODY, timeout=30)
    assert resp.status_code == 400
    worker = {HEADER: str(faulty.worker_instance_id())}
    resp = httpx.post(f"{faulty.url}/v1/chat/completions", json=SMOKE_BODY, headers=worker, timeout=30)
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"]
    # Streamed answers are relayed chunk by chunk.
    with httpx.stream(
        "POST",
        f"{faulty.url}/v1/chat/completions",
        json={**SMOKE_BODY, "stream": True},
        headers=worker,
        timeout=30,
    ) as stream:
        assert stream.status_code == 200
        lines = [line for line in stream.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    assert len(lines) > 2


@pytest.mark.parametrize(
    ("fault", "method", "path", "status"),
    [
        ("chat-500", "POST", "/v1/chat/completions", 500),
        ("chat-500", "GET", "/v1/models", None),
        ("error-object", "POST", "/v1/chat/completions/", 200),
        ("never-list", "GET", "/v1/models?x=1", 200),
        ("never-list", "POST", "/v1/chat/completions", None),
        ("none", "POST", "/v1/chat/completions", None),
    ],
)
def test_fault_table(fault: str, method: str, path: str, status: int | None) -> None:
    answer = faultproxy.fault_response(fault, method, path)
    assert (answer[0] if answer else None) == status


# ------------------------------------------------------------------ processes and sockets


def _listeners(pids: list[int]) -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket owned by ``pids``, from /proc/net/tcp{,6}."""
    inodes: set[str] = set()
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        for fd in fd_dir.iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = []
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        for row in Path(table).read_text().splitlines()[1:]:
            cols = row.split()
            local, state, inode = cols[1], cols[3], cols[9]
            if state != "0A" or inode not in inodes:  # 0A = LISTEN
                continue
            addr_hex, port_hex = local.split(":")
            raw = bytes.fromhex(addr_hex)
            # The kernel prints each 32-bit word in host (little-endian) order.
            words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            addr = str(ipaddress.IPv6Address(words)) if v6 else ".".join(str(b) for b in words)
            found.append((addr, int(port_hex, 16)))
    return found


def _group_pids(serving: Serving) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) in serving.pids and fields[0] not in "ZX":
                members.append(int(entry.name))
    return members


@pytest.mark.parametrize("faulty", [("chat-500", "kv")], indirect=True)
def test_every_listener_is_on_loopback(faulty: Serving) -> None:
    httpx.post(f"http://127.0.0.1:{faulty.frontend_port}/v1/chat/completions", json=SMOKE_BODY, timeout=30)
    listeners = _listeners(_group_pids(faulty))
    ports = {port for _addr, port in listeners}
    assert {faulty.frontend_port, faulty.port} <= ports  # the scan does see our sockets
    assert len(listeners) >= 5  # frontend, proxy, two broker sockets, the worker's request plane
    non_loopback = [(a, p) for a, p in listeners if a not in ("127.0.0.1", "::1", "::ffff:127.0.0.1")]
    assert non_loopback == []


def test_stop_leaves_no_process(dynamo_env: DynamoEnv, serving_root: Path) -> None:
    serving = serve(dynamo_env, serving_root, "stop", fault="never-list")
    serving.wait_model_listed(LISTED_TIMEOUT_S)
    pids = _group_pids(serving)
    assert len(pids) >= 4
    serving.stop()
    assert not serving.alive()
    assert _group_pids(serving) == []
    assert not (serving.workdir / "pids").exists()


def test_stop_all_kills_servings_found_under_a_root(dynamo_env: DynamoEnv, tmp_path: Path) -> None:
    first = serve(dynamo_env, tmp_path, "a")
    second = serve(dynamo_env, tmp_path, "b", fault="chat-500")
    # A pid file naming a pid that is not ours (this test process) must be left alone.
    (tmp_path / "stranger").mkdir()
    (tmp_path / "stranger" / "pids").write_text(json.dumps({"venv": str(dynamo_env.venv), "pids": {"x": os.getpid()}}))
    try:
        stopped = stop_all(tmp_path)
        assert sorted(stopped) == sorted(first.pids + second.pids)
        assert not first.alive()
        assert not second.alive()
        assert _group_pids(first) == [] == _group_pids(second)
        assert os.path.exists(f"/proc/{os.getpid()}")
    finally:
        first.stop()  # nothing left to signal: this only collects our children's exit status
        second.stop()
