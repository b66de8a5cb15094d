"""Run a real Dynamo frontend and mocker engine per DGD as local processes.

The offline cluster has no containers, so a DGD "pod" cannot serve anything by itself. This module
gives each DGD a real ``dynamo.frontend`` + ``dynamo.mocker`` pair (from the ``ai-dynamo`` wheel,
CPU only) that the Kubernetes wiring (kwok port-forward, operator simulator; elsewhere) points the
pod's port 8000 at, so the OpenAI smoke test talks to genuine Dynamo code.

What lives here:
- ``ensure_dynamo_env``: a cached, separate virtual environment (its ``kubernetes<33`` pin and the
  ``aisimulate`` wheel stub must never leak into the suite's own environment) plus a tiny tokenizer
  directory generated locally, since the mocker needs one and hub access is not available.
- ``start_serving`` / ``Serving``: the processes of one DGD, each in its own session so it outlives
  the caller and is killed as a group; pid files let ``stop_all`` clean up after a crash.
- Fault switches are served by ``faultproxy.py`` (stdlib only) run in front of the frontend.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from deploy_suite import clock
from deploy_suite.errors import ClusterError, InputError, WaitTimeout, cut

DEFAULT_VERSION = "1.6.1"

# Verified for 1.6.1 (reference §4): the wheel's own requirements minus ``aisimulate``, an NVIDIA
# ``wheel_stub`` that downloads from NVIDIA's index at build time and is imported lazily anyway.
_DEPENDENCIES: dict[str, tuple[str, ...]] = {
    "1.6.1": (
        "aiohttp>=3.14.3,<4",
        "certifi>=2026.10.19",
        "kubernetes>=32.0.1,<33",
        "msgspec>=0.19",
        "prometheus-client>=0.23.1,<1",
        "pyzmq>=26",
        "redis>=6.2,<9",
        "tqdm",
        "transformers>=4.56",
        "typing-extensions>=4.10",
        "zstandard>=0.23,<1",
        "pydantic>=2.10.6,<=2.13.5",
        "uvloop>=0.21",
    ),
}
# Never installed: stubs that fetch from outside PyPI (for versions without a verified list).
_STUB_PACKAGES = frozenset({"aisimulate"})
_MARKER = ".deploy-suite-complete"
FAULTS = ("chat-500", "never-list", "error-object")
# As accepted by `python -m dynamo.frontend --router-mode` in 1.6.1.
ROUTER_MODES = (
    "round-robin",
    "random",
    "power-of-two",
    "kv",
    "direct",
    "least-loaded",
    "device-aware-weighted",
)

# Bounded waits; short poll intervals because these are local processes answering in milliseconds.
_POLL_S = 0.1
_FRONTEND_UP_S = 60.0
_STOP_GRACE_S = 10.0

Log = Callable[[str], None]

# No hub access ever: the tokenizer is local and a hub lookup would hang offline.
_OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}


def default_cache_root() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/deploy-suite``: shared by every checkout on the machine."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "deploy-suite"


@dataclass(frozen=True)
class DynamoEnv:
    """A ready Dynamo virtual environment and the tokenizer directory the mocker loads."""

    version: str
    venv: Path
    tokenizer_dir: Path
    install_seconds: float  # of the cold build that produced this venv (0 when unknown)
    size_bytes: int

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"


# --------------------------------------------------------------------------- environment


@contextlib.contextmanager
def _file_lock(path: Path, log: Log, what: str) -> Iterator[None]:
    """Exclusive flock so two processes never build the same venv at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"dynamo env: another process is building {what}; waiting for its lock {path}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _tree_size(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += (Path(dirpath) / name).lstat().st_size
    return total


def _run_step(step: str, argv: list[str], install_log: Path, log: Log, fix: str) -> None:
    """Run one build step, appending its output to ``install_log``; fail with the step named."""
    log(f"dynamo env: {step}")
    started = clock.monotonic()
    with install_log.open("a") as out:
        out.write(f"\n$ {' '.join(argv)}\n")
        out.flush()
        proc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        tail = "\n".join(install_log.read_text(errors="replace").splitlines()[-15:])
        raise ClusterError(
            f"dynamo env: step '{step}' failed (exit {proc.returncode}); full output in {install_log}; "
            f"fix: {fix}\n{cut(tail)}"
        )
    log(f"dynamo env: {step}: done in {clock.monotonic() - started:.1f}s")


