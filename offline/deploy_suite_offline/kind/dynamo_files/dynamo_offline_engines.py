"""``python3 -m dynamo.vllm|dynamo.sglang|dynamo.trtllm`` (and ``dynamo.mocker``) in the kind provider's image.

The image holds the ai-dynamo 1.6.1 wheel but no engine, so each engine's ``__main__`` is replaced by
a call to :func:`main`: the arguments are parsed as ai-dynamo 1.6.1 parses them (its own Dynamo
argument groups, then the engine's flags from ``engine_flags.json``, or, for TensorRT-LLM, its own
parser as is), an argument the engine would refuse ends the process with the parser's own message
and status, and ``dynamo.mocker`` then serves the requested model. A model that is not a local
directory (a hub name: the hub is never reachable here) is served with the image's tokenizer under
its own name. What is and is not checked: docs/offline-cluster.md, "Engines in the Dynamo image".

Runs inside the image only (it imports ``dynamo``, never ``deploy_suite``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import types
from pathlib import Path
from typing import Any

TOKENIZER = "/opt/dynamo/tokenizer"
FLAGS = Path(__file__).with_name("dynamo_offline_engine_flags.json")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "config.json")


def _say(message: str) -> None:
    print(f"dynamo-offline: {message}", file=sys.stderr, flush=True)


def _table(engine: str) -> dict[str, Any]:
    table: dict[str, Any] = json.loads(FLAGS.read_text())[engine]
    return table


def local_model(model: str | None) -> str | None:
    """``model`` when it is a local model directory, else None (a hub name, or nothing)."""
    if model and Path(model).is_dir() and any((Path(model) / f).is_file() for f in _TOKENIZER_FILES):
        return model
    return None


def engine_parser(flags: dict[str, str]) -> argparse.ArgumentParser:
    """A parser that knows the engine's option strings and how many values each takes.

    Like the engines' own (``FlexibleArgumentParser(add_help=False)``, ``ArgumentParser(add_help=False)``),
    it is named after ``sys.argv[0]`` and refuses what it does not know with argparse's
    ``error: unrecognized arguments: ...`` and status 2."""
    parser = argparse.ArgumentParser(add_help=False)
    for flag, arity in flags.items():
        dest = "o" + re.sub(r"\W", "_", flag)
        if arity == "0":
            parser.add_argument(flag, dest=dest, action="store_true")
        else:
            parser.add_argument(flag, dest=dest, nargs=None if arity == "1" else arity,
                                metavar=flag.lstrip("-").upper().replace("-", "_"))
    return parser


def value(namespace: argparse.Namespace, flag: str) -> Any:
    return getattr(namespace, "o" + re.sub(r"\W", "_", flag), None)


def normalise_vllm(args: list[str]) -> list[str]:
    """What vLLM's FlexibleArgumentParser does before parsing: ``_`` -> ``-`` in option names,
    ``-O3`` -> ``--optimization-level 3``, ``--config-arg.key value`` -> ``--config-arg <json>``."""
    out: list[str] = []
    dotted: dict[str, dict[str, Any]] = {}
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg.startswith("--"):
            name, eq, rest = arg.partition("=")
            head, dot, tail = name[2:].partition(".")
            name = "--" + head.replace("_", "-") + dot + tail
            if dot:
                if not eq and i + 1 < len(args):
                    rest, skip = args[i + 1], True
                dotted.setdefault(name.split(".")[0], {})[tail] = rest
                continue
            out.append(name + eq + rest)
        elif arg.startswith("-O") and arg != "-O":
            out += ["--optimization-level", arg[3:] if arg[2:3] == "=" else arg[2:]]
        elif arg == "-O" and i + 1 < len(args) and args[i + 1] in {"0", "1", "2", "3"}:
            out.append("--optimization-level")
        else:
            out.append(arg)
    for name, values in dotted.items():
        out += [name, json.dumps(values)]
    return out


def _dynamo_parser(description: str, *groups: Any) -> argparse.ArgumentParser:
    from dynamo.common.configuration.groups.router_args import register_worker_router_help
    from dynamo.common.configuration.groups.runtime_args import DynamoRuntimeArgGroup

    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawTextHelpFormatter,
                                     allow_abbrev=False)
    DynamoRuntimeArgGroup().add_arguments(parser)
    for group in groups:
        group.add_arguments(parser)
    register_worker_router_help(parser)
    return parser


def _split(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Dynamo's own arguments, then the router's, split as ai-dynamo splits them (docs/offline-cluster.md,
    "Engines in the Dynamo image")."""
    from dynamo.common.configuration.groups.router_args import parse_worker_router_config

    dynamo_args, unknown = parser.parse_known_args(argv)
    _router, unknown = parse_worker_router_config(unknown)
    return dynamo_args, list(unknown)


