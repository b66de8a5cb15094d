"""The knob table: what each name in ``resources.pinned`` means as fields of a DGD.

A pinned knob must keep its value between the baseline DGD and the candidate (docs/procedure.md,
"Pinned knobs"). Each knob is one row here: the documentation a reviewer reads and
the function that reads its value from a :class:`~deploy_suite.model.dgd.Dgd`. A pinned name missing
from the table cannot be compared: it is recorded as a limitation of the run, never a blocker
(:func:`unknown_knobs`; the contract leaves the knob names open, docs/procedure.md, "Pinned knobs").

The comparison is only as good as its baseline: :func:`judge_pinned` reads the DGD that
``deployment.dgd_path`` names once its SHA-256 is ``deployment.dgd_sha256``, and a baseline that
cannot be found, lies outside EXP_ROOT, has another hash or cannot be parsed is a blocker of its own
(docs/procedure.md, "Pinned knobs"): a check that cannot fail would pass every candidate.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy_suite.constants import GPU_PRODUCT_LABEL
from deploy_suite.errors import InputError
from deploy_suite.model.dgd import Component, Dgd, from_documents
from deploy_suite.model.files import hash_of, inside_exp_root, rel
from deploy_suite.model.frontend import router_mode, runs_frontend
from deploy_suite.model.manifests import precision_tokens
from deploy_suite.model.podspec import has_flag
from deploy_suite.yamlio import load_all

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
# The activation dtype: vLLM's and SGLang's --dtype (their flag tables in
# deploy_suite/offline/kind/dynamo_files/engine_flags.json), dynamo.trtllm's --torch-dtype (its own
# parser, ai-dynamo/dynamo components/src/dynamo/trtllm/backend_args.py). TensorRT-LLM's LLM
# workers state their precision through the checkpoint (the model name) or --quant-algo.
DTYPE_FLAGS = ("--dtype", "--torch-dtype")
QUANTIZATION_FLAGS = ("--quantization", "--quant-algo")
# The longest request a worker accepts: vLLM --max-model-len, SGLang --context-length (the same
# flag tables), dynamo.trtllm --max-seq-len (backend_args.py above).
MAX_LEN_FLAGS = ("--max-model-len", "--context-length", "--max-seq-len")


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


def _weights(c: Component) -> str | None:
    q = c.flag(*QUANTIZATION_FLAGS)
    if q:
        return q.lower()
    for model in (c.served_model, c.flag("--model"), c.flag("--model-path")):
        m = _PRECISION_RE.search(model or "")
        if m:
            return m.group(1).lower()
    return None


def _dtype(c: Component) -> str | None:
    """The worker's activation dtype, normalized (bfloat16 -> bf16); ``auto`` (the default) is none."""
    raw = (c.flag(*DTYPE_FLAGS) or "").lower()
    if raw in ("", "auto"):
        return None
    tokens = precision_tokens(raw)
    return sorted(tokens)[0] if len(tokens) == 1 else raw


def _precision(dgd: Dgd) -> str | None:
    weights = _joined(_weights(c) for c in _workers(dgd))
    dtype = _joined(_dtype(c) for c in _workers(dgd))
    if dtype is None:
        return weights  # as read before the dtype was: a DGD without --dtype keeps its value
    return f"{weights or 'unstated'}, dtype {dtype}"


