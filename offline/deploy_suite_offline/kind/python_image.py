"""The Python image of the kind provider: what support Jobs' ``python:<X.Y>-slim`` runs, built here.

Recipes hand over a model-download Job running ``python:3.10-slim`` with ``pip install
huggingface_hub`` and ``hf download $MODEL_NAME``. No registry and no hub are reachable, so the
image is made on this machine from the node image's Debian root, laid out as the official image
is: Debian's ``python3`` (``PYTHON_SERIES``) as a virtual environment at ``/usr/local``, so
``python``, ``python3`` and ``pip`` are ``/usr/local/bin``'s and packages go to
``/usr/local/lib/python3.X/site-packages``; ``huggingface_hub`` (``HUB_VERSION``) installed there,
so ``pip install huggingface_hub`` is satisfied without asking the index (checked while
building); ``hf`` is huggingface_hub's own CLI run against a hub replica inside the container
(``python_files/hub_replica.py``) that holds ``HUB_MODELS``, each the project's tiny tokenizer
(``dynamo_env.TOKENIZER_SCRIPT``, as in the Dynamo image) with a README saying so. The registry
(``registry.py``) serves it as ``docker.io/library/python:<X.Y>`` and ``<X.Y>-slim`` for
``registry.PYTHON_TAGS``. Cached in Docker under a tag carrying the hash of its inputs; what is
real and what is replicated: docs/offline-cluster.md, "Support images and the hub replica".
"""

from __future__ import annotations

from pathlib import Path

from deploy_suite import clock
from deploy_suite_offline import dynamo_env
from deploy_suite_offline.kind import docker, dynamo_image, nodeimage
from deploy_suite_offline.procs import Log

REPO = "deploy-suite/python"
PYTHON_SERIES = "3.11"  # Debian bookworm's python3, whatever tag the registry serves it under
HUB_VERSION = "2.4.0"   # huggingface_hub, pinned: the client whose requests the replica answers
# The models the project's experiments name (the sample's, the kind recipe's): each is the tiny tokenizer.
HUB_MODELS = ("Qwen/Qwen3-0.6B", "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic")
FILES = Path(__file__).with_name("python_files")
SITE = f"/usr/local/lib/python{PYTHON_SERIES}/site-packages"
HUB_ROOT = "/opt/hub-replica"
HF = "/usr/local/bin/hf"
PATH = "/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"
# As the official image: no entrypoint, `python3` by default. `docker commit` keeps the build
# container's `sleep` for `ENTRYPOINT []`; `[""]` is the empty one (containerd reads it so too).
CHANGES = (f"ENV PATH={PATH}", "ENV LANG=C.UTF-8", 'ENTRYPOINT [""]', 'CMD ["python3"]')
# The `hf` console script replaced: the same CLI, its HF_ENDPOINT the replica's (hub_replica.run_hf).
HF_SCRIPT = ("#!/usr/local/bin/python\n# deploy-suite: huggingface_hub's CLI against the image's hub replica "
             "(docs/offline-cluster.md)\nimport sys\n\nfrom deploy_suite_hub_replica import run_hf\n\n"
             "sys.exit(run_hf())\n")
README = ("# {model} (deploy-suite hub replica)\n\nNot the model: the tiny word-level tokenizer deploy-suite "
          "generates (deploy_suite_offline/dynamo_env.py), served under this name by the hub replica of the kind "
          "provider's Python image, since no hub is reachable there.\n")


