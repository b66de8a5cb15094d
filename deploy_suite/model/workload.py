"""The schema of ``user_workload.yaml``: which fields the deployer acts on and what each must be.

The workload is frozen at handoff: a mistake in it is never patched here, the fix is always a
corrected file from user-interviewer (a new EXP_ROOT). Pure checks on already-parsed YAML (parsing
is ``deploy_suite.yamlio``'s job); the small lookup helpers are shared with ``deploy_suite.model.manifests``.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy_suite.errors import InputError

WORKLOAD_FIX = "ask user-interviewer for a corrected user_workload.yaml (frozen after handoff: a new EXP_ROOT)"


@dataclass(frozen=True)
class Workload:
    """The fields of ``user_workload.yaml`` the deployer acts on, plus the whole mapping."""

    data: Mapping[str, Any]
    kube_context: str
    namespace: str
    storage_class: str | None
    dgd_path: str
    dgd_sha256: str
    gpu_ceiling: int | None
    pinned: tuple[str, ...]
    precision: str | None = None  # preferences.precision: one of the two voices picking the download variant
    gpu_types: tuple[str, ...] = ()  # hardware[].gpu_type: the SKUs step 2 expects the GPU pods to land on


MISSING = object()  # a key that is absent (``None`` is a value YAML can hold)


def lookup(data: Mapping[str, Any], dotted: str) -> Any:
    """The value at ``a.b.c``, or :data:`MISSING` when a level is absent or not a mapping."""
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return MISSING
        node = node[part]
    return node


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_num(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_int_list(value: Any) -> bool:
    return isinstance(value, list) and all(is_int(v) for v in value)


def _is_sha(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value) is not None


def _is_timestamp(value: Any) -> bool:
    # An unquoted ISO timestamp is loaded by YAML as a datetime: accept both spellings.
    return isinstance(value, str | _dt.date)


# (field, required, check, expected type in words), in the order user_workload.yaml lays them out.
WORKLOAD_FIELDS: tuple[tuple[str, bool, Callable[[Any], bool], str], ...] = (
    ("profile.name", True, lambda v: isinstance(v, str) and bool(v.strip()), "a non-empty string"),
    ("profile.type", True, lambda v: v in ("chat", "agentic", "custom"), "one of chat, agentic, custom"),
    ("profile.description", True, lambda v: isinstance(v, str), "a string"),
    ("model.source", True, lambda v: isinstance(v, str) and bool(v.strip()), "a non-empty string"),
    ("model.revision", False, lambda v: isinstance(v, str), "a string"),
    ("kubernetes.kube_context", True, lambda v: isinstance(v, str) and bool(v.strip()), "a non-empty string"),
    ("kubernetes.namespace", True, lambda v: isinstance(v, str) and bool(v.strip()), "a non-empty string"),
    ("kubernetes.storage_class", False, lambda v: v is None or isinstance(v, str), "a string"),
    ("deployment.dgd_path", True, lambda v: isinstance(v, str) and bool(v.strip()), "a non-empty string"),
    ("deployment.dgd_sha256", True, _is_sha, "a 64-character lowercase hex SHA-256"),
    ("deployment.origin", False, lambda v: v in ("user", "recipe-confirmed", "agent-authored"),
     "one of user, recipe-confirmed, agent-authored"),
    ("deployment.origin_source", False, lambda v: isinstance(v, str), "a string"),
    ("traffic.input_tokens", False, lambda v: v is None or is_int(v), "an integer or null"),
    ("traffic.output_tokens", False, lambda v: v is None or is_int(v), "an integer or null"),
    ("traffic.request_rate", False, lambda v: v is None or _is_num(v), "a number or null"),
    ("traffic.concurrency", False, _is_int_list, "a list of integers"),
    ("preferences.precision", False, lambda v: v is None or isinstance(v, str), "a string"),
    ("preferences.framework", False, lambda v: v is None or isinstance(v, str), "a string"),
    ("preferences.mode", False, lambda v: v is None or isinstance(v, str), "a string"),
    ("resources.gpu_ceiling", False, lambda v: v is None or (is_int(v) and v > 0), "a positive integer or null"),
    ("resources.pinned", False, _is_str_list, "a list of strings"),
    ("budgets.gpu_hours", False, lambda v: v is None or _is_num(v), "a number or null"),
    ("budgets.wall_clock_hours", False, lambda v: v is None or _is_num(v), "a number or null"),
    ("budgets.max_failed_deploys", False, lambda v: v is None or _is_num(v), "a number or null"),
    ("objectives.ttft_ms_p95_max", False, lambda v: v is None or _is_num(v), "a number or null"),
    ("objectives.itl_ms_p95_max", False, lambda v: v is None or _is_num(v), "a number or null"),
    ("objectives.request_latency_ms_p95_max", False, lambda v: v is None or _is_num(v), "a number or null"),
    ("objectives.output_tput_per_gpu_min", False, lambda v: v is None or _is_num(v), "a number or null"),
    ("objectives.error_rate_max", False, lambda v: v is None or _is_num(v), "a number or null"),
    ("objectives.custom_slos", False, lambda v: isinstance(v, str), "a string"),
    ("artifacts.supporting_traces", False, _is_str_list, "a list of paths"),
    ("notes", False, lambda v: isinstance(v, str), "a string"),
    ("created_at", False, _is_timestamp, "an ISO-8601 string"),
)
# Sections that must be mappings when present (a scalar there would hide every field below it).
_SECTIONS = ("profile", "model", "kubernetes", "deployment", "traffic", "preferences", "resources",
             "budgets", "objectives", "artifacts")


def type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def parse_workload(documents: Sequence[Any], input_name: str = "--workload user_workload.yaml") -> Workload:
    """Judge the parsed documents of user_workload.yaml against :data:`WORKLOAD_FIELDS`."""
    if len(documents) != 1:
        raise InputError(input_name, f"holds {len(documents)} YAML documents, exactly one mapping is expected",
                         WORKLOAD_FIX)
    data = documents[0]
    if not isinstance(data, dict):
        raise InputError(input_name, f"is a YAML {type_name(data)}, a mapping is expected", WORKLOAD_FIX)
    for section in _SECTIONS:
        value = data.get(section, MISSING)
        if value is not MISSING and value is not None and not isinstance(value, dict):
            raise InputError(f"{input_name} field {section}", f"must be a mapping, got {type_name(value)}",
                             WORKLOAD_FIX)
    hardware = data.get("hardware", MISSING)
    if hardware is MISSING:
        raise InputError(f"{input_name} field hardware", "missing (at least one {gpu_type, gpu_count})", WORKLOAD_FIX)
    if not isinstance(hardware, list) or not hardware:
        raise InputError(f"{input_name} field hardware", "must be a non-empty list of {gpu_type, gpu_count}",
                         WORKLOAD_FIX)
    for index, entry in enumerate(hardware):
        where = f"{input_name} field hardware[{index}]"
        if not isinstance(entry, dict):
            raise InputError(where, f"must be a mapping, got {type_name(entry)}", WORKLOAD_FIX)
        if not isinstance(entry.get("gpu_type"), str) or not entry["gpu_type"]:
            raise InputError(f"{where}.gpu_type", f"must be a non-empty string, got {entry.get('gpu_type')!r}",
                             WORKLOAD_FIX)
        if not is_int(entry.get("gpu_count")) or entry["gpu_count"] < 1:
            raise InputError(f"{where}.gpu_count", f"must be a positive integer, got {entry.get('gpu_count')!r}",
                             WORKLOAD_FIX)
    for dotted, required, check, expected in WORKLOAD_FIELDS:
        value = lookup(data, dotted)
        # An optional field written null is unknown, as the contract allows (docs/procedure.md, "Unknowns").
        if value is MISSING or (value is None and not required):
            if required:
                raise InputError(f"{input_name} field {dotted}", f"missing (required, {expected})", WORKLOAD_FIX)
            continue
        if not check(value):
            raise InputError(f"{input_name} field {dotted}", f"must be {expected}, got {type_name(value)} "
                             f"{value!r}"[:200], WORKLOAD_FIX)
    storage_class = lookup(data, "kubernetes.storage_class")
    gpu_ceiling = lookup(data, "resources.gpu_ceiling")
    pinned = lookup(data, "resources.pinned")
    precision = lookup(data, "preferences.precision")
    return Workload(
        data=data,
        kube_context=data["kubernetes"]["kube_context"],
        namespace=data["kubernetes"]["namespace"],
        storage_class=(storage_class or None) if storage_class is not MISSING else None,
        dgd_path=data["deployment"]["dgd_path"],
        dgd_sha256=data["deployment"]["dgd_sha256"],
        gpu_ceiling=gpu_ceiling if is_int(gpu_ceiling) else None,
        pinned=tuple(pinned) if isinstance(pinned, list) else (),
        precision=(precision or None) if precision is not MISSING else None,
        gpu_types=tuple(entry["gpu_type"] for entry in hardware),
    )


def contract_dgd_candidates(dgd_path: str, exp_root: Path) -> list[Path]:
    """Where ``deployment.dgd_path`` may point: absolute, the canonical
    ``runs/<EXP_ID>/inputs/user_provided_dgd.yaml`` form (EXP_ROOT is ``runs/<EXP_ID>``: resolved
    inside EXP_ROOT when ``<EXP_ID>`` is its name, whatever its parent is called), or EXP_ROOT-relative."""
    path = Path(dgd_path).expanduser()
    if path.is_absolute():
        return [path]
    real_root = Path(os.path.realpath(exp_root))
    candidates = []
    parts = path.parts
    if len(parts) > 2 and parts[0] == "runs" and parts[1] in {real_root.name, Path(exp_root).name}:
        candidates.append(real_root.joinpath(*parts[2:]))
    if real_root.parent.name == "runs":
        candidates.append(real_root.parent.parent / path)
    candidates.append(real_root / path)
    return candidates