def parse_vllm(argv: list[str]) -> tuple[argparse.Namespace, str | None, str | None]:
    from dynamo.vllm.backend_args import DynamoVllmArgGroup

    dynamo_args, unknown = _split(_dynamo_parser("Dynamo vLLM worker configuration", DynamoVllmArgGroup()), argv)
    engine = engine_parser(_table("vllm")["flags"]).parse_args(normalise_vllm(unknown))
    served = value(engine, "--served-model-name")
    model = value(engine, "--model") or "Qwen/Qwen3-0.6B"  # ai-dynamo's default for dynamo.vllm
    return dynamo_args, model, served[0] if isinstance(served, list) and served else served


def parse_sglang(argv: list[str]) -> tuple[argparse.Namespace, str | None, str | None]:
    from dynamo.sglang.backend_args import DynamoSGLangArgGroup

    dynamo_args, unknown = _split(_dynamo_parser("Dynamo SGLang worker configuration", DynamoSGLangArgGroup()), argv)
    engine = engine_parser(_table("sglang")["flags"]).parse_args(unknown)
    return dynamo_args, value(engine, "--model-path") or value(engine, "--model"), value(engine, "--served-model-name")


def parse_trtllm(argv: list[str]) -> tuple[argparse.Namespace, str | None, str | None]:
    """ai-dynamo's own TensorRT-LLM parser, run as is; of tensorrt_llm it reads four defaults only."""
    defaults = _table("tensorrt_llm")["build_config_defaults"]
    fields = {name: types.SimpleNamespace(default=default) for name, default in defaults.items()}
    llmapi = types.ModuleType("tensorrt_llm.llmapi")
    llmapi.BuildConfig = type("BuildConfig", (), {"model_fields": fields})  # type: ignore[attr-defined]
    sys.modules.setdefault("tensorrt_llm", types.ModuleType("tensorrt_llm"))
    sys.modules.setdefault("tensorrt_llm.llmapi", llmapi)
    from dynamo.trtllm.args import parse_args

    config = parse_args(argv)
    endpoint = f"dyn://{config.namespace}.{config.component}.{config.endpoint}"
    return argparse.Namespace(endpoint=endpoint, discovery_backend=getattr(config, "discovery_backend", None),
                              request_plane=getattr(config, "request_plane", None),
                              event_plane=getattr(config, "event_plane", None),
                              disaggregation_mode=getattr(config, "disaggregation_mode", None)), \
        config.model, config.served_model_name


PARSERS = {"vllm": parse_vllm, "sglang": parse_sglang, "trtllm": parse_trtllm}


def mocker_args(dynamo_args: argparse.Namespace, model: str | None, served: str | None) -> list[str]:
    """``dynamo.mocker``'s arguments for what the engine was asked to serve."""
    local = local_model(model)
    name = served or model or "mocker"
    if local is None:
        _say(f"model {model!r} is not a local directory and no hub is reachable: serving it as {name!r} "
             f"with the tokenizer at {TOKENIZER}")
    out = ["--model-path", local or TOKENIZER, "--model-name", name]
    for option in ("endpoint", "discovery_backend", "request_plane", "event_plane"):
        given = getattr(dynamo_args, option, None)
        if given:
            out += ["--" + option.replace("_", "-"), str(given)]
    mode = str(getattr(getattr(dynamo_args, "disaggregation_mode", None), "value",
                       getattr(dynamo_args, "disaggregation_mode", None)) or "")
    if mode in ("prefill", "decode"):
        out += ["--disaggregation-mode", mode]
    return out


def mocker_argv(argv: list[str]) -> list[str]:
    """``dynamo.mocker``'s own arguments, a ``--model-path`` the hub would serve replaced by the
    image's tokenizer (and its name kept as ``--model-name`` unless one is given)."""
    out = list(argv)
    for i, arg in enumerate(out):
        path = out[i + 1] if arg == "--model-path" and i + 1 < len(out) else \
            arg.removeprefix("--model-path=") if arg.startswith("--model-path=") else None
        if path is None or local_model(path) is not None:
            continue
        out[i:i + (2 if arg == "--model-path" else 1)] = ["--model-path", TOKENIZER]
        if not any(a == "--model-name" or a.startswith("--model-name=") for a in out):
            out += ["--model-name", path]
        _say(f"model {path!r} is not a local directory and no hub is reachable: using the tokenizer at {TOKENIZER}")
        break
    return out


def main(engine: str) -> None:
    argv = sys.argv[1:]
    if engine == "mocker":
        args = mocker_argv(argv)
    else:
        dynamo_args, model, served = PARSERS[engine](argv)
        if os.environ.get("DYN_NAMESPACE") is None and getattr(dynamo_args, "namespace", None):
            os.environ["DYN_NAMESPACE"] = str(dynamo_args.namespace)
        args = mocker_args(dynamo_args, model, served)
        _say(f"dynamo.{engine} arguments accepted; dynamo.mocker serves {args[3]!r} ({' '.join(args)})")
    sys.argv = [sys.argv[0], *args]
    from dynamo.mocker.main import main as run_mocker

    run_mocker()
