"""The engines' entry points in the Dynamo image (docs/offline-cluster.md, "Engines in the Dynamo
image"), run as a container runs them (Docker only, no cluster): an argument the engine refuses ends
the process with the engine parser's own words and status; accepted arguments start dynamo.mocker
for the requested model, a hub name served with the image's tokenizer."""

from __future__ import annotations

import subprocess

import pytest

from deploy_suite_offline.kind import docker, dynamo_image

pytestmark = [pytest.mark.kind]

MODEL = "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic"
RECIPE_ARGS = ["--model", MODEL, "--served-model-name", MODEL, "--tensor-parallel-size", "4", "--data-parallel-size",
               "1", "--gpu-memory-utilization", "0.90", "--no-enable-prefix-caching", "--block-size", "128"]


@pytest.fixture(scope="module")
def image() -> str:
    why = docker.available()
    if why is not None:
        pytest.skip(f"no Docker engine ({why})")
    return dynamo_image.ensure_dynamo_image().ref


def _run(image: str, *argv: str, seconds: int = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([docker.docker_binary(), "run", "--rm", "-e", "DYN_DISCOVERY_BACKEND=file", image,
                           "timeout", str(seconds), *argv], capture_output=True, text=True, timeout=seconds + 60,
                          check=False)


@pytest.mark.parametrize(("module", "extra"), [("dynamo.vllm", []), ("dynamo.sglang", ["--tp-size", "1"])])
def test_an_argument_the_engine_refuses_exits_2_with_argparse_words(image: str, module: str, extra: list[str]) -> None:
    model = ["--model-path", "Qwen/Qwen3-0.6B"] if module == "dynamo.sglang" else ["--model", "Qwen/Qwen3-0.6B"]
    done = _run(image, "python3", "-m", module, *model, *extra, "--max-num-seqz", "8")
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].endswith("error: unrecognized arguments: --max-num-seqz 8")


def test_trtllm_refuses_with_its_own_parser(image: str) -> None:
    # ai-dynamo's TensorRT-LLM parser logs the flag and exits 1 (dynamo/trtllm/dynamic_flags.py).
    done = _run(image, "python3", "-m", "dynamo.trtllm", "--model-path", "Qwen/Qwen3-0.6B", "--no-such-flag", "1")
    assert done.returncode == 1
    assert "Unrecognized argument: --no-such-flag" in done.stderr


def test_the_recipes_vllm_arguments_start_the_mocker_for_the_hub_model(image: str) -> None:
    done = _run(image, "python3", "-m", "dynamo.vllm", *RECIPE_ARGS, seconds=40)
    assert done.returncode == 124, done.stderr[-3000:]  # still serving when `timeout` stopped it
    assert "dynamo.vllm arguments accepted; dynamo.mocker serves 'RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic'" \
        in done.stderr
    assert "--model-path /opt/dynamo/tokenizer" in done.stderr
    assert "dynamo_runtime" in done.stderr  # the mocker's runtime logged its start


def test_the_mocker_run_directly_answers_a_hub_name_with_the_local_tokenizer(image: str) -> None:
    done = _run(image, "python3", "-m", "dynamo.mocker", "--model-path", "Qwen/Qwen3-0.6B", seconds=30)
    assert done.returncode == 124, done.stderr[-3000:]
    assert "is not a local directory and no hub is reachable: using the tokenizer at /opt/dynamo/tokenizer" \
        in done.stderr
