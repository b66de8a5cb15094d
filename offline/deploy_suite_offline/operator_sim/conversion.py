"""DGD conversion between v1alpha1 (``spec.services`` map) and v1beta1 (``spec.components`` list), pure.

Served by the webhook server when the cluster runs the newest profile with
``--conversion-webhook`` (``docs/offline-cluster.md``, "Conversion"). The mapping:

* a service ``<name>`` <-> a component ``{name: <name>}``; ``componentType`` <-> ``type``, with a
  v1alpha1 worker whose ``subComponentType`` is prefill/decode becoming a v1beta1 prefill/decode
  component (and back); ``replicas``, ``multinode`` as they are;
* ``extraPodSpec`` <-> ``podTemplate.spec``: ``mainContainer`` is the container named ``main``; a
  v1alpha1 ``frontendSidecar`` spec becomes the container ``sidecar-frontend`` that v1beta1's
  ``frontendSidecar`` names (back: a plain container, the name kept in the annotation below);
  ``extraPodMetadata`` and the service's ``labels``/``annotations`` <-> ``podTemplate.metadata``;
* v1alpha1 ``envs`` (graph and service), ``envFromSecret`` and ``resources`` (cpu, memory, gpu,
  custom) are folded into the main container (``gpu`` under ``gpuType``, default ``nvidia.com/gpu``),
  under the mainContainer's own resources;
  ``sharedMemory.size`` <-> ``sharedMemorySize``;
* status ``services`` <-> ``components``.

What one version cannot express is kept, as the operator keeps it, in an annotation: the spec as
last written in the other version (:data:`STASH`), restored when the spec still converts to what
is stored, so an object reads back exactly as it was written.
"""

from __future__ import annotations

import copy
import json

from deploy_suite.constants import Obj
from deploy_suite_offline.operator_sim.spec import SIDECAR_CONTAINER, alpha_resources, merge_env, merge_resources

ALPHA = "nvidia.com/v1alpha1"
BETA = "nvidia.com/v1beta1"
STASH = "nvidia.com/last-applied-other-version-spec"
MAIN = "main"
SIDECAR = SIDECAR_CONTAINER  # the container a v1alpha1 frontendSidecar spec becomes
SPLIT_TYPES = ("prefill", "decode")


def _main_from_alpha(spec: Obj, svc: Obj) -> Obj:
    main = copy.deepcopy((svc.get("extraPodSpec") or {}).get("mainContainer") or {})
    main["name"] = MAIN
    env = merge_env(spec.get("envs") or [], svc.get("envs") or [], main.get("env") or [])
    if env:
        main["env"] = env
    if svc.get("envFromSecret"):
        main["envFrom"] = [{"secretRef": {"name": svc["envFromSecret"]}}, *(main.get("envFrom") or [])]
    # The service's resources under the mainContainer's own, as the reader converts them (spec.py).
    resources = merge_resources(alpha_resources(svc), main.get("resources") or {})
    if resources:
        main["resources"] = resources
    return main


def _frontend_sidecar_from_alpha(sidecar: Obj) -> Obj:
    """v1alpha1 ``frontendSidecar: {image, args, envFromSecret, envs}`` as the v1beta1 container it names."""
    container: Obj = {"name": SIDECAR, "image": sidecar.get("image")}
    if sidecar.get("args"):
        container["args"] = list(sidecar["args"])
    if sidecar.get("envs"):
        container["env"] = copy.deepcopy(sidecar["envs"])
    if sidecar.get("envFromSecret"):
        container["envFrom"] = [{"secretRef": {"name": sidecar["envFromSecret"]}}]
    return container


def alpha_spec_to_beta(spec: Obj) -> Obj:
    out = {k: copy.deepcopy(v) for k, v in spec.items() if k not in ("services", "envs")}
    components = []
    for name, raw in (spec.get("services") or {}).items():
        svc: Obj = raw or {}
        kind = str(svc.get("componentType") or "")
        sub = str(svc.get("subComponentType") or "")
        comp: Obj = {"name": name, "type": sub if kind == "worker" and sub in SPLIT_TYPES else kind}
        for key in ("replicas", "multinode"):
            if key in svc:
                comp[key] = copy.deepcopy(svc[key])
        extra = copy.deepcopy(svc.get("extraPodSpec") or {})
        extra.pop("mainContainer", None)
        sidecars = [c for c in extra.pop("containers", None) or [] if c.get("name") != MAIN]
        if isinstance(svc.get("frontendSidecar"), dict):  # a spec: the container it stands for, named
            sidecars.append(_frontend_sidecar_from_alpha(svc["frontendSidecar"]))
            comp["frontendSidecar"] = SIDECAR
        pod_spec = {**extra, "containers": [_main_from_alpha(spec, svc), *sidecars]}
        meta_src = svc.get("extraPodMetadata") or {}
        meta = {k: v for k, v in {
            "labels": {**(svc.get("labels") or {}), **(meta_src.get("labels") or {})},
            "annotations": {**(svc.get("annotations") or {}), **(meta_src.get("annotations") or {})}}.items() if v}
        comp["podTemplate"] = {**({"metadata": meta} if meta else {}), "spec": pod_spec}
        if (svc.get("sharedMemory") or {}).get("size"):
            comp["sharedMemorySize"] = svc["sharedMemory"]["size"]
        components.append(comp)
    out["components"] = components
    return out