def _metadata_dependencies(python: Path) -> tuple[str, ...]:
    """For versions without a verified list: the wheels' own requirements, stubs and extras left out."""
    script = (
        "import importlib.metadata as m, json\n"
        "from pip._vendor.packaging.requirements import Requirement\n"
        "out = []\n"
        "for dist in ('ai-dynamo', 'ai-dynamo-runtime'):\n"
        "    for text in m.requires(dist) or []:\n"
        "        r = Requirement(text)\n"
        "        if r.marker is None or r.marker.evaluate({'extra': ''}):\n"
        "            out.append(text.split(';')[0].strip())\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run([str(python), "-c", script], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ClusterError(f"dynamo env: reading wheel requirements failed: {cut(proc.stderr)}")
    reqs: list[str] = json.loads(proc.stdout)
    skip = _STUB_PACKAGES | {"ai-dynamo", "ai-dynamo-runtime"}
    return tuple(r for r in reqs if re.split(r"[\s<>=!~\[(;]", r, maxsplit=1)[0].lower() not in skip)


def _build_venv(venv: Path, version: str, log: Log) -> tuple[float, int]:
    install_log = venv.parent / f"{version}-install.log"
    install_log.write_text("")
    if venv.exists():
        log(f"dynamo env: removing incomplete {venv} (no completion marker)")
        shutil.rmtree(venv)
    started = clock.monotonic()
    pip_fix = "check PyPI is reachable (proxy, PIP_INDEX_URL) and the disk has ~1 GB free, then rerun"
    _run_step(
        "create venv",
        [sys.executable, "-m", "venv", str(venv)],
        install_log,
        log,
        f"make sure `{sys.executable} -m venv` works (Debian: apt-get install python3-venv)",
    )
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-input", "--progress-bar", "off"]
    _run_step(
        f"pip install --no-deps ai-dynamo=={version} ai-dynamo-runtime=={version}",
        [*pip, "--no-deps", f"ai-dynamo=={version}", f"ai-dynamo-runtime=={version}"],
        install_log,
        log,
        f"{pip_fix}; is {version} a released ai-dynamo version?",
    )
    deps = _DEPENDENCIES.get(version) or _metadata_dependencies(venv / "bin" / "python")
    _run_step(
        f"pip install {len(deps)} dependencies + tokenizers (aisimulate stub left out)",
        [*pip, *deps, "tokenizers"],
        install_log,
        log,
        pip_fix,
    )
    seconds = clock.monotonic() - started
    size = _tree_size(venv)
    log(f"dynamo env: cold install of {version} took {seconds:.0f}s, venv size {size / 1e6:.0f} MB")
    return seconds, size


_TOKENIZER_SCRIPT = r'''
"""Build a tiny word-level tokenizer directory (run with the Dynamo venv's python)."""
import json, string, sys
from pathlib import Path
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

out = Path(sys.argv[1])
special = ["<unk>", "<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]
words = """simply output the phrase nvidia dynamo hello world a an and or of to in is it you i
yes no ok please answer question what who how why when where this that with for on at by from
model token tokens test smoke deploy kubernetes cluster gpu cpu node pod frontend worker mocker
one two three four five six seven eight nine ten""".split()
words += [w.capitalize() for w in words] + ["NVIDIA", "Dynamo"]
vocab = {}
for tok in special + list(string.ascii_letters + string.digits + string.punctuation) + words:
    vocab.setdefault(tok, len(vocab))
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
out.mkdir(parents=True, exist_ok=True)
tok.save(str(out / "tokenizer.json"))
n = tok.get_vocab_size()
config = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": n,
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
    "num_attention_heads": 1, "num_key_value_heads": 1, "max_position_embeddings": 4096,
    "bos_token_id": vocab["<s>"], "eos_token_id": vocab["</s>"], "pad_token_id": vocab["<pad>"],
    "torch_dtype": "float16",
}
(out / "config.json").write_text(json.dumps(config, indent=2))
template = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
tok_config = {
    "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096,
    "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
    "chat_template": template,
}
(out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2))
(out / "generation_config.json").write_text(json.dumps(
    {"bos_token_id": vocab["<s>"], "eos_token_id": vocab["</s>"]}))
print(n)
'''


def _build_tokenizer(python: Path, target: Path, log: Log) -> None:
    log(f"dynamo env: generating tokenizer directory {target}")
    if target.exists():
        shutil.rmtree(target)
    # Build in a sibling temp dir and rename, so a crash never leaves a half-written tokenizer.
    tmp = Path(tempfile.mkdtemp(prefix=".tokenizer-", dir=target.parent))
    try:
        proc = subprocess.run(
            [str(python), "-c", _TOKENIZER_SCRIPT, str(tmp)],
            capture_output=True,
            text=True,
            env={**os.environ, **_OFFLINE_ENV},
            check=False,
        )
        if proc.returncode != 0:
            raise ClusterError(
                f"dynamo env: step 'generate tokenizer' failed (exit {proc.returncode}); "
                f"fix: delete {target.parent} and rerun to rebuild the venv\n{cut(proc.stderr)}"
            )
        (tmp / _MARKER).write_text(json.dumps({"vocab_size": int(proc.stdout.strip() or 0)}))
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ensure_dynamo_env(version: str = DEFAULT_VERSION, cache_root: Path | None = None, log: Log = print) -> DynamoEnv:
    """Return the cached Dynamo venv + tokenizer for ``version``, building what is missing.

    Layout under ``cache_root`` (default ``default_cache_root()``): ``dynamo-venv/<version>/`` is
    the venv, ``dynamo-venv/<version>-tokenizer/`` the tokenizer, ``dynamo-venv/<version>.lock``
    the build lock and ``dynamo-venv/<version>-install.log`` pip's output. A marker file written
    last in each directory says it is complete; anything without one is rebuilt.
    """
    base = (cache_root or default_cache_root()) / "dynamo-venv"
    venv = base / version
    tokenizer = base / f"{version}-tokenizer"
    with _file_lock(base / f"{version}.lock", log, str(venv)):
        marker = venv / _MARKER
        if marker.is_file():
            info = json.loads(marker.read_text())
            seconds, size = float(info.get("install_seconds", 0.0)), int(info.get("size_bytes", 0))
        else:
            log(f"dynamo env: building {venv} (one-off: ~700 MB, about a minute on a fast link)")
            seconds, size = _build_venv(venv, version, log)
            marker.write_text(json.dumps({"version": version, "install_seconds": seconds, "size_bytes": size}))
        if not (tokenizer / _MARKER).is_file():
            _build_tokenizer(venv / "bin" / "python", tokenizer, log)
    return DynamoEnv(version=version, venv=venv, tokenizer_dir=tokenizer, install_seconds=seconds, size_bytes=size)


# --------------------------------------------------------------------------- serving

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
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Decimal ids as the mocker/frontend print them, hex as a gaie sidecar prints them.
_DECIMAL_ID = re.compile(r"(?:worker_id[=:]\s*|for worker |instance_id=)(\d+)\b")
_HEX_ID = re.compile(r"instance_id=0x([0-9a-fA-F]+)\b")


def parse_instance_ids(text: str) -> list[int]:
    """Worker instance ids found in log text, in order, deduplicated; decimal or ``0x`` hex accepted."""
    text = _ANSI.sub("", text)
    found: list[tuple[int, int]] = [(m.start(), int(m.group(1))) for m in _DECIMAL_ID.finditer(text)]
    found += [(m.start(), int(m.group(1), 16)) for m in _HEX_ID.finditer(text)]
    return list(dict.fromkeys(value for _pos, value in sorted(found)))


def _free_port() -> int:
    # The port is released before the frontend binds it; start_serving retries on a lost race.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _proc_stat(pid: int) -> tuple[str, int] | None:
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


def _running(pid: int) -> bool:
    stat = _proc_stat(pid)
    return stat is not None and _live_state(pid, stat[0])


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            pid = int(entry.name)
            stat = _proc_stat(pid)
            if stat is not None and stat[1] == pgid and _live_state(pid, stat[0]):
                members.append(pid)
    return members


def _is_ours(pid: int, venv: Path) -> bool:
    """Pids get reused: only signal a process whose command line still names our venv."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return str(venv) in cmdline


def _terminate_groups(pids: list[int], venv: Path, reap: Callable[[], None] = lambda: None) -> list[int]:
    """SIGTERM each process group led by one of ``pids`` (ours only), SIGKILL what outlives the grace."""
    # Judged by the members, not only the leader: a crashed leader can leave its children running.
    groups = [pgid for pgid in pids if any(_is_ours(m, venv) for m in _group_members(pgid))]
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
    deadline = clock.monotonic() + _STOP_GRACE_S
    while clock.monotonic() < deadline:
        if not any(_group_members(pgid) for pgid in groups):
            reap()  # the leaders may have become zombies after the last reap
            return groups
        reap()
        time.sleep(_POLL_S)
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    deadline = clock.monotonic() + _STOP_GRACE_S
    while clock.monotonic() < deadline and any(_group_members(pgid) for pgid in groups):
        reap()
        time.sleep(_POLL_S)
    reap()
    return groups


def _rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return _ANSI.sub("", "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
    except OSError:
        return "(no log)"


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
        return bool(self.roles) and not exited and all(_running(pid) for pid in self.roles.values())

    def worker_instance_ids(self, timeout: float = 30.0) -> list[int]:
        """Decimal instance ids of the mocker workers, read from the logs (waits until one appears)."""
        deadline = clock.monotonic() + timeout
        while True:
            text = "".join(_read(p) for p in (self.worker_log, self.frontend_log))
            ids = parse_instance_ids(text)
            if ids:
                break
            if clock.monotonic() >= deadline or not self.alive():
                raise WaitTimeout(
                    f"a worker instance id in {self.worker_log}",
                    timeout,
                    last_state=_tail(self.worker_log, 5) if self.alive() else "a serving process exited",
                )
            time.sleep(_POLL_S)
        # What a gaie sidecar would print (it logs the id in hex); consumers must convert back.
        already = _read(self.sidecar_log)
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
        last = "no answer"
        with httpx.Client(timeout=5.0) as client:
            while clock.monotonic() - started < timeout:
                try:
                    resp = client.get(url)
                    last = f"HTTP {resp.status_code} {cut(resp.text, 300)}"
                    if resp.status_code == 200 and any(
                        m.get("id") == self.served_model for m in resp.json().get("data", [])
                    ):
                        return clock.monotonic() - started
                except (httpx.HTTPError, ValueError) as exc:
                    last = f"{type(exc).__name__}: {exc}"
                if not self.alive():
                    raise ClusterError(
                        f"serving {self.key}: a process exited before {self.served_model} was listed\n"
                        f"{_tail(self.worker_log)}"
                    )
                time.sleep(_POLL_S)
        raise WaitTimeout(f"{self.served_model} in {url}", timeout, last_state=last)

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory per role (whole process group), for the figures in the docs."""
        return {role: sum(_rss_bytes(p) for p in _group_members(pid)) for role, pid in self.roles.items()}

    def stop(self) -> None:
        """SIGTERM every process group, wait a bounded time, SIGKILL what is left."""

        def reap() -> None:
            for proc in self._procs.values():
                proc.poll()

        _terminate_groups(self.pids, self.venv, reap)
        for proc in self._procs.values():
            # Gone from /proc already, so this returns at once; it collects the exit status.
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=_STOP_GRACE_S)
        (self.workdir / "pids").unlink(missing_ok=True)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _write_json(path: Path, data: object) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


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
        **_OFFLINE_ENV,
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


