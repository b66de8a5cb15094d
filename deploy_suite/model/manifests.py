"""What a handed-off manifest may hold, judged from the file alone before any cluster request.

The assigned DGD file must hold exactly one DynamoGraphDeployment (plus the namespaced objects it
needs); support manifests hold only the kinds their step runs; nothing may create Secrets,
Namespaces, RBAC or cluster-scoped objects (docs/security.md, "Bad input"); another namespace is
retargeted in the copy (``deploy_suite.model.portable``). The DGD's precision picks which
handed-off download variant is used. Every refusal is an ``InputError`` naming the input and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from deploy_suite.constants import DGD_KIND, SUPPORTED_API_VERSIONS
from deploy_suite.errors import InputError
from deploy_suite.model import dgd as dgd_mod
from deploy_suite.model import names
from deploy_suite.model.files import FileRef
from deploy_suite.model.workload import MISSING, lookup, type_name

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


# Where a DGD states its model's precision: the model path/name flags and the quantization flags of
# its workers. Other precision-looking flags are not the weights' precision and are never read:
# ``--kv-cache-dtype fp8`` on an FP4 model is the KV cache's dtype (issue 13: it picked the FP8
# download). ``--dtype`` is the activation dtype and only speaks when nothing else does (an FP8
# checkpoint served with ``--dtype bfloat16`` still downloads FP8 weights).
MODEL_FLAGS = ("--model", "--model-path", "--served-model-name", "--model-name")
QUANTIZATION_FLAGS = ("--quantization", "--quantization-method")
DTYPE_FLAGS = ("--dtype",)


def precision_tokens(text: str) -> set[str]:
    return {_PRECISION_ALIASES[m] for m in _PRECISION_TOKEN.findall(text.lower())}


def dgd_precision(model: dgd_mod.Dgd) -> set[str]:
    """The model precision the DGD's workers state (model names and quantization flags, ``--dtype``
    as a fallback); the KV-cache dtype and every other string of the manifest are ignored."""
    components = [c for c in model.components if c.is_worker] or model.components
    found: set[str] = set()
    for flags in (MODEL_FLAGS + QUANTIZATION_FLAGS, DTYPE_FLAGS):
        for component in components:
            for flag in flags:
                found |= precision_tokens(component.flag(flag) or "")
        if found:
            return found
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
            raise InputError(input_name, f"document {index + 1} is a YAML {type_name(doc)}, not an object", fix)
        if doc.get("kind") == DGD_KIND:
            dgds.append(doc)
    if len(dgds) != 1:
        raise InputError(input_name, f"holds {len(dgds)} {DGD_KIND} documents, exactly one is expected", fix)
    dgd = dgds[0]
    if dgd.get("apiVersion") not in SUPPORTED_API_VERSIONS:
        raise InputError(input_name, f"apiVersion {dgd.get('apiVersion')!r} is not one of "
                         f"{', '.join(SUPPORTED_API_VERSIONS)}", fix)
    name = lookup(dgd, "metadata.name")
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


def _forbidden_kinds(documents: Sequence[Any]) -> list[str]:
    """One problem per document of a kind the harness never creates."""
    problems = []
    for index, doc in enumerate(d for d in documents if d is not None):
        if not isinstance(doc, dict):
            continue
        kind = doc.get("kind")
        name = lookup(doc, "metadata.name")
        if kind in FORBIDDEN_KINDS:
            problems.append(f"document {index + 1} ({kind}/{name if name is not MISSING else '?'}) is a {kind}: "
                            "the harness never creates Secrets, Namespaces, RBAC or cluster-scoped objects")
    return problems


def _check_objects(documents: Sequence[Any], input_name: str, fix: str) -> None:
    """No forbidden kind. A document aimed at another namespace is no refusal: its run-scoped copy
    is set to the workload's namespace and recorded (``deploy_suite.model.portable``)."""
    problems = _forbidden_kinds(documents)
    if problems:
        raise InputError(input_name, problems[0], fix)


DGD_OBJECTS_FIX = ("hand over a DGD file with only the DGD and the namespaced objects it needs (ConfigMaps, "
                   "PVCs); the cluster admin creates secrets, namespaces and RBAC")
Incompatibility = tuple[str, str]  # (problem, fix)