def _steps() -> list[tuple[str, str]]:
    pip = f"PIP_CERT={dynamo_image.BUILD_CA} /usr/local/bin/pip install --no-input --progress-bar off -q"
    first, *others = HUB_MODELS
    copies = "".join(f" && mkdir -p {HUB_ROOT}/{m.split('/')[0]} && cp -a {HUB_ROOT}/{first} {HUB_ROOT}/{m}"
                     for m in others)
    readmes = " && ".join(f"printf '%s' {_quote(README.format(model=m))} > {HUB_ROOT}/{m}/README.md"
                          for m in HUB_MODELS)
    # pip must not ask the index for a satisfied requirement: the index here is a closed port.
    satisfied = ("out=$(PIP_INDEX_URL=http://127.0.0.1:9/simple pip install --no-cache-dir huggingface_hub 2>&1) && "
                 "echo \"$out\" && grep -q '^Requirement already satisfied: huggingface_hub' <<< \"$out\" && "
                 "! grep -Eqi 'retrying|error' <<< \"$out\"")
    snapshot = f"/tmp/hf-check/hub/models--{first.replace('/', '--')}/snapshots"
    download = (f"export HF_HOME=/tmp/hf-check HF_HUB_DISABLE_UPDATE_CHECK=1 && hf download {first} && "
                f"test -L {snapshot}/*/tokenizer.json && ! hf download deploy-suite/no-such-model 2>/dev/null && "
                f"rm -rf /tmp/hf-check && rm -f {dynamo_image.BUILD_CA}")
    return [
        ("Debian's python3", "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
                             "python3 python3-venv >/dev/null && rm -rf /var/lib/apt/lists/*"),
        ("python at /usr/local", f"python3 -m venv /usr/local && test -x /usr/local/bin/pip && test -d {SITE}"),
        (f"huggingface_hub {HUB_VERSION}", f"{pip} huggingface_hub=={HUB_VERSION} && rm -rf /root/.cache/pip"),
        ("hub replica models", f"python3 -m venv /tmp/tok && {pip.replace('/usr/local/bin/pip', '/tmp/tok/bin/pip')} "
                               f"tokenizers && cat > /tmp/tok.py && /tmp/tok/bin/python /tmp/tok.py {HUB_ROOT}/{first} "
                               f">/dev/null{copies} && {readmes} && rm -rf /tmp/tok /tmp/tok.py /root/.cache/pip"),
        ("hf", f"cat > {HF} && chmod 755 {HF}"),
        ("check", f"python --version && python3 --version && pip --version && {satisfied} && {download}"),
    ]


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def image_key(base: str) -> str:
    files = [p.read_bytes() for p in sorted(FILES.glob("*.py"))]
    return nodeimage.digest(base, HUB_VERSION, *HUB_MODELS, dynamo_env.TOKENIZER_SCRIPT, HF_SCRIPT, README,
                             *(s for _, s in _steps()), *CHANGES, *files)


def ensure_python_image(log: Log = print) -> dynamo_image.DynamoImage:
    """The Python image, built now if missing (about a minute: Debian's python3 and two wheels)."""
    base = nodeimage.base_image(log)
    ref = f"{REPO}:{PYTHON_SERIES}-hub{HUB_VERSION}-{image_key(base)}"

    def build(started: float) -> None:
        name = "deploy-suite-build-python"
        container = docker.start_build_container(base, name)
        try:
            docker.copy_in(container, dynamo_image.trust_store(), dynamo_image.BUILD_CA)
            stdin = {"hub replica models": dynamo_env.TOKENIZER_SCRIPT.encode(), "hf": HF_SCRIPT.encode()}
            for step, script in _steps():
                if step == "hf":
                    docker.copy_in(container, FILES / "hub_replica.py", f"{SITE}/deploy_suite_hub_replica.py")
                log(f"python image: {step} ... [{clock.monotonic() - started:.0f}s]")
                out = docker.exec_in(container, "bash", "-euo", "pipefail", "-c", script, input_bytes=stdin.get(step))
                if step == "check":  # the interpreter's, pip's and hf's own words, kept in the build's log
                    for line in out.strip().splitlines()[-12:]:
                        log(f"python image:   {line}")
            version = docker.exec_in(container, "/usr/local/bin/python", "-c",
                                     "import platform; print(platform.python_version())").strip()
            docker.commit(container, ref, [*CHANGES, f"ENV PYTHON_VERSION={version}"])
        finally:
            docker.remove_container(name)

    return dynamo_image.cached(ref, log, build, what="python")
