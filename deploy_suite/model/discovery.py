"""What a Dynamo runtime publishes about itself with Kubernetes discovery.

With ``DYN_DISCOVERY_BACKEND=kubernetes`` (the operator's default on current releases) each runtime
server-side-applies a ``DynamoWorkerMetadata`` object (``nvidia.com/v1alpha1``) named after its pod
and owned by it; ``spec.data.endpoints`` maps a key to each endpoint it serves, with its
``namespace``, ``component``, ``endpoint`` and the runtime's ``instance_id``: the u64 the frontend's
direct router takes in ``x-dynamo-worker-instance-id``. docs/operator-generations.md ("The worker
instance id") gives the sources. Pure: objects in, ids out.
"""

from __future__ import annotations

from collections.abc import Iterable

from deploy_suite.constants import LABEL_COMPONENT_TYPE, Obj

KIND = "DynamoWorkerMetadata"
PLURAL = "dynamoworkermetadatas"
GENERATE = "generate"  # the endpoint a worker serves inference on (and the direct router targets)


def owned_by(obj: Obj, pod: Obj) -> bool:
    """True when the metadata object belongs to the pod: owned by it (uid, else name), or, without
    owner references, named after it."""
    meta = obj.get("metadata") or {}
    pod_meta = pod.get("metadata") or {}
    owners = [o for o in meta.get("ownerReferences") or [] if isinstance(o, dict) and o.get("kind") == "Pod"]
    if owners:
        uid = pod_meta.get("uid")
        return any((uid and o.get("uid") == uid) or (not uid and o.get("name") == pod_meta.get("name"))
                   for o in owners)
    return bool(meta.get("name")) and meta.get("name") == pod_meta.get("name")


def _instance_id(entry: Obj) -> int | None:
    value = entry.get("instance_id")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def generate_instances(objs: Iterable[Obj], pod: Obj) -> list[tuple[int, str]]:
    """(instance id, object name) of each ``generate`` endpoint the pod's runtimes registered, each
    id once: a worker that does not prefill first, then by object and key (container mode gives a
    runtime per container)."""
    found: list[tuple[bool, str, str, int]] = []
    for obj in objs:
        if not owned_by(obj, pod):
            continue
        name = str((obj.get("metadata") or {}).get("name", ""))
        endpoints = ((obj.get("spec") or {}).get("data") or {}).get("endpoints") or {}
        if not isinstance(endpoints, dict):
            continue
        for key, entry in endpoints.items():
            if not isinstance(entry, dict) or entry.get("endpoint") != GENERATE:
                continue
            if entry.get("type") not in (None, "Endpoint"):
                continue
            ident = _instance_id(entry)
            if ident is not None:
                found.append(("prefill" in str(entry.get("component", "")).lower(), name, str(key), ident))
    instances: list[tuple[int, str]] = []
    for _, name, _, ident in sorted(found):
        if all(ident != seen for seen, _ in instances):
            instances.append((ident, name))
    return instances


BACKEND_ENV = "DYN_DISCOVERY_BACKEND"


def registers(pod: Obj) -> bool:
    """Whether the pod is a worker whose runtime registers with Kubernetes discovery: a container's
    env sets ``DYN_DISCOVERY_BACKEND=kubernetes`` (the operator writes it where discovery is
    Kubernetes); a frontend's or a planner's pod serves no worker endpoint."""
    kind = str(((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_COMPONENT_TYPE) or "")
    if kind in {"frontend", "planner", "main"}:
        return False
    containers = ((pod.get("spec") or {}).get("containers") or [])
    return any(isinstance(e, dict) and e.get("name") == BACKEND_ENV and e.get("value") == "kubernetes"
               for c in containers if isinstance(c, dict) for e in c.get("env") or [])


def unregistered(pods: Iterable[Obj], objs: Iterable[Obj]) -> list[str]:
    """The names of the running pods that register with Kubernetes discovery and have no
    ``DynamoWorkerMetadata`` of theirs (a registration that has not come)."""
    found = list(objs)
    return sorted(str((p.get("metadata") or {}).get("name")) for p in pods
                  if registers(p) and (p.get("status") or {}).get("phase") == "Running"
                  and not (p.get("metadata") or {}).get("deletionTimestamp")
                  and not any(owned_by(o, p) for o in found))
