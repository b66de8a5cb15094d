"""The Dynamo environment the offline cluster serves from: a cached venv and a local tokenizer.

The offline cluster's DGDs are served by a real ``dynamo.frontend`` + ``dynamo.mocker`` (from the
``ai-dynamo`` wheel, CPU only; see ``dynamo_runtime.py``). They run from a cached, separate
virtual environment (its ``kubernetes<33`` pin and the ``aisimulate`` wheel stub must never leak
into the suite's own environment) with a tiny tokenizer directory generated locally, since the
mocker needs one and hub access is not available. :func:`ensure_dynamo_env` builds what is
missing, once per machine, under a lock.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from deploy_suite import clock
from deploy_suite.errors import cut
from deploy_suite_offline import binaries, procs
from deploy_suite_offline.errors import ClusterError
from deploy_suite_offline.procs import Log

DEFAULT_VERSION = "1.6.1"

# Verified for 1.6.1: the wheel's own requirements minus ``aisimulate``, an NVIDIA ``wheel_stub``
# that downloads from NVIDIA's index at build time and is imported lazily anyway.
DEPENDENCIES: dict[str, tuple[str, ...]] = {
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


# No hub access ever: the tokenizer is local and a hub lookup would hang offline.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}


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
    done = procs.run(argv, output=install_log)
    if done.returncode != 0:
        tail = "\n".join(install_log.read_text(errors="replace").splitlines()[-15:])
        raise ClusterError(
            f"dynamo env: step '{step}' failed (exit {done.returncode}); full output in {install_log}; "
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
    done = procs.run([str(python), "-c", script], split=True)
    if done.returncode != 0:
        raise ClusterError(f"dynamo env: reading wheel requirements failed: {cut(done.errors)}")
    reqs: list[str] = json.loads(done.output)
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
    deps = DEPENDENCIES.get(version) or _metadata_dependencies(venv / "bin" / "python")
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


TOKENIZER_SCRIPT = r'''
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
        done = procs.run([str(python), "-c", TOKENIZER_SCRIPT, str(tmp)], env={**os.environ, **OFFLINE_ENV},
                         split=True)
        if done.returncode != 0:
            raise ClusterError(
                f"dynamo env: step 'generate tokenizer' failed (exit {done.returncode}); "
                f"fix: delete {target.parent} and rerun to rebuild the venv\n{cut(done.errors)}"
            )
        (tmp / _MARKER).write_text(json.dumps({"vocab_size": int(done.output.strip() or 0)}))
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ensure_dynamo_env(version: str = DEFAULT_VERSION, cache_root: Path | None = None, log: Log = print) -> DynamoEnv:
    """Return the cached Dynamo venv + tokenizer for ``version``, building what is missing.

    Layout under ``cache_root`` (default ``binaries.cache_root()``): ``dynamo-venv/<version>/`` is
    the venv, ``dynamo-venv/<version>-tokenizer/`` the tokenizer, ``dynamo-venv/<version>.lock``
    the build lock and ``dynamo-venv/<version>-install.log`` pip's output. A marker file written
    last in each directory says it is complete; anything without one is rebuilt.
    """
    base = (cache_root or binaries.cache_root()) / "dynamo-venv"
    venv = base / version
    tokenizer = base / f"{version}-tokenizer"

    def waiting() -> None:
        log(f"dynamo env: another process is building {venv}; waiting for its lock {base / f'{version}.lock'}")

    with procs.file_lock(base / f"{version}.lock", waiting):
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

