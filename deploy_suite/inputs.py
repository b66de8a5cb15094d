"""Step 1 of the spec: judge the handed-off inputs, then create the deployment directory.

Everything here is local file work; nothing talks to a cluster. The order is the contract's
integrity order: (1) the workload's SHA-256 is recomputed before anything in it is read,
(2) the DGD's SHA-256 is recomputed before any copy, (3) at iteration 0 the assigned DGD must be
the contract's ``deployment.dgd_path`` / ``dgd_sha256``. Only then is
``<EXP_ROOT>/artifacts/deploy-iter-NNN/applied_manifests/`` created and filled with run-scoped
copies under stable names. Every refusal is an ``InputError`` naming the input and the fix.

Judging option values (iteration, provenance, hash syntax) happens earlier, in
``deploy_suite.settings``; recording the result in the ledger is ``deploy_suite.runstate``'s job.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy_suite import dgd as dgd_mod
from deploy_suite import ledger as ledger_mod
from deploy_suite.errors import DeploymentLocked, InputError, LedgerError
from deploy_suite.settings import Settings, SupportInput, deploy_id
from deploy_suite.yamlio import load_yaml_documents

WORKLOAD_FIX = "ask user-interviewer for a corrected user_workload.yaml (frozen after handoff: a new EXP_ROOT)"
STABLE_NAMES = {
    "deploy": "deploy.yaml",
    "model-cache": "model-cache.yaml",
    "model-download": "model-download.yaml",
    "model-validate": "model-validate.yaml",
}
DGD_KIND = "DynamoGraphDeployment"
DGD_API_VERSIONS = ("nvidia.com/v1alpha1", "nvidia.com/v1beta1")

# Precision tokens as they appear in engine args, model names and variant file names. Exact
# token matches win; otherwise a family match (an "fp4" DGD takes an "nvfp4" download variant).
_PRECISION_ALIASES = {
    "fp8": "fp8", "float8": "fp8",
    "fp4": "fp4", "nvfp4": "nvfp4", "mxfp4": "mxfp4",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16",
}
_PRECISION_FAMILY = {"fp8": "fp8", "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4", "bf16": "bf16", "fp16": "fp16"}
_PRECISION_TOKEN = re.compile(
    r"(?<![a-z0-9])(" + "|".join(sorted(_PRECISION_ALIASES, key=len, reverse=True)) + r")(?![a-z0-9])"
)


# --- small value types -----------------------------------------------------------------------


@dataclass(frozen=True)
class FileRef:
    """A handed-off file: its resolved path, its EXP_ROOT-relative path and the SHA-256 seen."""

    path: Path
    rel: str
    sha256: str

    def record(self) -> dict[str, str]:
        return {"path": self.rel, "sha256": self.sha256}


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
    max_failed_deploys: float | None


@dataclass(frozen=True)
class PreviousDeployment:
    """What the previous iteration's ledger says must be retired (iteration > 0)."""

    root: Path
    ledger_path: Path
    iteration: int | None
    dgd_name: str
    kube_context: str
    namespace: str
    status: str | None

    def record(self, exp_root: Path) -> dict[str, Any]:
        return {
            "root": rel(self.root, exp_root),
            "ledger": rel(self.ledger_path, exp_root),
            "iteration": self.iteration,
            "dgd_name": self.dgd_name,
            "kube_context": self.kube_context,
            "namespace": self.namespace,
            "status": self.status,
        }


@dataclass(frozen=True)
class AppliedManifest:
    """A run-scoped copy under ``applied_manifests/`` and the source it came from."""

    type: str
    path: Path
    source: FileRef

    @property
    def source_name(self) -> str:
        return self.source.path.name

    def record(self, exp_root: Path) -> dict[str, str]:
        return {
            "type": self.type,
            "path": rel(self.path, exp_root),
            "source_path": self.source.rel,
            "source_name": self.source_name,
            "sha256": sha256_file(self.path),
            "source_sha256": self.source.sha256,
        }


@dataclass(frozen=True)
class Resume:
    """A rerun of the same candidate in its existing directory."""

    previous: Mapping[str, Any] | None  # the earlier ledger, None if the run died before writing one
    kept: tuple[str, ...] = ()
    recopied: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


