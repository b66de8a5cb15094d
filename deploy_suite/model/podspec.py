"""The core Kubernetes parts a DGD component embeds: env, envFrom, volumes, pull secrets, command line.

Both DGD API shapes carry plain PodSpec and container fragments (v1alpha1 ``extraPodSpec``,
v1beta1 ``podTemplate``); ``deploy_suite.model.dgd`` reads them with these, so that a wrong field type
raises the same :class:`InputError` naming the field whichever shape it came from. The command
line helpers (``split_args``, ``flag_value``) read engine flags the way the container's shell and
argparse would: the knob table and the smoke test use them too.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deploy_suite.model.scheduling import FieldReader


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str | None = None
    value_from: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class EnvFrom:
    kind: str  # "secret" | "configMap"
    name: str
    prefix: str = ""


def env_list(rd: FieldReader, raw: Any, path: str) -> tuple[EnvVar, ...]:
    """A container's (or the graph's) ``env`` list."""
    out = []
    for i, item in enumerate(rd.seq(raw, path)):
        e = rd.mapping(item, f"{path}[{i}]")
        name = rd.text(e.get("name"), f"{path}[{i}].name") or ""
        vf = e.get("valueFrom")
        out.append(
            EnvVar(
                name,
                rd.text(e.get("value"), f"{path}[{i}].value"),
                rd.mapping(vf, f"{path}[{i}].valueFrom") if vf else None,
            )
        )
    return tuple(out)


def env_from(rd: FieldReader, raw: Any, path: str) -> list[EnvFrom]:
    """A container's ``envFrom`` secret and ConfigMap references."""
    out = []
    for i, item in enumerate(rd.seq(raw, path)):
        e = rd.mapping(item, f"{path}[{i}]")
        prefix = rd.text(e.get("prefix"), f"{path}[{i}].prefix", "") or ""
        for key, kind in (("secretRef", "secret"), ("configMapRef", "configMap")):
            if key in e:
                ref = rd.mapping(e[key], f"{path}[{i}].{key}")
                out.append(EnvFrom(kind, rd.text(ref.get("name"), f"{path}[{i}].{key}.name", "") or "", prefix))
    return out


def env_values(*layers: Iterable[EnvVar]) -> dict[str, str]:
    """Later layers win (graph env < component env < container env), like the operator's merge."""
    out: dict[str, str] = {}
    for layer in layers:
        for e in layer:
            if e.value is not None:
                out[e.name] = e.value
    return out


def volumes(rd: FieldReader, pod_spec: Mapping[str, Any], path: str) -> tuple[list[str], list[str]]:
    """Volume names and the PVC claim names among them."""
    names, claims = [], []
    for i, item in enumerate(rd.seq(pod_spec.get("volumes"), f"{path}.volumes")):
        v = rd.mapping(item, f"{path}.volumes[{i}]")
        names.append(rd.text(v.get("name"), f"{path}.volumes[{i}].name", "") or "")
        pvc = v.get("persistentVolumeClaim")
        if pvc is not None:
            claim = rd.text(
                rd.mapping(pvc, f"{path}.volumes[{i}].persistentVolumeClaim").get("claimName"),
                f"{path}.volumes[{i}].claimName",
            )
            if claim:
                claims.append(claim)
    return names, claims


def pull_secrets(rd: FieldReader, pod_spec: Mapping[str, Any], path: str) -> tuple[str, ...]:
    """Names of the pod's ``imagePullSecrets``."""
    out = []
    for i, item in enumerate(rd.seq(pod_spec.get("imagePullSecrets"), f"{path}.imagePullSecrets")):
        name = rd.text(
            rd.mapping(item, f"{path}.imagePullSecrets[{i}]").get("name"),
            f"{path}.imagePullSecrets[{i}].name",
        )
        if name:
            out.append(name)
    return tuple(out)


_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|\(([A-Za-z_][A-Za-z0-9_]*)\)|([A-Za-z_][A-Za-z0-9_]*))")


def expand_vars(text: str, env: Mapping[str, str]) -> str:
    """Expand ``$VAR``, ``${VAR}`` (shell) and ``$(VAR)`` (Kubernetes) from known values; keep others."""

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        return env.get(name, m.group(0))

    return _VAR.sub(sub, text)


def split_args(items: Iterable[str], env: Mapping[str, str]) -> tuple[str, ...]:
    """Tokens of command + args; a string with spaces (``sh -c "python3 -m ... --model X"``) is split."""
    out: list[str] = []
    for item in items:
        if any(ch.isspace() for ch in item):
            try:
                parts = shlex.split(item)
            except ValueError:  # unbalanced quotes: best effort
                parts = item.split()
        else:
            parts = [item]
        out.extend(expand_vars(p, env) for p in parts)
    return tuple(out)


def flag_value(tokens: Sequence[str], names: Iterable[str]) -> str | None:
    """Value of the last ``--flag value`` or ``--flag=value`` among ``names`` (argparse: last wins)."""
    wanted = tuple(names)
    found: str | None = None
    for i, tok in enumerate(tokens):
        for name in wanted:
            if tok == name and i + 1 < len(tokens):
                found = tokens[i + 1]
            elif tok.startswith(name + "="):
                found = tok[len(name) + 1 :]
    return found


def has_flag(tokens: Sequence[str], names: Iterable[str]) -> bool:
    wanted = tuple(names)
    return any(tok in wanted or tok.split("=", 1)[0] in wanted for tok in tokens)


def names(container: Mapping[str, Any], resource: str) -> bool:
    """Does the container's own ``resources`` name ``resource`` (as a request or a limit)?"""
    resources = container.get("resources")
    return isinstance(resources, dict) and any(
        isinstance(resources.get(part), dict) and resource in resources[part] for part in ("requests", "limits"))


def main_container(rd: FieldReader, main: Mapping[str, Any], resources: Mapping[str, Any], gpu_resource: str,
                   path: str) -> dict[str, Any]:
    """A v1alpha1 service's main container as the operator writes it: the service's ``resources``
    (``cpu``, ``memory``, ``gpu`` under ``gpuType``, each ``custom`` entry) under the mainContainer's
    own requests and limits, key by key (the mainContainer is merged over the dedicated fields with
    override: ai-dynamo/dynamo ``deploy/operator/api/v1alpha1/shared_spec_conversion.go``,
    ``buildPodTemplateToHub``, as the v1alpha1 controller's ``GenerateBasePodSpec`` did), and its
    ``resources.claims`` added to the container's (docs/operator-generations.md)."""
    raw = main.get("resources")
    own: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    out: dict[str, Any] = {"claims": [*(own.get("claims") or []), *(resources.get("claims") or [])]}
    for part in ("requests", "limits"):
        values = rd.mapping(resources.get(part), f"{path}.resources.{part}")
        service = {k: values[k] for k in ("cpu", "memory") if values.get(k) is not None}
        if values.get("gpu") is not None:
            service[gpu_resource] = values["gpu"]
        service.update(rd.str_map(values.get("custom"), f"{path}.resources.{part}.custom"))
        out[part] = {**service, **(own.get(part) or {})}
    return {**main, "resources": out}
