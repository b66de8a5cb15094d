"""The Dynamo image of the kind provider: Debian's Python and the ai-dynamo wheel, built here.

No registry is reachable, so the image DGDs name (``nvcr.io/nvidia/ai-dynamo/...-runtime``) is
made on this machine from the node image's Debian root: ``python3`` and ``python3-venv`` from
Debian's packages, then a virtual environment ``/opt/dynamo`` with ``ai-dynamo`` and
``ai-dynamo-runtime`` installed the way ``dynamo_env.py`` installs them for the kwok cluster (the
same verified dependency list, the ``aisimulate`` stub left out) and the same tiny local tokenizer
at ``/opt/dynamo/tokenizer``, since the hub is never reachable. ``python3`` on the image's PATH is
the environment's. Cached in Docker under a tag carrying the hash of its inputs.

On top of that base, a thin layer (``dynamo_files/``) replaces the ``__main__`` of ``dynamo.vllm``,
``dynamo.sglang``, ``dynamo.trtllm`` and ``dynamo.mocker``: the engines' arguments are parsed as
ai-dynamo parses them and ``dynamo.mocker`` serves the model (docs/offline-cluster.md, "Engines in
the Dynamo image"). The image's entrypoint runs its arguments, as the runtime images' does, so a
container that gives only ``args`` works.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from deploy_suite import clock
from deploy_suite_offline import dynamo_env, procs
from deploy_suite_offline.errors import ClusterError
from deploy_suite_offline.kind import docker, nodeimage
from deploy_suite_offline.procs import Log

REPO = "deploy-suite/dynamo"
BUILD_CA = "/tmp/build-ca.crt"
ENGINE_FILES = Path(__file__).with_name("dynamo_files")
ENGINES = ("vllm", "sglang", "trtllm", "mocker")
SITE = "/opt/dynamo/lib/python3.11/site-packages"
# What `python3 -m dynamo.mocker --planner-profile-data DIR` imports to turn a profiler's results into
# timings; the published dynamo-planner image holds them (recipes' mocker DGD, docs/offline-cluster.md).
PLANNER_DEPENDENCIES = ("numpy>=2", "scikit-learn>=1.5")
# The EPP stand-in's gRPC health service (dynamo_files/dynamo_offline_epp.py).
EPP_DEPENDENCIES = ("grpcio>=1.60", "grpcio-health-checking>=1.60")
# NVIDIA's `aisimulate` (index-only, never installed here): its module names, failing when used.
AISIMULATE_STANDIN = "aisimulate_core_standin.py"


@dataclass(frozen=True)
class DynamoImage:
    ref: str
    built_seconds: float  # 0 when it came from the cache
    size_mib: int


def image_key(version: str, base: str) -> str:
    deps = dynamo_env.DEPENDENCIES.get(version, ())
    return nodeimage.digest(version, base, *deps, *PLANNER_DEPENDENCIES, *EPP_DEPENDENCIES,
                             dynamo_env.TOKENIZER_SCRIPT)


def _steps(version: str) -> list[tuple[str, str]]:
    deps = " ".join(f"'{d}'" for d in dynamo_env.DEPENDENCIES[version])
    # This machine's trust store for PyPI (a TLS proxy's CA may be in it), used while building only.
    pip = f"PIP_CERT={BUILD_CA} /opt/dynamo/bin/python -m pip install --no-input --progress-bar off -q"
    offline = " ".join(f"{k}={v}" for k, v in dynamo_env.OFFLINE_ENV.items())
    return [
        ("Debian's python3", "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
                             "python3 python3-venv >/dev/null && rm -rf /var/lib/apt/lists/*"),
        ("virtual environment", "python3 -m venv /opt/dynamo"),
        (f"ai-dynamo {version}", f"{pip} --no-deps ai-dynamo=={version} ai-dynamo-runtime=={version}"),
        ("dependencies", f"{pip} {deps} tokenizers && rm -rf /root/.cache/pip"),
        ("planner and EPP dependencies", f"{pip} {' '.join((*PLANNER_DEPENDENCIES, *EPP_DEPENDENCIES))} "
                                         "&& rm -rf /root/.cache/pip"),
        ("tokenizer", f"cat > /tmp/tok.py && {offline} /opt/dynamo/bin/python /tmp/tok.py /opt/dynamo/tokenizer "
                      ">/dev/null && rm /tmp/tok.py"),
        ("check", "/opt/dynamo/bin/python -m dynamo.frontend --help >/dev/null && "
                  f"/opt/dynamo/bin/python -m dynamo.mocker --help >/dev/null && rm -f {BUILD_CA}"),
    ]


def trust_store() -> Path:
    for var in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        found = os.environ.get(var)
        if found and Path(found).is_file():
            return Path(found)
    return Path("/etc/ssl/certs/ca-certificates.crt")


def engines_key() -> str:
    return nodeimage.digest(*(p.read_bytes() for p in sorted(ENGINE_FILES.iterdir()) if p.suffix in (".py", ".json")),
                             *(script for _, script in _engine_steps()))


def _engine_steps() -> list[tuple[str, str]]:
    mains = " && ".join(f"printf 'from dynamo_offline_engines import main\\n\\nmain(\"{e}\")\\n' "
                        f"> {SITE}/dynamo/{e}/__main__.py" for e in ENGINES)
    # The runtime images' entrypoint runs its arguments: a container with `args` and no `command` works.
    entry = ("printf '#!/bin/sh\\nexec \"$@\"\\n' > /usr/local/bin/dynamo-entrypoint && "
             "chmod +x /usr/local/bin/dynamo-entrypoint")
    refused = ("out=$(cd /tmp && /opt/dynamo/bin/python -m dynamo.vllm --model m --no-such-flag 2>&1 || true) && "
               "grep -q 'unrecognized arguments: --no-such-flag' <<< \"$out\"")
    # The runtime images hold Dynamo's checkout at /workspace: recipes name files under
    # /workspace/components/src/dynamo (the mocker DGD's profiling results), which the wheel holds too.
    workspace = f"mkdir -p /workspace/components/src && ln -sfn {SITE}/dynamo /workspace/components/src/dynamo"
    profile = "/workspace/components/src/dynamo/planner/tests/data/profiling_results/H200_TP1P_TP1D"
    converts = ("cd /tmp && /opt/dynamo/bin/python -c 'from dynamo.mocker.args import resolve_planner_profile_data "
                f"as r; from pathlib import Path; assert r(Path(\"{profile}\")).npz_path' >/dev/null")
    epp = "/opt/dynamo/bin/python -c 'import dynamo_offline_epp, grpc_health.v1.health'"
    return [("engine entry points", f"{mains} && {entry} && {workspace}"),
            ("check", f"{refused} && /opt/dynamo/bin/python -m dynamo.sglang --help >/dev/null && {converts} && {epp}")]


def ensure_dynamo_image(version: str = dynamo_env.DEFAULT_VERSION, log: Log = print) -> DynamoImage:
    """The Dynamo image for ``version`` with the engines' entry points (``dynamo_files/``), built now
    if missing: minutes for the base (Debian's and PyPI's packages), seconds for the entry points."""
    base = _ensure_base(version, log)
    ref = f"{base.ref}-e{engines_key()}"

    def build(started: float) -> None:
        name = "deploy-suite-build-dynamo-engines"
        container = docker.start_build_container(base.ref, name)
        try:
            docker.copy_in(container, ENGINE_FILES / "dynamo_offline_engines.py", f"{SITE}/dynamo_offline_engines.py")
            docker.copy_in(container, ENGINE_FILES / "engine_flags.json", f"{SITE}/dynamo_offline_engine_flags.json")
            docker.copy_in(container, ENGINE_FILES / "dynamo_offline_epp.py", f"{SITE}/dynamo_offline_epp.py")
            docker.exec_in(container, "mkdir", "-p", f"{SITE}/aisimulate_core/sdk")
            docker.exec_in(container, "touch", f"{SITE}/aisimulate_core/__init__.py")
            docker.copy_in(container, ENGINE_FILES / AISIMULATE_STANDIN, f"{SITE}/aisimulate_core/sdk/__init__.py")
            for step, script in _engine_steps():
                log(f"dynamo image: {step} ... [{clock.monotonic() - started:.0f}s]")
                docker.exec_in(container, "bash", "-euo", "pipefail", "-c", script)
            docker.commit(container, ref, ['ENTRYPOINT ["/usr/local/bin/dynamo-entrypoint"]', 'CMD ["/bin/bash"]'])
        finally:
            docker.remove_container(name)

    image = cached(ref, log, build)
    return DynamoImage(image.ref, base.built_seconds + image.built_seconds, image.size_mib)


def cached(ref: str, log: Log, build: Callable[[float], None], what: str = "dynamo") -> DynamoImage:
    """``ref`` from Docker, or made now by ``build(started)`` under the ``what`` images' lock
    (the Python image of ``python_image.py`` is cached the same way, under its own lock)."""
    if docker.image_exists(ref):
        return DynamoImage(ref, 0.0, docker.image_size(ref) >> 20)
    with procs.file_lock(nodeimage.cache_dir() / f".{what}-image.lock",
                         waiting=lambda: log(f"waiting for another {what} image build")):
        if docker.image_exists(ref):
            return DynamoImage(ref, 0.0, docker.image_size(ref) >> 20)
        started = clock.monotonic()
        build(started)
        seconds = clock.monotonic() - started
        size = docker.image_size(ref) >> 20
        log(f"{what} image {ref} built in {seconds:.0f}s ({size} MiB)")
        return DynamoImage(ref, seconds, size)


def _ensure_base(version: str, log: Log) -> DynamoImage:
    """Debian's Python, the ai-dynamo wheel and the tokenizer (the engines' layer goes on top)."""
    if version not in dynamo_env.DEPENDENCIES:
        raise ClusterError(f"ai-dynamo {version} has no verified dependency list; fix: use "
                           f"{dynamo_env.DEFAULT_VERSION} or add it to offline/deploy_suite_offline/dynamo_env.py")
    base = nodeimage.base_image(log)
    ref = f"{REPO}:{version}-{image_key(version, base)}"

    def build(started: float) -> None:
        name = "deploy-suite-build-dynamo"
        container = docker.start_build_container(base, name)
        try:
            docker.copy_in(container, trust_store(), BUILD_CA)
            for step, script in _steps(version):
                log(f"dynamo image: {step} ... [{clock.monotonic() - started:.0f}s]")
                docker.exec_in(container, "bash", "-euo", "pipefail", "-c", script,
                               input_bytes=dynamo_env.TOKENIZER_SCRIPT.encode() if step == "tokenizer" else None)
            path = "/opt/dynamo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
            docker.commit(container, ref, [f"ENV PATH={path}", "ENTRYPOINT []", "CMD []",
                                           *(f"ENV {k}={v}" for k, v in dynamo_env.OFFLINE_ENV.items())])
        finally:
            docker.remove_container(name)

    return cached(ref, log, build)