@dataclass(frozen=True)
class Prepared:
    """Result of step 1: everything later steps need about the inputs."""

    exp_root: Path
    deploy_root: Path
    workload_file: FileRef
    workload: Workload
    source_dgd: FileRef
    dgd_name: str
    precision: tuple[str, ...]
    manifests: tuple[AppliedManifest, ...]
    unselected: tuple[FileRef, ...]
    previous: PreviousDeployment | None
    resume: Resume | None

    def manifest_paths(self) -> dict[str, Path]:
        return {m.type: m.path for m in self.manifests}

    def sources(self) -> tuple[FileRef, ...]:
        """Every handed-off file, for the end-of-run check that none was modified."""
        return (self.workload_file, *(m.source for m in self.manifests if m.type != "deploy"),
                self.source_dgd, *self.unselected)


# (deploy_root, resumed, earlier ledger or None)
OnDirectory = Callable[[Path, bool, Mapping[str, Any] | None], None]


# --- helpers ---------------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def rel(path: Path, exp_root: Path) -> str:
    """EXP_ROOT-relative POSIX path (callers have already checked ``path`` is inside)."""
    return Path(os.path.relpath(os.path.realpath(path), os.path.realpath(exp_root))).as_posix()


def _display(path: Path, base: Path) -> str:
    try:
        return Path(os.path.abspath(path)).relative_to(os.path.abspath(base)).as_posix()
    except ValueError:
        return str(path)


def inside_exp_root(path: Path, exp_root: Path, input_name: str) -> Path:
    """Resolve every symlink; refuse anything that lands outside EXP_ROOT."""
    real_root = Path(os.path.realpath(exp_root))
    real = Path(os.path.realpath(path))
    if real == real_root or real.is_relative_to(real_root):
        return real
    lexical = Path(os.path.normpath(os.path.abspath(path)))
    if lexical.is_relative_to(Path(os.path.normpath(os.path.abspath(exp_root)))) or lexical != real:
        problem = f"{path} is a symlink (or goes through one) to {real}, outside EXP_ROOT {real_root}"
    else:
        problem = f"{path} is outside EXP_ROOT {real_root}"
    raise InputError(input_name, problem,
                     "copy the file into the experiment root: handed-off inputs live inside EXP_ROOT")


def _existing_file(path: Path, exp_root: Path, input_name: str, fix: str) -> Path:
    real = inside_exp_root(path, exp_root, input_name)
    if not real.exists():
        raise InputError(input_name, f"{_display(path, exp_root)}: file not found", fix)
    if not real.is_file():
        raise InputError(input_name, f"{_display(path, exp_root)} is not a regular file", fix)
    return real


def _check_sha(real: Path, expected: str, input_name: str, fix: str) -> str:
    try:
        actual = sha256_file(real)
    except OSError as exc:
        raise InputError(input_name, f"cannot be read ({exc.strerror})", "check the file permissions") from exc
    if actual != expected:
        raise InputError(input_name, f"SHA-256 is {actual}, the handoff says {expected}", fix)
    return actual


# --- user_workload.yaml ----------------------------------------------------------------------

_MISSING = object()