def _router_mode(dgd: Dgd) -> str | None:
    """The frontends' router mode (frontend components, containers running dynamo.frontend and
    frontend sidecars): ``--router-mode``, else ``DYN_ROUTER_MODE`` (model/frontend.py); None = the default."""
    modes = [router_mode(c.tokens, c.env) for c in dgd.components if c.type == "frontend" or runs_frontend(c.tokens)]
    modes += [c.frontend_sidecar.router_mode for c in dgd.components if c.frontend_sidecar is not None]
    return _joined(modes)


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
            "worker --quantization (TRT-LLM --quant-algo) value, else an nvfp4/mxfp4/fp4/fp8/bf16/fp16/int8/int4/"
            "awq/gptq token in the served model name or model path (lowercase); with a worker --dtype (TRT-LLM "
            "--torch-dtype) other than auto, ', dtype <bf16|fp16|...>' added",
            _precision,
        ),
        Knob(
            "max_model_len",
            "per worker component: the longest request, vLLM --max-model-len, SGLang --context-length, "
            "TRT-LLM --max-seq-len",
            _per_worker(MAX_LEN_FLAGS),
        ),
        Knob(
            "router_mode",
            "the frontends' --router-mode (frontend components and sidecars), else DYN_ROUTER_MODE; "
            "unset = the frontend's default",
            _router_mode,
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


BASELINE_FIX = ("restore the baseline deployment.dgd_path names, as handed off (its SHA-256 is deployment.dgd_sha256 "
                "in user_workload.yaml), or ask user-interviewer for a new EXP_ROOT")
CHANGED_FIX = ("the candidate must keep every knob listed in resources.pinned; send it back to the hypothesis "
               "challenger")


@dataclass(frozen=True)
class Baseline:
    """The baseline DGD as read for the comparison, or why it could not be (``problem``)."""

    path: str  # EXP_ROOT-relative once found inside it, else deployment.dgd_path as written
    sha256: str | None = None
    dgd: Dgd | None = None
    problem: str | None = None

    def record(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "verified": self.dgd is not None, "problem": self.problem}


def read_baseline(found: Path | None, dgd_path: str, dgd_sha256: str | None, exp_root: Path) -> Baseline:
    """The DGD ``deployment.dgd_path`` names (``found``: where it resolved, None when no candidate
    path is a file), read only inside EXP_ROOT and once its SHA-256 is ``dgd_sha256``."""
    where = f"the baseline deployment.dgd_path {dgd_path!r}"
    if found is None:
        return Baseline(dgd_path, problem=f"{where} names no file (looked for from EXP_ROOT), so the pinned knobs "
                        "cannot be compared")
    try:
        real = inside_exp_root(found, exp_root, where)
        shown = rel(real, exp_root)
        actual = hash_of(real, where)
        if actual != dgd_sha256:
            return Baseline(shown, actual, problem=f"{where} ({shown}) has SHA-256 {actual}, user_workload.yaml's "
                            f"deployment.dgd_sha256 is {dgd_sha256}: not the baseline that was handed off")
        named = f"{where} ({shown})"
        return Baseline(shown, actual, from_documents(load_all(real, named, BASELINE_FIX), named))
    except InputError as exc:
        return Baseline(dgd_path, problem=f"{exc.input_name}: {exc.problem}")


@dataclass(frozen=True)
class PinnedVerdict:
    """``resources.pinned`` judged: the evidence, each blocker as (message, fix), and the pinned
    names the table cannot compare (limitations of the run)."""

    evidence: dict[str, Any] = field(default_factory=dict)
    blockers: tuple[tuple[str, str], ...] = ()
    limitations: tuple[str, ...] = ()


def judge_pinned(pinned: Sequence[str], baseline: Callable[[], Baseline], candidate: Dgd) -> PinnedVerdict:
    """Every pinned knob's value in the baseline and the candidate; a baseline that cannot be read
    (``baseline`` is called only when a known knob is pinned) or a changed value blocks. A name the
    table does not know is a limitation: the check of it is the challenger's, never a dead end here."""
    if not pinned:
        return PinnedVerdict()
    unknown = unknown_knobs(pinned)
    limitations = tuple(f"resources.pinned knob {name!r} has no mapping to DGD fields in this harness (known: "
                        f"{', '.join(sorted(KNOBS))}): not compared" for name in unknown)
    blockers: list[tuple[str, str]] = []
    known = [p for p in pinned if p not in unknown]
    evidence: dict[str, Any] = {"knobs": {}, "baseline": None, "not_compared": list(unknown)}
    if not known:
        return PinnedVerdict(evidence, (), limitations)
    base = baseline()
    evidence["baseline"] = base.record()
    if base.dgd is None:
        blockers.append((str(base.problem), BASELINE_FIX))
        return PinnedVerdict(evidence, tuple(blockers), limitations)
    before, after = read(base.dgd, known), read(candidate, known)
    for knob in known:
        same = before[knob] == after[knob]
        evidence["knobs"][knob] = {"baseline": before[knob], "candidate": after[knob], "same": same}
        if not same:
            blockers.append((f"pinned knob {knob} changed: baseline {before[knob]!r}, candidate {after[knob]!r}",
                             CHANGED_FIX))
    return PinnedVerdict(evidence, tuple(blockers), limitations)