def _wait_file(path: Path, procs: dict[str, subprocess.Popen[bytes]], role: str, log: Path, timeout: float) -> str:
    """Wait for a file a child writes atomically once it is listening (no port probing)."""
    deadline = clock.monotonic() + timeout
    while not path.is_file():
        if procs[role].poll() is not None:
            raise ClusterError(f"{role} exited with {procs[role].returncode} before it was ready\n{_tail(log)}")
        if clock.monotonic() >= deadline:
            raise WaitTimeout(f"{role} to write {path}", timeout, last_state=_tail(log, 5))
        time.sleep(_POLL_S / 2)
    return path.read_text()


def _wait_http(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> bool:
    """True once the frontend answers HTTP; False if it exited (the caller inspects the log)."""
    deadline = clock.monotonic() + timeout
    with httpx.Client(timeout=2.0) as client:
        while clock.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            try:
                client.get(f"http://127.0.0.1:{port}/health")
                return True
            except httpx.HTTPError:
                time.sleep(_POLL_S)
    raise WaitTimeout(f"frontend HTTP on 127.0.0.1:{port}", timeout, last_state=_tail(log, 5))


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
    live = [pid for pid in _pids_from(workdir / "pids")[1] if _is_ours(pid, env.venv) and _running(pid)]
    if live:
        raise ClusterError(
            f"serving {key}: processes {live} from {workdir} are still running; "
            f"fix: stop them first (Serving.stop() or stop_all({workdir}))"
        )
    # A previous run's registrations in the file store would point the frontend at dead workers.
    shutil.rmtree(workdir / "kv", ignore_errors=True)
    for stale in ("zmq-broker.json", "proxy.port", "sidecar.log", "serving.json"):
        (workdir / stale).unlink(missing_ok=True)

    procs: dict[str, subprocess.Popen[bytes]] = {}
    serving = Serving(key, served_model, workdir, router_mode, fault, env.venv, 0, None, {}, procs)

    def spawn(role: str, argv: list[str], log_name: str, child_env: dict[str, str]) -> None:
        with (workdir / log_name).open("wb") as out:
            procs[role] = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=workdir,
                env=child_env,
                start_new_session=True,
            )
        serving.roles[role] = procs[role].pid
        # Written after every spawn so a crash mid-start still leaves every pid findable.
        _write_json(workdir / "pids", {"venv": str(env.venv), "key": key, "pids": serving.roles})

    python = str(env.python)
    try:
        spawn(
            "broker",
            [python, "-c", _BROKER_SCRIPT, str(workdir / "zmq-broker.json")],
            "broker.log",
            {**os.environ, "PYTHONPATH": ""},
        )
        broker = json.loads(_wait_file(workdir / "zmq-broker.json", procs, "broker", workdir / "broker.log", 30.0))
        child_env = _serving_env(env, workdir, broker)
        spawn(
            "mocker",
            [
                python,
                "-m",
                "dynamo.mocker",
                "--model-path",
                str(env.tokenizer_dir),
                "--model-name",
                served_model,
                "--discovery-backend",
                "file",
                "--speedup-ratio",
                "100",
                "--num-workers",
                str(workers),
            ],
            "mocker.log",
            child_env,
        )
        for _attempt in range(3):
            port = _free_port()
            spawn(
                "frontend",
                [
                    python,
                    "-m",
                    "dynamo.frontend",
                    "--http-host",
                    "127.0.0.1",
                    "--http-port",
                    str(port),
                    "--router-mode",
                    router_mode,
                    "--discovery-backend",
                    "file",
                ],
                "frontend.log",
                child_env,
            )
            if _wait_http(port, procs["frontend"], serving.frontend_log, _FRONTEND_UP_S):
                serving.frontend_port = port
                break
            if "in use" not in _read(serving.frontend_log).lower():
                raise ClusterError(
                    f"serving {key}: frontend exited with {procs['frontend'].returncode}\n{_tail(serving.frontend_log)}"
                )
        else:
            raise ClusterError(f"serving {key}: frontend lost the race for a free port three times")
        if fault is not None:
            spawn(
                "proxy",
                [
                    python,
                    "-I",
                    str(Path(__file__).with_name("faultproxy.py")),
                    "--upstream-port",
                    str(serving.frontend_port),
                    "--fault",
                    fault,
                    "--port-file",
                    str(workdir / "proxy.port"),
                ],
                "proxy.log",
                child_env,
            )
            serving.proxy_port = int(_wait_file(workdir / "proxy.port", procs, "proxy", workdir / "proxy.log", 30.0))
    except BaseException:
        serving.stop()
        raise
    _write_json(
        workdir / "serving.json",
        {
            "key": key,
            "served_model": served_model,
            "router_mode": router_mode,
            "fault": fault,
            "venv": str(env.venv),
            "frontend_port": serving.frontend_port,
            "proxy_port": serving.proxy_port,
            "roles": serving.roles,
        },
    )
    return serving


def load_serving(workdir: Path) -> Serving:
    """Rebuild the handle of a serving started by another process (e.g. an earlier `cluster up`)."""
    try:
        data = json.loads((workdir / "serving.json").read_text())
    except (OSError, ValueError) as exc:
        raise ClusterError(f"no serving state in {workdir}: {exc}") from exc
    return Serving(
        data["key"],
        data["served_model"],
        workdir.resolve(),
        data["router_mode"],
        data["fault"],
        Path(data["venv"]),
        int(data["frontend_port"]),
        data["proxy_port"],
        {str(k): int(v) for k, v in data["roles"].items()},
    )


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
        stopped += _terminate_groups(pids, venv)
        pid_file.unlink(missing_ok=True)
    return stopped