def _get(data: Mapping[str, Any], dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_num(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_int_list(value: Any) -> bool:
    return isinstance(value, list) and all(_is_int(v) for v in value)


def _is_sha(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value) is not None


def _is_timestamp(value: Any) -> bool:
    # An unquoted ISO timestamp is loaded by YAML as a datetime: accept both spellings.
    return isinstance(value, str | _dt.date)


# (field, required, check, expected type in words), in the order of contracts section 2.
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
    ("traffic.input_tokens", False, lambda v: v is None or _is_int(v), "an integer or null"),
    ("traffic.output_tokens", False, lambda v: v is None or _is_int(v), "an integer or null"),
    ("traffic.request_rate", False, lambda v: v is None or _is_num(v), "a number or null"),
    ("traffic.concurrency", False, _is_int_list, "a list of integers"),
    ("preferences.precision", False, lambda v: v is None or isinstance(v, str), "a string"),
    ("preferences.framework", False, lambda v: v is None or isinstance(v, str), "a string"),
    ("preferences.mode", False, lambda v: v is None or isinstance(v, str), "a string"),
    ("resources.gpu_ceiling", False, lambda v: v is None or (_is_int(v) and v > 0), "a positive integer or null"),
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


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def parse_workload(documents: Sequence[Any], input_name: str = "--workload user_workload.yaml") -> Workload:
    """Judge the parsed documents of user_workload.yaml against contracts section 2."""
    if len(documents) != 1:
        raise InputError(input_name, f"holds {len(documents)} YAML documents, exactly one mapping is expected",
                         WORKLOAD_FIX)
    data = documents[0]
    if not isinstance(data, dict):
        raise InputError(input_name, f"is a YAML {_type_name(data)}, a mapping is expected", WORKLOAD_FIX)
    for section in _SECTIONS:
        value = data.get(section, _MISSING)
        if value is not _MISSING and value is not None and not isinstance(value, dict):
            raise InputError(f"{input_name} field {section}", f"must be a mapping, got {_type_name(value)}",
                             WORKLOAD_FIX)
    hardware = data.get("hardware", _MISSING)
    if hardware is _MISSING:
        raise InputError(f"{input_name} field hardware", "missing (at least one {gpu_type, gpu_count})", WORKLOAD_FIX)
    if not isinstance(hardware, list) or not hardware:
        raise InputError(f"{input_name} field hardware", "must be a non-empty list of {gpu_type, gpu_count}",
                         WORKLOAD_FIX)
    for index, entry in enumerate(hardware):
        where = f"{input_name} field hardware[{index}]"
        if not isinstance(entry, dict):
            raise InputError(where, f"must be a mapping, got {_type_name(entry)}", WORKLOAD_FIX)
        if not isinstance(entry.get("gpu_type"), str) or not entry["gpu_type"]:
            raise InputError(f"{where}.gpu_type", f"must be a non-empty string, got {entry.get('gpu_type')!r}",
                             WORKLOAD_FIX)
        if not _is_int(entry.get("gpu_count")) or entry["gpu_count"] < 1:
            raise InputError(f"{where}.gpu_count", f"must be a positive integer, got {entry.get('gpu_count')!r}",
                             WORKLOAD_FIX)
    for dotted, required, check, expected in WORKLOAD_FIELDS:
        value = _get(data, dotted)
        if value is _MISSING:
            if required:
                raise InputError(f"{input_name} field {dotted}", f"missing (required, {expected})", WORKLOAD_FIX)
            continue
        if not check(value):
            raise InputError(f"{input_name} field {dotted}", f"must be {expected}, got {_type_name(value)} "
                             f"{value!r}"[:200], WORKLOAD_FIX)
    storage_class = _get(data, "kubernetes.storage_class")
    gpu_ceiling = _get(data, "resources.gpu_ceiling")
    pinned = _get(data, "resources.pinned")
    max_failed = _get(data, "budgets.max_failed_deploys")
    return Workload(
        data=data,
        kube_context=data["kubernetes"]["kube_context"],
        namespace=data["kubernetes"]["namespace"],
        storage_class=(storage_class or None) if storage_class is not _MISSING else None,
        dgd_path=data["deployment"]["dgd_path"],
        dgd_sha256=data["deployment"]["dgd_sha256"],
        gpu_ceiling=gpu_ceiling if gpu_ceiling is not _MISSING else None,
        pinned=tuple(pinned) if pinned is not _MISSING else (),
        max_failed_deploys=max_failed if max_failed is not _MISSING else None,
    )


def contract_dgd_candidates(dgd_path: str, exp_root: Path) -> list[Path]:
    """Where ``deployment.dgd_path`` may point: absolute, relative to the dir holding ``runs/``
    (the canonical ``runs/<EXP_ID>/inputs/user_provided_dgd.yaml`` form), or EXP_ROOT-relative."""
    path = Path(dgd_path).expanduser()
    if path.is_absolute():
        return [path]
    real_root = Path(os.path.realpath(exp_root))
    candidates = []
    if real_root.parent.name == "runs":
        candidates.append(real_root.parent.parent / path)
    candidates.append(real_root / path)
    return candidates


# --- the DGD and support manifests -----------------------------------------------------------


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def precision_tokens(text: str) -> set[str]:
    return {_PRECISION_ALIASES[m] for m in _PRECISION_TOKEN.findall(text.lower())}


def dgd_precision(documents: Sequence[Any]) -> set[str]:
    """Precision tokens in the DGD's string values (args, model names, env), comments ignored."""
    found: set[str] = set()
    for doc in documents:
        for text in _strings(doc):
            found |= precision_tokens(text)
    return found


def parse_dgd(documents: Sequence[Any], input_name: str) -> str:
    """Check the assigned file holds exactly one DGD (other objects like ConfigMaps may precede
    it) and return its ``metadata.name``."""
    fix = "hand over the assigned DGD manifest (one DynamoGraphDeployment document)"
    dgds = []
    for index, doc in enumerate(documents):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise InputError(input_name, f"document {index + 1} is a YAML {_type_name(doc)}, not an object", fix)
        if doc.get("kind") == DGD_KIND:
            dgds.append(doc)
    if len(dgds) != 1:
        raise InputError(input_name, f"holds {len(dgds)} {DGD_KIND} documents, exactly one is expected", fix)
    dgd = dgds[0]
    if dgd.get("apiVersion") not in DGD_API_VERSIONS:
        raise InputError(input_name, f"apiVersion {dgd.get('apiVersion')!r} is not one of "
                         f"{', '.join(DGD_API_VERSIONS)}", fix)
    name = _get(dgd, "metadata.name")
    if not isinstance(name, str) or not name:
        raise InputError(input_name, "the DGD has no metadata.name", fix)
    return name


# Kinds a handed-off file may never carry. Steps 4 and 5 apply every document of the DGD and support
# files, and the harness must never create or change Secrets, Namespaces, RBAC or cluster-scoped
# objects: those are the cluster admin's prerequisites. Refused in step 1, before any request.
FORBIDDEN_KINDS = frozenset({
    "Secret", "Namespace", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding",
    "CustomResourceDefinition", "Node", "PersistentVolume", "StorageClass", "PriorityClass", "RuntimeClass",
    "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding", "APIService", "CertificateSigningRequest",
})
# What each support manifest may hold (step 4 runs Jobs and waits for PVCs; nothing else belongs there).
SUPPORT_KINDS = {
    "model-cache": frozenset({"PersistentVolumeClaim"}),
    "model-download": frozenset({"Job", "ConfigMap"}),
    "model-validate": frozenset({"Job", "ConfigMap"}),
}


def _check_objects(documents: Sequence[Any], input_name: str, namespace: str, fix: str) -> None:
    """No forbidden kind, and nothing aimed at another namespace (a document's own
    ``metadata.namespace`` wins over the workload's when it is applied)."""
    for index, doc in enumerate(d for d in documents if d is not None):
        if not isinstance(doc, dict):
            continue
        kind = doc.get("kind")
        name = _get(doc, "metadata.name")
        label = f"document {index + 1} ({kind}/{name if name is not _MISSING else '?'})"
        if kind in FORBIDDEN_KINDS:
            raise InputError(input_name, f"{label} is a {kind}: the harness never creates Secrets, Namespaces, "
                             "RBAC or cluster-scoped objects", fix)
        doc_ns = _get(doc, "metadata.namespace")
        if doc_ns is not _MISSING and doc_ns is not None and doc_ns != namespace:
            raise InputError(input_name, f"{label} names namespace {doc_ns!r}, the workload deploys to "
                             f"{namespace!r}", fix)


def check_dgd_objects(documents: Sequence[Any], input_name: str, namespace: str) -> None:
    """The assigned DGD file: only the DGD and namespaced objects it needs (ConfigMaps, PVCs,
    ComputeDomains), all in the workload's namespace."""
    _check_objects(documents, input_name, namespace,
                   "hand over a DGD file with only the DGD and the namespaced objects it needs (ConfigMaps, "
                   "PVCs); the cluster admin creates secrets, namespaces and RBAC")


def check_dgd_deployable(text: str, input_name: str) -> None:
    """What the DGD model can tell from the file alone (so no cluster request is made for it):
    field types, replicas that Kubernetes would refuse, and a DGD whose workers request no GPU."""
    model = dgd_mod.parse_dgd(text, input_name)  # wrong field types raise InputError naming the field
    for problem in model.unrepresentable:
        if ".replicas is the string" in problem:
            raise InputError(input_name, problem, "write replicas as a whole number (rendered, unquoted)")
    if any("DRA" in problem for problem in model.unrepresentable):
        return  # GPUs requested through device claims: the model cannot count them, step 2 says unknown
    workers = [c for c in model.components if c.is_worker]
    if not any(c.gpus_per_pod > 0 for c in workers) and (workers or model.total_gpus() == 0):
        shown = ", ".join(f"{c.name} ({c.type})" for c in workers) or "no worker component"
        raise InputError(input_name, f"no worker requests a GPU ({shown}): an LLM worker without a GPU request "
                         "schedules on any node and cannot serve", "set resources.limits.gpu on the worker "
                         "components (the assigned DGD must request the GPUs it serves on)")


def check_support_documents(documents: Sequence[Any], input_name: str, support_type: str | None = None,
                            namespace: str | None = None) -> None:
    """Step 4 reads kind and metadata.name, never file names: require them now, and only the kinds
    that support type may hold."""
    fix = "hand over a Kubernetes manifest with kind and metadata.name"
    objects = [d for d in documents if d is not None]
    if not objects:
        raise InputError(input_name, "holds no YAML document", fix)
    for index, doc in enumerate(objects):
        if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str) or not isinstance(
            _get(doc, "metadata.name"), str
        ):
            raise InputError(input_name, f"document {index + 1} has no kind and metadata.name", fix)
    if namespace is not None:
        _check_objects(objects, input_name, namespace,
                       f"hand over the {support_type or 'support'} manifest that was written for this workload")
    allowed = SUPPORT_KINDS.get(support_type or "")
    if allowed is None:
        return
    wanted = "a PersistentVolumeClaim" if support_type == "model-cache" else "a Job"
    for index, doc in enumerate(objects):
        if doc["kind"] not in allowed:
            raise InputError(input_name, f"document {index + 1} is a {doc['kind']}, a {support_type} manifest holds "
                             f"only {', '.join(sorted(allowed))}", f"hand over the {support_type} manifest ({wanted})")
    if support_type != "model-cache" and not any(d["kind"] == "Job" for d in objects):
        raise InputError(input_name, f"holds no Job, a {support_type} manifest runs one",
                         f"hand over the {support_type} manifest ({wanted})")


def select_download_variant(
    variants: Sequence[FileRef], precision: set[str], input_name: str = "--support model-download"
) -> FileRef:
    """Pick the download manifest matching the DGD's precision (exact token, then family)."""
    if len(variants) == 1:
        return variants[0]
    names = ", ".join(v.path.name for v in variants)
    tokens = {v: precision_tokens(v.path.name) for v in variants}
    exact = [v for v in variants if tokens[v] & precision]
    if len(exact) == 1:
        return exact[0]
    families = {_PRECISION_FAMILY[p] for p in precision}
    by_family = [v for v in variants if {_PRECISION_FAMILY[t] for t in tokens[v]} & families]
    if not exact and len(by_family) == 1:
        return by_family[0]
    generic = [v for v in variants if not tokens[v]]
    if not exact and not by_family and len(generic) == 1:
        return generic[0]
    seen = ", ".join(sorted(precision)) or "no precision token"
    raise InputError(
        input_name,
        f"{len(variants)} download variants ({names}) and the DGD shows {seen}: cannot tell which one to use",
        "hand over only the download manifest that matches the assigned DGD's precision",
    )


# --- previous deployment ---------------------------------------------------------------------


def read_previous(prev_root: Path, exp_root: Path, iteration: int) -> PreviousDeployment:
    name = "--prev-deploy-root"
    expected = f"<EXP_ROOT>/artifacts/{deploy_id(iteration - 1)}"
    real = inside_exp_root(prev_root, exp_root, name)
    if not real.is_dir():
        raise InputError(name, f"{_display(prev_root, exp_root)}: directory not found",
                         f"pass the previous deployment root {expected}")
    ledger_path = real / ledger_mod.LEDGER_NAME
    if not ledger_path.is_file():
        raise InputError(f"{name} ledger", f"{_display(ledger_path, exp_root)}: file not found",
                         f"pass the deployment root of iteration {iteration - 1}, which holds its ledger")
    try:
        data = ledger_mod.read(ledger_path)
    except (LedgerError, OSError) as exc:
        raise InputError(f"{name} ledger", str(exc), "pass a deployment root whose ledger this suite wrote") from exc
    values: dict[str, str] = {}
    for key in ("dgd_name", "kube_context", "namespace"):
        value = data.get(key)
        if not isinstance(value, str) or not value:
            raise InputError(f"{name} ledger field {key}", "missing or empty, so the previous DGD cannot be retired",
                             f"pass the deployment root of iteration {iteration - 1} (a ledger that names its DGD)")
        values[key] = value
    prev_iteration = data.get("iteration")
    if _is_int(prev_iteration) and prev_iteration != iteration - 1:
        raise InputError(f"{name} ledger field iteration", f"is {prev_iteration}, iteration {iteration} follows "
                         f"iteration {iteration - 1}", f"pass {expected}")
    status = data.get("status")
    return PreviousDeployment(
        root=real,
        ledger_path=ledger_path,
        iteration=prev_iteration if _is_int(prev_iteration) else None,
        dgd_name=values["dgd_name"],
        kube_context=values["kube_context"],
        namespace=values["namespace"],
        status=status if isinstance(status, str) else None,
    )


# --- the deployment directory ----------------------------------------------------------------


def _copy_atomically(source: Path, dest: Path) -> None:
    # A kill mid-copy must not leave a truncated copy that a resume would keep.
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# Deployment directories this process holds, realpath -> the descriptor carrying the flock. The
# lock is the directory's own flock (no lock file to leave behind or to list in the directory): the
# kernel releases it when the holder exits, so a SIGKILLed run never blocks the rerun. Descriptors
# are close-on-exec, so a child (kubectl port-forward) can never keep a dead run's lock alive.
_HELD: dict[str, int] = {}


def _lock_holder(fd: int) -> str:
    """``pid N`` of the process holding the flock on ``fd``'s inode, from /proc/locks (Linux)."""
    st = os.fstat(fd)
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == inode:
                return f"pid {fields[4]}"
    except OSError:
        pass
    return "another process"


def lock_deployment(deploy_root: Path, iteration: int) -> None:
    """Take the exclusive lock on a deployment directory for this process (re-entrant), or refuse."""
    key = os.path.realpath(deploy_root)
    if key in _HELD:
        return
    fd = os.open(key, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _lock_holder(fd)
        os.close(fd)
        raise DeploymentLocked(
            f"--iter {iteration}",
            f"artifacts/{deploy_id(iteration)} is in use by another run of this iteration ({holder}); "
            "nothing was written",
            "wait for that run to finish (two runs of one iteration would change the same DGD), then rerun",
        ) from None
    _HELD[key] = fd


def release_deployment_lock(deploy_root: Path) -> None:
    """Release the lock taken by :func:`lock_deployment` (at session end); a no-op if not held."""
    fd = _HELD.pop(os.path.realpath(deploy_root), None)
    if fd is not None:
        os.close(fd)


def existing_candidate(deploy_root: Path, dgd_sha256: str) -> tuple[bool, Mapping[str, Any] | None]:
    """Whether an existing deployment directory belongs to this candidate, and its ledger.

    Belongs = its ledger names the same source DGD SHA-256, or (no ledger yet: the earlier run
    died before writing one) it is empty or holds a ``deploy.yaml`` copy with that SHA-256.
    """
    ledger_path = deploy_root / ledger_mod.LEDGER_NAME
    if ledger_path.is_file():
        try:
            data = ledger_mod.read(ledger_path)
        except (LedgerError, OSError):
            return False, None
        source = data.get("source_dgd")
        return isinstance(source, dict) and source.get("sha256") == dgd_sha256, data
    applied = deploy_root / "applied_manifests"
    copy = applied / STABLE_NAMES["deploy"]
    if copy.is_file():
        return sha256_file(copy) == dgd_sha256, None
    # No ledger and no DGD copy: only the empty skeleton of a run that died at once is ours.
    others = [p for p in deploy_root.iterdir() if not p.name.startswith(".") and p != applied]
    return not others and not (applied.is_dir() and any(applied.iterdir())), None


def own_directory_ledger(settings: Settings) -> Mapping[str, Any] | None:
    """The ledger of this candidate's existing directory, for recording a refusal in it.

    Used when step 1 refuses an input before it could create or claim the directory: a rerun of
    the same candidate (same handed DGD SHA-256) then still gets a ``blocked`` ledger.
    """
    try:
        root = Path(os.path.realpath(settings.exp_root))
        deploy_root = Path(os.path.realpath(settings.deploy_root))
    except OSError:
        return None
    if not deploy_root.is_relative_to(root) or not deploy_root.is_dir():
        return None
    mine, data = existing_candidate(deploy_root, settings.dgd_sha256)
    return data if mine else None


def prepare(settings: Settings, on_directory: OnDirectory | None = None) -> Prepared:
    """Step 1, whole: judge every input, then create and fill the deployment directory.

    ``on_directory(deploy_root, resumed, earlier_ledger)`` is called once the directory exists and
    before anything is copied into it, so the caller can write the first ledger there.
    """
    exp_root_input = f"--exp-root {settings.exp_root}"
    if not settings.exp_root.is_dir():
        raise InputError(exp_root_input, "directory not found",
                         "pass the experiment root runs/<EXP_ID> that user-interviewer created")
    exp_root = Path(os.path.realpath(settings.exp_root))
    superseded = exp_root / "SUPERSEDED"
    if superseded.exists():
        raise InputError(exp_root_input, "is marked SUPERSEDED (the workload was corrected after handoff)",
                         "use the new EXP_ROOT named in its SUPERSEDED file")

    # (1) The workload: hash first, then read.
    workload_name = f"--workload {_display(settings.workload, exp_root)}"
    hand_fix = f"ask {settings.provenance} to re-issue the handoff; never edit the hash to match"
    workload_real = _existing_file(settings.workload, exp_root, workload_name,
                                   "pass the exact <EXP_ROOT>/user_workload.yaml path")
    workload_sha = _check_sha(workload_real, settings.workload_sha256, workload_name, hand_fix)
    workload = parse_workload(load_yaml_documents(workload_real, workload_name, WORKLOAD_FIX), workload_name)
    workload_file = FileRef(workload_real, rel(workload_real, exp_root), workload_sha)

    # (2) The assigned DGD: hash before anything is copied.
    dgd_name_in = f"--dgd {_display(settings.dgd, exp_root)}"
    dgd_real = _existing_file(settings.dgd, exp_root, dgd_name_in, "pass the assigned DGD manifest path")
    dgd_sha = _check_sha(dgd_real, settings.dgd_sha256, dgd_name_in, hand_fix)
    dgd_docs = load_yaml_documents(dgd_real, dgd_name_in, hand_fix)
    dgd_name = parse_dgd(dgd_docs, dgd_name_in)
    check_dgd_objects(dgd_docs, dgd_name_in, workload.namespace)
    check_dgd_deployable(dgd_real.read_text(encoding="utf-8"), dgd_name_in)
    source_dgd = FileRef(dgd_real, rel(dgd_real, exp_root), dgd_sha)

    # (3) Iteration 0: the assigned DGD is the contract's baseline.
    if settings.iteration == 0:
        contract_paths = contract_dgd_candidates(workload.dgd_path, exp_root)
        if not any(Path(os.path.realpath(p)) == dgd_real for p in contract_paths):
            raise InputError(
                dgd_name_in,
                f"is not the contract's deployment.dgd_path {workload.dgd_path!r} (iteration 0 deploys the baseline)",
                "pass --dgd <EXP_ROOT>/inputs/user_provided_dgd.yaml as recorded in user_workload.yaml",
            )
        if dgd_sha != workload.dgd_sha256:
            raise InputError(
                dgd_name_in,
                f"SHA-256 {dgd_sha} differs from the contract's deployment.dgd_sha256 {workload.dgd_sha256}",
                "deploy the baseline user_workload.yaml records, or ask user-interviewer for a new EXP_ROOT",
            )

    # Support manifests: only what the handoff contains.
    by_type: dict[str, list[FileRef]] = {}
    for item in settings.support:
        by_type.setdefault(item.type, []).append(_support_ref(item, exp_root, workload.namespace))
    for kind in ("model-cache", "model-validate"):
        if len(by_type.get(kind, [])) > 1:
            names = ", ".join(r.rel for r in by_type[kind])
            raise InputError(f"--support {kind}", f"handed over {len(by_type[kind])} times ({names})",
                             f"pass exactly one {kind} manifest")
    precision = dgd_precision(dgd_docs)
    unselected: list[FileRef] = []
    chosen: dict[str, FileRef] = {k: v[0] for k, v in by_type.items() if k != "model-download"}
    if "model-download" in by_type:
        pick = select_download_variant(by_type["model-download"], precision)
        chosen["model-download"] = pick
        unselected = [v for v in by_type["model-download"] if v is not pick]

    previous = None
    if settings.iteration > 0:
        assert settings.prev_deploy_root is not None  # settings refuse iteration > 0 without it
        previous = read_previous(settings.prev_deploy_root, exp_root, settings.iteration)

    # The directory: exactly one per candidate; a rerun of the same candidate resumes in it.
    deploy_root = exp_root / "artifacts" / deploy_id(settings.iteration)
    inside_exp_root(deploy_root, exp_root, f"{exp_root_input} artifacts/")
    if previous is not None and previous.root == Path(os.path.realpath(deploy_root)):
        raise InputError("--prev-deploy-root", "is this iteration's own deployment directory",
                         f"pass <EXP_ROOT>/artifacts/{deploy_id(settings.iteration - 1)}")
    earlier: Mapping[str, Any] | None = None
    resuming = deploy_root.exists()
    # One run per deployment directory: the lock is taken before anything is written in it (the
    # earlier ledger is read under it), and a concurrent run stops here having written nothing.
    deploy_root.mkdir(parents=True, exist_ok=True)
    lock_deployment(deploy_root, settings.iteration)
    if resuming:
        mine, earlier = existing_candidate(deploy_root, dgd_sha)
        if not mine:
            raise InputError(
                f"--iter {settings.iteration}",
                f"artifacts/{deploy_id(settings.iteration)} already holds another candidate (a different DGD SHA-256)",
                "a new candidate gets a new iteration: pass the iteration this candidate was handed for",
            )
    applied = deploy_root / "applied_manifests"
    applied.mkdir(parents=True, exist_ok=True)
    if on_directory is not None:
        on_directory(deploy_root, resuming, earlier)

    manifests, kept, recopied, removed = _fill(applied, source_dgd, chosen, earlier if resuming else None,
                                               resuming, exp_root)
    resume = Resume(earlier, tuple(kept), tuple(recopied), tuple(removed)) if resuming else None
    # The sources must still be what was handed over once copied (nobody edited them meanwhile).
    for ref in (workload_file, source_dgd, *chosen.values()):
        if sha256_file(ref.path) != ref.sha256:
            raise InputError(f"source {ref.rel}", "changed while it was being copied",
                             "stop whatever edits the handed-off files and rerun")
    return Prepared(
        exp_root=exp_root,
        deploy_root=deploy_root,
        workload_file=workload_file,
        workload=workload,
        source_dgd=source_dgd,
        dgd_name=dgd_name,
        precision=tuple(sorted(precision)),
        manifests=tuple(manifests),
        unselected=tuple(unselected),
        previous=previous,
        resume=resume,
    )


def _support_ref(item: SupportInput, exp_root: Path, namespace: str | None = None) -> FileRef:
    name = f"--support {item.type}={_display(item.path, exp_root)}"
    real = _existing_file(item.path, exp_root, name, f"pass the {item.type} manifest that was handed over")
    try:
        sha = sha256_file(real)
    except OSError as exc:
        raise InputError(name, f"cannot be read ({exc.strerror})", "check the file permissions") from exc
    check_support_documents(load_yaml_documents(real, name, "fix the YAML or hand over the right file"), name,
                            item.type, namespace)
    return FileRef(real, rel(real, exp_root), sha)


def _fill(
    applied: Path,
    source_dgd: FileRef,
    chosen: Mapping[str, FileRef],
    earlier: Mapping[str, Any] | None,
    resuming: bool,
    exp_root: Path,
) -> tuple[list[AppliedManifest], list[str], list[str], list[str]]:
    """Copy sources to stable names. On a resume, a copy whose source is unchanged is kept as it is
    (it may carry recorded compatibility patches: the latest attempted copy); stale types go."""
    recorded: dict[str, Mapping[str, Any]] = {}
    if earlier is not None:
        for entry in earlier.get("applied_manifests") or []:
            if isinstance(entry, Mapping) and isinstance(entry.get("type"), str):
                recorded[entry["type"]] = entry
    wanted = {"deploy": source_dgd, **chosen}
    manifests: list[AppliedManifest] = []
    kept: list[str] = []
    recopied: list[str] = []
    for kind, stable in STABLE_NAMES.items():
        if kind not in wanted:
            continue
        source = wanted[kind]
        dest = applied / stable
        before = recorded.get(kind)
        if resuming and dest.is_file() and before is not None and before.get("source_sha256") == source.sha256:
            kept.append(stable)
        else:
            _copy_atomically(source.path, dest)
            if sha256_file(dest) != source.sha256:
                raise InputError(f"copy {rel(dest, exp_root)}", "differs from its source after copying",
                                 "check the disk (full or failing?) and rerun")
            if resuming:
                recopied.append(stable)
        manifests.append(AppliedManifest(kind, dest, source))
    removed: list[str] = []
    if resuming:
        for kind, name in STABLE_NAMES.items():
            stale = applied / name
            if kind not in wanted and stale.is_file():
                stale.unlink()  # one file per manifest type used, exactly the handed-off set
                removed.append(name)
    return manifests, kept, recopied, removed


def verify_sources(prepared: Prepared) -> list[str]:
    """Problems found when re-hashing every handed-off source (empty = untouched)."""
    problems = []
    for ref in prepared.sources():
        try:
            actual = sha256_file(ref.path)
        except OSError as exc:
            problems.append(f"{ref.rel}: cannot be read at the end of the run ({exc.strerror})")
            continue
        if actual != ref.sha256:
            problems.append(f"{ref.rel}: modified during the run (SHA-256 {actual}, was {ref.sha256})")
    return problems
