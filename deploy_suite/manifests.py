"""What a handed-off manifest may hold, judged from the file alone before any cluster request.

The assigned DGD file must hold exactly one DynamoGraphDeployment (plus the namespaced objects it
needs); support manifests hold only the kinds their step runs; nothing may create Secrets,
Namespaces, RBAC or cluster-scoped objects, or aim at another namespace (README.md, "Bad input
and secrets"). The DGD's precision picks which handed-off download variant is used. Every refusal
is an ``InputError`` naming the input and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from deploy_suite import dgd as dgd_mod
from deploy_suite.constants import DGD_KIND, SUPPORTED_API_VERSIONS
from deploy_suite.errors import InputError
from deploy_suite.files import FileRef
from deploy_suite.workload import MISSING, lookup, type_name

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


def _check_objects(documents: Sequence[Any], input_name: str, namespace: str, fix: str) -> None:
    """No forbidden kind, and nothing aimed at another namespace (a document's own
    ``metadata.namespace`` wins over the workload's when it is applied)."""
    for index, doc in enumerate(d for d in documents if d is not None):
        if not isinstance(doc, dict):
            continue
        kind = doc.get("kind")
        name = lookup(doc, "metadata.name")
        label = f"document {index + 1} ({kind}/{name if name is not MISSING else '?'})"
        if kind in FORBIDDEN_KINDS:
            raise InputError(input_name, f"{label} is a {kind}: the harness never creates Secrets, Namespaces, "
                             "RBAC or cluster-scoped objects", fix)
        doc_ns = lookup(doc, "metadata.namespace")
        if doc_ns is not MISSING and doc_ns is not None and doc_ns != namespace:
            raise InputError(input_name, f"{label} names namespace {doc_ns!r}, the workload deploys to "
                             f"{namespace!r}", fix)


def check_dgd_objects(documents: Sequence[Any], input_name: str, namespace: str) -> None:
    """The assigned DGD file: only the DGD and namespaced objects it needs (ConfigMaps, PVCs,
    ComputeDomains), all in the workload's namespace."""
    _check_objects(documents, input_name, namespace,
                   "hand over a DGD file with only the DGD and the namespaced objects it needs (ConfigMaps, "
                   "PVCs); the cluster admin creates secrets, namespaces and RBAC")


def check_dgd_deployable(documents: Sequence[Any], input_name: str) -> None:
    """What the DGD model can tell from the file alone (so no cluster request is made for it):
    field types, replicas that Kubernetes would refuse, and a DGD whose workers request no GPU."""
    # Wrong field types raise InputError naming the field.
    model = dgd_mod.from_documents([d for d in documents if d is not None], input_name)
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
            lookup(doc, "metadata.name"), str
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
