"""The knob table: what each name in ``resources.pinned`` means as fields of a DGD.

A pinned knob must keep its value between the baseline DGD and the candidate (``README.md``,
step 2: ``resources.pinned``). Each knob is one row here: the documentation a reviewer reads and
the function that reads its value from a :class:`~deploy_suite.model.dgd.Dgd`. Names missing from the
table are refused before anything is compared (:func:`unknown_knobs`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from deploy_suite.constants import GPU_PRODUCT_LABEL
from deploy_suite.model.dgd import Component, Dgd
from deploy_suite.model.podspec import has_flag

KnobValue = str | int | None | dict[str, Any]

_PRECISION_TOKENS = ("nvfp4", "mxfp4", "fp4", "fp8", "bf16", "fp16", "int8", "int4", "awq", "gptq")
_PRECISION_RE = re.compile(r"(?<![a-z0-9])(" + "|".join(_PRECISION_TOKENS) + r")(?![a-z0-9])", re.IGNORECASE)
_FRAMEWORK_HINTS = (
    ("tensorrtllm", "trtllm"),
    ("trtllm", "trtllm"),
    ("vllm", "vllm"),
    ("sglang", "sglang"),
    ("mocker", "mocker"),
)
TP_FLAGS = ("--tensor-parallel-size", "--tensor_parallel_size", "--tp-size", "--tp")
PP_FLAGS = ("--pipeline-parallel-size", "--pipeline_parallel_size", "--pp-size", "--pp")
DP_FLAGS = ("--data-parallel-size", "--data_parallel_size", "--dp-size", "--dp")
PREFILL_FLAGS = ("--is-prefill-worker",)


@dataclass(frozen=True)
class Knob:
    name: str
    doc: str
    read: Callable[[Dgd], KnobValue]


def _workers(dgd: Dgd) -> list[Component]:
    return [c for c in dgd.components if c.is_worker]


def _joined(values: Iterable[str | None]) -> str | None:
    """One value when the workers agree, else the sorted distinct values joined by ',' (still comparable)."""
    distinct = sorted({v for v in values if v})
    return ",".join(distinct) if distinct else None


def _int_or_raw(value: str | None) -> int | str | None:
    if value is None:
        return None
    return int(value) if value.isdigit() else value


def _framework(dgd: Dgd) -> str | None:
    if dgd.backend_framework:
        return dgd.backend_framework.lower()
    for c in _workers(dgd) or dgd.components:
        hay = f"{c.image or ''} {' '.join(c.tokens)}".lower()
        for hint, name in _FRAMEWORK_HINTS:
            if hint in hay:
                return name
    return None


def _is_prefill(c: Component) -> bool:
    mode = c.flag("--disaggregation-mode")
    return c.type == "prefill" or has_flag(c.tokens, PREFILL_FLAGS) or mode == "prefill"


def _mode(dgd: Dgd) -> str:
    # A prefill worker is what makes a graph disaggregated: the mocker "agg" recipe runs its single
    # worker as type decode, so a decode-only graph is still aggregated.
    return "disagg" if any(_is_prefill(c) for c in dgd.components) else "agg"


def _model(dgd: Dgd) -> str | None:
    return _joined(c.served_model for c in _workers(dgd))


def _precision(dgd: Dgd) -> str | None:
    found = []
    for c in _workers(dgd):
        q = c.flag("--quantization")
        if q:
            found.append(q.lower())
            continue
        for model in (c.served_model, c.flag("--model"), c.flag("--model-path")):
            m = _PRECISION_RE.search(model or "")
            if m:
                found.append(m.group(1).lower())
                break
    return _joined(found)


def _gpu_type(dgd: Dgd) -> str | None:
    found = []
    for c in _workers(dgd):
        product = c.node_selector.get(GPU_PRODUCT_LABEL)
        if product is None and c.scheduling.node_affinity:
            ins = [
                r
                for t in c.scheduling.node_affinity
                for r in t.match_expressions
                if r.key == GPU_PRODUCT_LABEL and r.operator == "In"
            ]
            product = "|".join(sorted({v for r in ins for v in r.values})) or None
        found.append(product)
    return _joined(found)


def _per_worker(flags: tuple[str, ...]) -> Callable[[Dgd], KnobValue]:
    def read(dgd: Dgd) -> KnobValue:
        return {c.name: _int_or_raw(c.flag(*flags)) for c in _workers(dgd)}

    return read


KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob(
            "framework",
            "spec.backendFramework, else inferred from the worker image / module name (vllm, sglang, trtllm, mocker)",
            _framework,
        ),
        Knob(
            "mode",
            "'disagg' when a component is a prefill worker (type/subComponentType prefill, "
            "--is-prefill-worker or --disaggregation-mode prefill), else 'agg'",
            _mode,
        ),
        Knob(
            "model",
            "served model of the workers: --served-model-name, else --model-name, --model, "
            "--model-path ($VAR expanded); distinct values joined by ','",
            _model,
        ),
        Knob(
            "precision",
            "worker --quantization value, else an nvfp4/mxfp4/fp4/fp8/bf16/fp16/int8/int4/awq/gptq "
            "token in the served model name or model path (lowercase)",
            _precision,
        ),
        Knob(
            "tensor_parallel_size",
            "per worker component: --tensor-parallel-size/--tp-size/--tp",
            _per_worker(TP_FLAGS),
        ),
        Knob(
            "pipeline_parallel_size",
            "per worker component: --pipeline-parallel-size/--pp-size/--pp",
            _per_worker(PP_FLAGS),
        ),
        Knob(
            "data_parallel_size",
            "per worker component: --data-parallel-size/--dp-size/--dp",
            _per_worker(DP_FLAGS),
        ),
        Knob(
            "gpu_type",
            "worker nodeSelector nvidia.com/gpu.product (or required node affinity In values)",
            _gpu_type,
        ),
        Knob("replicas", "per component: replicas", lambda d: {c.name: c.replicas for c in d.components}),
        Knob(
            "gpus_per_worker",
            "per worker component: GPUs per replica (per-pod GPUs x multinode nodeCount)",
            lambda d: {c.name: c.gpus_per_replica for c in _workers(d)},
        ),
    )
}


def unknown_knobs(names: Iterable[str]) -> list[str]:
    """Names that are not in :data:`KNOBS` (a pinned list must be checked with this first)."""
    return [n for n in names if n not in KNOBS]


def read(dgd: Dgd, names: Iterable[str] | None = None) -> dict[str, KnobValue]:
    """Knob name -> value per :data:`KNOBS` (all of them by default); unknown names raise
    :class:`KeyError` (check a pinned list with :func:`unknown_knobs` first)."""
    wanted = list(KNOBS) if names is None else list(names)
    bad = unknown_knobs(wanted)
    if bad:
        raise KeyError(f"unknown knob(s): {', '.join(bad)}; known: {', '.join(KNOBS)}")
    return {n: KNOBS[n].read(dgd) for n in wanted}


def changed_knobs(before: Dgd, after: Dgd, names: Iterable[str]) -> dict[str, tuple[KnobValue, KnobValue]]:
    """Knobs among ``names`` whose value differs between two DGDs: name -> (before, after)."""
    wanted = list(names)
    a, b = read(before, wanted), read(after, wanted)
    return {n: (a[n], b[n]) for n in wanted if a[n] != b[n]}