def beta_spec_to_alpha(spec: Obj) -> Obj:
    out = {k: copy.deepcopy(v) for k, v in spec.items() if k != "components"}
    services: Obj = {}
    for comp in spec.get("components") or []:
        kind = str(comp.get("type") or "")
        svc: Obj = {"componentType": "worker" if kind in SPLIT_TYPES else kind}
        if kind in SPLIT_TYPES:
            svc["subComponentType"] = kind
        for key in ("replicas", "multinode"):
            if key in comp:
                svc[key] = copy.deepcopy(comp[key])
        template = copy.deepcopy(comp.get("podTemplate") or {})
        pod_spec = template.get("spec") or {}
        containers = pod_spec.pop("containers", None) or []
        main = next((c for c in containers if c.get("name") == MAIN), None)
        extra: Obj = dict(pod_spec)
        if main is not None:
            extra["mainContainer"] = {k: v for k, v in main.items() if k != "name"}
        others = [c for c in containers if c.get("name") != MAIN]
        if others:
            extra["containers"] = others
        svc["extraPodSpec"] = extra
        if template.get("metadata"):
            svc["extraPodMetadata"] = template["metadata"]
        if comp.get("sharedMemorySize"):
            svc["sharedMemory"] = {"size": comp["sharedMemorySize"]}
        services[str(comp.get("name"))] = svc
    out["services"] = services
    return out


def _status(status: Obj, desired: str) -> Obj:
    out = copy.deepcopy(status)
    src, dst = ("components", "services") if desired == ALPHA else ("services", "components")
    if src in out:
        out[dst] = out.pop(src)
        if desired == ALPHA:
            for entry in (out[dst] or {}).values():
                if isinstance(entry, dict) and entry.get("componentNames") and "componentName" not in entry:
                    entry["componentName"] = entry["componentNames"][0]
    return out


def _canon(spec: Obj) -> Obj:
    """A spec compared without regard to the order of components (a map key order may not survive)."""
    if isinstance(spec.get("components"), list):
        return {**spec, "components": {str(c.get("name")): c for c in spec["components"]}}
    return spec


def _shape(spec: Obj) -> str:
    return ALPHA if "services" in spec and "components" not in spec else BETA


def convert(obj: Obj, desired: str) -> Obj:
    """``obj`` (either version) as ``desired``; raises ValueError for what cannot be converted."""
    out = copy.deepcopy(obj)
    out["apiVersion"] = desired
    spec = obj.get("spec") or {}
    meta = out.setdefault("metadata", {})
    annotations = dict(meta.get("annotations") or {})
    if _shape(spec) != desired:
        stashed = json.loads(annotations[STASH]) if STASH in annotations else None
        to_other = beta_spec_to_alpha if desired == ALPHA else alpha_spec_to_beta
        back = alpha_spec_to_beta if desired == ALPHA else beta_spec_to_alpha
        if stashed is not None and _shape(stashed) == desired and _canon(back(stashed)) == _canon(spec):
            new_spec = stashed  # written in the desired version and unchanged since: read back as written
        else:
            new_spec = to_other(spec)
        if desired == BETA:
            bad = [c["name"] for c in new_spec["components"]
                   if c["type"] not in ("frontend", "worker", "prefill", "decode", "planner", "epp")]
            if bad:
                raise ValueError(f"cannot convert services {bad} to {BETA}: componentType is not one of "
                                 "frontend, worker, prefill, decode, planner, epp")
        annotations[STASH] = json.dumps(spec, sort_keys=True, separators=(",", ":"))
        meta["annotations"] = annotations
        out["spec"] = new_spec
    if "status" in obj:
        out["status"] = _status(obj["status"], desired)
    return out


def review(request: Obj) -> Obj:
    """The ConversionReview response for one request."""
    desired = str(request.get("desiredAPIVersion"))
    try:
        objects = [convert(o, desired) for o in request.get("objects") or []]
    except (ValueError, KeyError, TypeError) as exc:
        return {"uid": request.get("uid"), "result": {"status": "Failure", "message": str(exc)}}
    return {"uid": request.get("uid"), "convertedObjects": objects, "result": {"status": "Success"}}
