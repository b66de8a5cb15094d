"""Print the option strings an engine's own ``add_cli_args`` registers, as JSON ``{flag: nargs}``.

How ``offline/deploy_suite_offline/kind/dynamo_files/engine_flags.json`` was read (docs/offline-cluster.md,
"Engines in the Dynamo image"). Run it with the Python of a scratch virtual environment that holds
the engine's wheel installed ``--no-deps`` plus its pure-Python dependencies (vLLM 0.31.0: packaging,
numpy, pyyaml, regex, psutil, requests, cachetools, cloudpickle, pydantic, msgspec, openai, fastapi,
prometheus_client, pillow, ``transformers>=5``; SGLang 0.5.21: msgspec, pydantic):

    python scripts/engine_flags.py vllm > vllm.json

Modules that are absent (torch, triton, CUDA kernels, ...) are replaced by inert ones so the
engine's argument module imports; only the parser's option strings and arities are kept, never
defaults, types or choices. vLLM builds the default of each config field to write its help; a
default that needs a real torch is taken as None (it is not kept anyway).
"""

from __future__ import annotations

# ruff: noqa: PLC0415 - the engine's modules import only once the inert finder is in place
import abc
import argparse
import copy
import dataclasses
import importlib.abc
import importlib.machinery
import importlib.metadata
import json
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

MISSING: set[str] = set()


class _AnyMeta(abc.ABCMeta):
    """A class that answers every attribute, item and call with another such class."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _any(name)

    def __getitem__(cls, key: Any) -> Any:
        return cls

    def __setitem__(cls, key: Any, value: Any) -> None:
        return None

    def __or__(cls, other: Any) -> Any:
        return cls

    def __ror__(cls, other: Any) -> Any:
        return cls

    def __iter__(cls) -> Any:
        return iter(())


def _any(name: str) -> Any:
    from pydantic_core import core_schema

    def attr(self: Any, n: str) -> Any:
        if n.startswith("__"):
            raise AttributeError(n)
        return _any(n)

    return _AnyMeta(name, (), {
        "__get_pydantic_core_schema__": classmethod(lambda c, s, h: core_schema.any_schema()),
        "__init__": lambda self, *a, **k: None, "__call__": lambda self, *a, **k: _any(name),
        "__getattr__": attr, "__iter__": lambda self: iter(()), "__setitem__": lambda self, k, v: None,
        "__getitem__": lambda self, k: _any("item"), "__bool__": lambda self: False, "__int__": lambda self: 0,
        "__index__": lambda self: 0, "__float__": lambda self: 0.0, "__str__": lambda self: name,
        "__len__": lambda self: 0, "__add__": lambda self, o: o, "__radd__": lambda self, o: o,
        "__mul__": lambda self, o: self, "__rmul__": lambda self, o: self,
        "__eq__": lambda self, o: str(self) == str(o), "__hash__": lambda self: 0,
        "__lt__": lambda self, o: False, "__gt__": lambda self, o: False,
        "__enter__": lambda self: self, "__exit__": lambda self, *a: False})


class _InertModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _any(name)


class _InertFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds, last, the top-level modules nothing else finds (and their submodules)."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: types.ModuleType | None = None,
                  ) -> importlib.machinery.ModuleSpec | None:
        top = name.split(".", maxsplit=1)[0]
        if name.startswith("_") or top in ("msvcrt", "winreg") or (top != name and top not in MISSING):
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            try:
                found = finder.find_spec(name, path, target)
            except Exception:
                found = None
            if found is not None:
                return None
        MISSING.add(top)
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _InertModule(spec.name)
        module.__path__ = []
        module.__version__ = "2.5.0"  # type: ignore[attr-defined]
        module.__file__ = "/nonexistent/" + spec.name.replace(".", "/") + ".py"
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _version(real: Callable[[str], str]) -> Callable[[str], str]:
    def version(name: str) -> str:
        try:
            return real(name)
        except importlib.metadata.PackageNotFoundError:
            return "2.5.0"
    return version


def _safe(factory: Callable[[], Any]) -> Callable[[], Any]:
    def build() -> Any:
        try:
            return factory()
        except Exception:
            return None
    return build


def _safe_fields(real: Callable[[Any], tuple[dataclasses.Field[Any], ...]]) -> Callable[[Any], tuple[Any, ...]]:
    def fields(cls: Any) -> tuple[Any, ...]:
        out = []
        for original in real(cls):
            field: Any = copy.copy(original)
            if field.default_factory is not dataclasses.MISSING:
                field.default_factory = _safe(field.default_factory)
            factory = getattr(field.default, "default_factory", None)
            if factory is not None:
                field.default = copy.copy(field.default)
                field.default.default_factory = _safe(factory)
            out.append(field)
        return tuple(out)
    return fields


def _arity(action: argparse.Action) -> str:
    return "0" if action.nargs == 0 else "1" if action.nargs is None else str(action.nargs)


def main(engine: str) -> int:
    sys.meta_path.append(_InertFinder())
    importlib.metadata.version = _version(importlib.metadata.version)  # type: ignore[assignment]
    if engine == "sglang":
        from sglang.srt.server_args import ServerArgs

        parser = argparse.ArgumentParser(add_help=False)
        ServerArgs.add_cli_args(parser)
    elif engine == "vllm":
        from vllm.engine import arg_utils
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        arg_utils.fields = _safe_fields(dataclasses.fields)
        parser = FlexibleArgumentParser(add_help=False)
        arg_utils.AsyncEngineArgs.add_cli_args(parser, async_args_only=False)
    else:
        print(f"unknown engine {engine!r}: vllm or sglang", file=sys.stderr)
        return 2
    flags = {o: _arity(a) for a in parser._actions for o in a.option_strings}
    print(f"{len(flags)} flags; inert modules: {', '.join(sorted(MISSING))}", file=sys.stderr)
    json.dump(dict(sorted(flags.items())), sys.stdout, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ""))
