"""The engine entry points of the kind provider's Dynamo image (dynamo_files/): the parts that need
no ``dynamo`` package: the flag tables, vLLM's option spelling, the engine parser's refusal, and
the model a hub name is served with. The whole path runs in the image in tests/kind/test_kind_engines.py."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from deploy_suite_offline.kind.dynamo_files import dynamo_offline_engines as engines

TABLE = json.loads((Path(engines.__file__).with_name("engine_flags.json")).read_text())


def test_the_tables_name_their_engine_version_and_source() -> None:
    for engine, version in (("vllm", "0.31.0"), ("sglang", "0.5.21")):
        assert TABLE[engine]["version"] == version
        assert "sha256" in TABLE[engine]["source"]
    # What the llama-3-70b recipe passes to dynamo.vllm is vLLM's, with the values each takes.
    vllm = TABLE["vllm"]["flags"]
    assert {f: vllm[f] for f in ("--model", "--tensor-parallel-size", "--no-enable-prefix-caching", "--block-size")} \
        == {"--model": "1", "--tensor-parallel-size": "1", "--no-enable-prefix-caching": "0", "--block-size": "1"}
    assert TABLE["sglang"]["flags"]["--model-path"] == "1"


def test_an_unknown_engine_flag_is_refused_as_argparse_refuses_it(capsys: pytest.CaptureFixture[str]) -> None:
    parser = engines.engine_parser(TABLE["vllm"]["flags"])
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(["--model", "m", "--tensor-parallel-size", "4", "--not-a-vllm-flag"])
    assert stop.value.code == 2
    assert "error: unrecognized arguments: --not-a-vllm-flag" in capsys.readouterr().err


def test_known_flags_parse_with_their_values() -> None:
    parsed = engines.engine_parser(TABLE["vllm"]["flags"]).parse_args(
        engines.normalise_vllm(["--model", "org/m", "--served_model_name", "a", "b", "-tp", "2", "-O3",
                                "--compilation-config.mode", "3", "--no-enable-prefix-caching"]))
    assert engines.value(parsed, "--model") == "org/m"
    assert engines.value(parsed, "--served-model-name") == ["a", "b"]
    assert engines.value(parsed, "-tp") == "2"
    assert engines.value(parsed, "--optimization-level") == "3"
    assert json.loads(engines.value(parsed, "--compilation-config")) == {"mode": "3"}
    assert engines.value(parsed, "--no-enable-prefix-caching") is True


def test_a_hub_model_is_served_with_the_local_tokenizer_under_its_own_name(tmp_path: Path) -> None:
    assert engines.mocker_argv(["--model-path", "Qwen/Qwen3-0.6B", "--speedup-ratio", "10"]) == \
        ["--model-path", engines.TOKENIZER, "--speedup-ratio", "10", "--model-name", "Qwen/Qwen3-0.6B"]
    assert engines.mocker_argv(["--model-path=org/m", "--model-name", "x"]) == \
        ["--model-path", engines.TOKENIZER, "--model-name", "x"]
    (tmp_path / "tokenizer.json").write_text("{}")
    assert engines.mocker_argv(["--model-path", str(tmp_path)]) == ["--model-path", str(tmp_path)]


def test_the_mocker_is_asked_for_what_the_engine_was_asked_to_serve() -> None:
    args = argparse.Namespace(endpoint=None, discovery_backend="kubernetes", request_plane="tcp", event_plane=None,
                              disaggregation_mode=None)
    assert engines.mocker_args(args, "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", None) == [
        "--model-path", engines.TOKENIZER, "--model-name", "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic",
        "--discovery-backend", "kubernetes", "--request-plane", "tcp"]
