"""Which part of a DGD serves the OpenAI HTTP API, as each operator generation reads the manifest.

Two places can run the Dynamo frontend (docs/operator-generations.md, "Where the frontend runs"):

* **a frontend component**, reached through the Service the operator names ``<dgd>-<lowercased
  component>``: a component typed ``frontend``, or, in v1alpha1, ``componentType: main`` (the entry
  component of the operators that predate the ``frontend`` type: they gave it the frontend's
  defaults and its Service), or a component of another type whose main container runs
  ``python3 -m dynamo.frontend``;
* **a frontend sidecar** in another component's pods (the gaie recipes: no frontend Service, port
  8000 of a worker pod), declared with ``frontendSidecar``: in v1alpha1 a spec ``{image, args,
  envFromSecret, envs}`` from which the operator builds a container ``sidecar-frontend`` (command
  ``python3``, args ``-m dynamo.frontend`` unless ``args`` replace them, the frontend's port 8000,
  probes and Dynamo env); in v1beta1 the name of a ``podTemplate`` container into which the operator
  merges the same defaults. A container other than ``main`` running ``dynamo.frontend`` without
  the field (recipes older than it) is one too.

Pure: reads already-parsed mappings through :class:`FieldReader`, never a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deploy_suite.model.podspec import EnvFrom, EnvVar, env_from, env_list, env_values, flag_value, split_args
from deploy_suite.model.scheduling import FieldReader

FRONTEND_TYPE = "frontend"
LEGACY_ENTRY_TYPE = "main"  # v1alpha1 componentType of the entry component before the `frontend` type
FRONTEND_MODULE = "dynamo.frontend"
# What the operator gives a frontend container that says nothing (its FrontendDefaults).
SIDECAR_CONTAINER = "sidecar-frontend"
DEFAULT_COMMAND = ("python3",)
DEFAULT_ARGS = ("-m", FRONTEND_MODULE)
FRONTEND_PORT = 8000
ROUTER_MODE_ENV = "DYN_ROUTER_MODE"


@dataclass(frozen=True)
class FrontendSidecar:
    """A container serving the OpenAI API inside another component's pods, as the pod will run it."""

    container: str  # the container's name in the pod
    image: str | None
    tokens: tuple[str, ...]  # command + args as the container runs them, env-expanded
    env: tuple[EnvVar, ...]
    env_from: tuple[EnvFrom, ...]
    declared_by: str  # "frontendSidecar" (either shape) or "a container running dynamo.frontend"

    @property
    def router_mode(self) -> str | None:
        return router_mode(self.tokens, self.env)


def router_mode(tokens: Sequence[str], env: Sequence[EnvVar]) -> str | None:
    """The frontend's router mode: ``--router-mode`` (last wins), else ``DYN_ROUTER_MODE``."""
    return flag_value(tokens, ["--router-mode"]) or env_values(env).get(ROUTER_MODE_ENV)


def runs_frontend(tokens: Sequence[str]) -> bool:
    """Does this command line start the Dynamo frontend (``python3 -m dynamo.frontend ...``)?"""
    return FRONTEND_MODULE in tokens


def alpha_sidecar(rd: FieldReader, raw: Any, path: str) -> FrontendSidecar | None:
    """v1alpha1 ``frontendSidecar: {image, args, envFromSecret, envs}``: the container the operator injects."""
    if raw is None:
        return None
    spec = rd.mapping(raw, path)
    image = rd.text(spec.get("image"), f"{path}.image")
    if not image:
        raise rd.fail(f"{path}.image", "missing (the operator builds the sidecar from it)",
                      "give frontendSidecar the image that runs the Dynamo frontend")
    env = env_list(rd, spec.get("envs"), f"{path}.envs")
    secret = rd.text(spec.get("envFromSecret"), f"{path}.envFromSecret")
    args = rd.strs(spec.get("args"), f"{path}.args") or DEFAULT_ARGS  # args replace the default args entirely
    return FrontendSidecar(SIDECAR_CONTAINER, image, split_args([*DEFAULT_COMMAND, *args], env_values(env)), env,
                           (EnvFrom("secret", secret),) if secret else (), "frontendSidecar")


def beta_sidecar(rd: FieldReader, named: Any, containers: Sequence[Mapping[str, Any]],
                 path: str) -> FrontendSidecar | None:
    """v1beta1 ``frontendSidecar: <container name>``: that container with the operator's frontend
    defaults under what it says; without the field, a container running the frontend."""
    if named is None:
        return undeclared_sidecar(rd, containers, f"{path}.podTemplate.spec")
    name = rd.text(named, f"{path}.frontendSidecar")
    found = next((c for c in containers if c.get("name") == name), None)
    if found is None:
        raise rd.fail(f"{path}.frontendSidecar", f"names {name!r}, which is not a container of "
                      "podTemplate.spec.containers (the operator's webhook refuses it)",
                      "name the sidecar container that runs the Dynamo frontend, or add it to podTemplate")
    return _container_sidecar(rd, found, f"{path}.podTemplate.spec.containers[{name}]", "frontendSidecar",
                              defaults=True)


def undeclared_sidecar(rd: FieldReader, containers: Sequence[Mapping[str, Any]], path: str) -> FrontendSidecar | None:
    """A container other than ``main`` whose command line runs ``dynamo.frontend``."""
    for c in containers:
        if c.get("name") == "main":
            continue
        found = _container_sidecar(rd, c, f"{path}.containers[{c.get('name')}]", "a container running "
                                   f"{FRONTEND_MODULE}", defaults=False)
        if runs_frontend(found.tokens):
            return found
    return None


def _container_sidecar(rd: FieldReader, c: Mapping[str, Any], path: str, declared_by: str, *,
                       defaults: bool) -> FrontendSidecar:
    env = env_list(rd, c.get("env"), f"{path}.env")
    command = rd.strs(c.get("command"), f"{path}.command")
    args = rd.strs(c.get("args"), f"{path}.args")
    if defaults:  # the operator merges its defaults under the container: a field left empty takes them
        command, args = command or DEFAULT_COMMAND, args or DEFAULT_ARGS
    return FrontendSidecar(str(c.get("name")), rd.text(c.get("image"), f"{path}.image"),
                           split_args([*command, *args], env_values(env)), env,
                           tuple(env_from(rd, c.get("envFrom"), f"{path}.envFrom")), declared_by)