def dgd_incompatibilities(documents: Sequence[Any], input_name: str) -> tuple[list[Incompatibility],
                                                                              dgd_mod.Dgd | None]:
    """Every reason of the DGD file's own that it cannot be deployed, as (problem, fix), and its
    model when one could be built: one DGD of a supported version with a name, no smuggled kind,
    whole replicas and GPU counts, derived names within Kubernetes' limits (model/names.py).
    Step 1 records them all in a ``blocked`` ledger once the file's hash verified
    (docs/procedure.md, "A candidate refused for its own reasons").

    A DGD whose components request no GPU is deployable: NVIDIA's mocker DGDs run on CPU only,
    and the procedure does not refuse them (step 2 records capacity as ``not needed``)."""
    try:
        parse_dgd(documents, input_name)
    except InputError as exc:
        return [(exc.problem, exc.fix)], None
    found = [(p, DGD_OBJECTS_FIX) for p in _forbidden_kinds(documents)]
    try:
        model = dgd_mod.from_documents([d for d in documents if d is not None], input_name)
    except InputError as exc:  # a field of the wrong type, named
        return [*found, (exc.problem, exc.fix)], None
    for problem in model.unrepresentable:
        if ".replicas is the string" in problem:
            found.append((problem, "write replicas as a whole number (rendered, unquoted)"))
        elif dgd_mod.BAD_GPU_COUNT in problem:
            found.append((problem, "write GPU counts as whole numbers (Kubernetes refuses a fraction or a negative "
                          "count of an extended resource)"))
    # The operator would fail on these after the apply, the DGD left in the cluster (model/names.py).
    too_long = names.derived_name_problems(model)
    if too_long:
        found.append(("; ".join(too_long), names.NAME_FIX))
    return found, model


def check_dgd_deployable(documents: Sequence[Any], input_name: str) -> dgd_mod.Dgd:
    """:func:`dgd_incompatibilities`, the first one refused; returns the DGD model."""
    problems, model = dgd_incompatibilities(documents, input_name)
    if problems or model is None:
        problem, fix = problems[0]
        raise InputError(input_name, problem, fix)
    return model


def check_support_documents(documents: Sequence[Any], input_name: str, support_type: str | None = None) -> None:
    """Step 4 reads kind and metadata.name, never file names: require them now, and only the kinds
    that support type may hold."""
    fix = "hand over a Kubernetes manifest with kind and metadata.name"
    objects = [d for d in documents if d is not None]
    if not objects:
        raise InputError(input_name, "holds no YAML document", fix)
    for index, doc in enumerate(objects):
        if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str) or not isinstance(
            lookup(doc, "metadata.name"), str
        ):
            raise InputError(input_name, f"document {index + 1} has no kind and metadata.name", fix)
    _check_objects(objects, input_name, f"hand over the {support_type or 'support'} manifest that was written for "
                   "this workload")
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


def _variant_for(variants: Sequence[FileRef], token: str) -> FileRef | None:
    """The one variant whose file name carries ``token`` (exact, then its family), or None."""
    names = {v: precision_tokens(v.path.name) for v in variants}
    exact = [v for v in variants if token in names[v]]
    if len(exact) == 1:
        return exact[0]
    family = [v for v in variants if _PRECISION_FAMILY[token] in {_PRECISION_FAMILY[t] for t in names[v]}]
    return family[0] if not exact and len(family) == 1 else None


def _voice(variants: Sequence[FileRef], tokens: set[str], who: str, input_name: str, fix: str) -> FileRef | None:
    """What one voice (the DGD, or preferences.precision) picks; two picks from one voice are ambiguous."""
    picks = {t: v for t in sorted(tokens) if (v := _variant_for(variants, t)) is not None}
    if len({v.path.name for v in picks.values()}) > 1:
        shown = " and ".join(f"{v.path.name} ({t})" for t, v in picks.items())
        raise InputError(input_name, f"{who} names several precisions: {shown} both match", fix)
    return next(iter(picks.values()), None)


def select_download_variant(
    variants: Sequence[FileRef], precision: set[str], preferred: str | None = None,
    input_name: str = "--support model-download",
) -> FileRef:
    """Pick the download manifest matching the model precision: the DGD's (model name, quantization
    flags: :func:`dgd_precision`) and the workload's ``preferences.precision``. When both pick a
    variant and the picks differ, that is ambiguous and refused naming both candidates; the
    preference alone decides only for a DGD that states no precision; then a single generic
    variant; a single variant is used as handed over."""
    if len(variants) == 1:
        return variants[0]
    fix = "hand over only the download manifest that matches the assigned DGD's model precision"
    from_dgd = _voice(variants, precision, "the DGD", input_name, fix)
    wanted = precision_tokens(preferred or "")
    from_workload = _voice(variants, wanted, "preferences.precision", input_name, fix)
    if from_dgd is not None and from_workload is not None and from_dgd is not from_workload:
        raise InputError(input_name, f"the DGD's model precision ({', '.join(sorted(precision))}) picks "
                         f"{from_dgd.path.name}, preferences.precision {preferred!r} picks "
                         f"{from_workload.path.name}: cannot tell which one to use", fix)
    # The preference speaks only when the DGD is silent: a DGD stating a precision no variant
    # carries must not download the preferred (other) weights.
    pick = from_dgd or (from_workload if not precision else None)
    if pick is not None:
        return pick
    generic = [v for v in variants if not precision_tokens(v.path.name)]
    if len(generic) == 1:
        return generic[0]
    names = ", ".join(v.path.name for v in variants)
    seen = ", ".join(sorted(precision)) or "no precision token"
    raise InputError(
        input_name,
        f"{len(variants)} download variants ({names}), the DGD shows {seen} and preferences.precision is "
        f"{preferred!r}: cannot tell which one to use", fix)
