"""Nodes: a node's own conditions, as the kubelet posts them (``MemoryPressure``, ``DiskPressure``,
``PIDPressure``, ``NetworkUnavailable`` True; ``Ready`` not True). Each is the platform's: the
kubelet evicts pods and the node lifecycle controller taints the node for it, whatever the pods
ask (docs/triage.md). Pure: a Node in, a verdict out."""

from __future__ import annotations

from deploy_suite.constants import ObjView
from deploy_suite.judges.triage import Verdict
from deploy_suite.vocab import TriageCategory

PRESSURE = ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")


def triage_node(node: ObjView) -> Verdict | None:
    """``platform`` for a node under pressure or not Ready (each condition's reason and message as
    evidence); None for a healthy node or one that posts no conditions."""
    name = str((node.get("metadata") or {}).get("name"))
    conds = {str(c.get("type")): c for c in (node.get("status") or {}).get("conditions") or []}
    bad = [c for t, c in conds.items() if t in PRESSURE and c.get("status") == "True"]
    ready = conds.get("Ready")
    if ready is not None and ready.get("status") != "True":
        bad.append(ready)
    if not bad:
        return None
    named = ", ".join(f"{c.get('type')}={c.get('status')}" for c in bad)
    evidence = [f"node/{name} {c.get('type')}={c.get('status')} since {c.get('lastTransitionTime', '?')}: "
                f"{c.get('reason') or 'no reason'}: {c.get('message') or 'no message'}" for c in bad]
    return Verdict(TriageCategory.PLATFORM, f"node {name} is not healthy ({named}): its pods are evicted or refused "
                   "whatever they ask: a platform fault, not the candidate's: fix the node (free its memory or "
                   "disk, restart its kubelet), then rerun", evidence)
