"""The operator simulator's controller: watch DGDs, reconcile their children, write their status.

Level-based like a real controller: DGD, Deployment and Pod events only put a DGD's key on a
deduplicating work queue; one worker reconciles a key at a time from the objects as they are now.
A reconcile builds the :class:`~deploy_suite_offline.operator_sim.plan.Plan`, checks the PVCs,
applies the children (once per DGD generation; a deleted child brings them back), asks the
serving whether the served components answer, and writes the status through the status
subresource as the operator writes it (state, the Ready condition with its reasons,
observedGeneration, per-service/component replica counts). What the operator would reject is
reported as state ``failed`` with the error text.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from deploy_suite import clock
from deploy_suite.access.kube import Kube, Obj, Resource, translate
from deploy_suite.constants import DGD_GROUP, DGD_KIND, DGD_PLURAL, LABEL_DGD_NAME
from deploy_suite.errors import Invalid, KubeError, NotFound
from deploy_suite_offline import dynamo_env
from deploy_suite_offline.errors import ReconcileError
from deploy_suite_offline.operator_sim import components, discovery, faultswitch, grove, multinode, profiles
from deploy_suite_offline.operator_sim.plan import (
    Plan,
    build_plan,
    child_name,
    deployment_readiness,
    owner_reference,
)
from deploy_suite_offline.operator_sim.serving import Servings
from deploy_suite_offline.operator_sim.spec import Part, is_alpha
from deploy_suite_offline.procs import Log

DGD_BETA = Resource(DGD_GROUP, "v1beta1", DGD_PLURAL, True, DGD_KIND)
DGD_ALPHA = Resource(DGD_GROUP, "v1alpha1", DGD_PLURAL, True, DGD_KIND)
DCD = Resource(DGD_GROUP, "v1beta1", "dynamocomponentdeployments", True, components.DCD_KIND)
# The newest operator's words for a component whose DCD is not Available.
DCD_NOT_READY = "Component deployment not ready - Available condition not true"

READY_REASON = "all_resources_are_ready"
NOT_READY_REASON = "some_resources_are_not_ready"
FAILED_REASON = "failed_to_reconcile_the_resources"
# After a Kubernetes error (the apiserver may be restarting) a key is reconciled again this much later.
REQUEUE_S = 1.0

Loop = tuple[str, Callable[[], Iterator[tuple[str, Obj]]], Callable[[str, Obj], None]]


class WorkQueue:
    """Keys to reconcile, deduplicated: a burst of pod events becomes one reconcile."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._keys: list[str] = []

    def add(self, key: str) -> None:
        with self._cond:
            if key not in self._keys:
                self._keys.append(key)
                self._cond.notify()

    def get(self, stop: threading.Event, timeout: float = 1.0) -> str | None:
        """The next key, or None after ``timeout`` (so the worker sees ``stop``)."""
        with self._cond:
            if not self._keys:
                self._cond.wait(timeout)  # woken by add(): a wait on the queue, not a sleep
            if stop.is_set() or not self._keys:
                return None
            return self._keys.pop(0)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()


class OperatorSim:
    def __init__(self, kube: Kube, cluster_dir: Path, log: Log, serve: bool = True,
                 dynamo_version: str = dynamo_env.DEFAULT_VERSION,
                 profile: profiles.Profile | None = None, orchestrators: tuple[str, ...] = (),
                 k8s_discovery: bool = False) -> None:
        self.kube = kube
        self.k8s_discovery = k8s_discovery  # pods that run Dynamo find each other (discovery.py)
        self.profile = profile or profiles.get(profiles.DEFAULT_PROFILE)
        self.orchestrators = orchestrators
        self.dgd = self.profile.dgd
        self.lws = multinode.LwsController(kube)
        self.grove = grove.GrovePath(kube)
        self.dynamo_root = cluster_dir / "dynamo"
        self.log = log
        self.queue = WorkQueue()
        self.servings = Servings(kube, self.dynamo_root, log, self.queue.add, enabled=serve,
                                 dynamo_version=dynamo_version)
        self._applied: dict[str, tuple[str, int, bool]] = {}  # key -> (uid, generation, gated) children applied for
        self._dcd_status: dict[str, tuple[str, str, str]] = {}  # ns/dcd -> Available (status, reason, message)
        self._dcd_errors: dict[str, str] = {}  # ns/dcd -> why its Deployment could not be written
        self._transient_fired: dict[str, tuple[str, int]] = {}  # key -> (uid, generation) a transient fault hit
        self._gates: dict[str, tuple[tuple[str, int], float]] = {}  # key -> (uid, generation), gate seen at

    # ------------------------------------------------------------------ wiring into controllers
    def loops(self, stop: threading.Event) -> list[Loop]:
        sel = LABEL_DGD_NAME
        return [
            ("operator-sim/dgds", lambda: self.kube.watch_events(self.dgd, stop), self.on_dgd),
            ("operator-sim/deployments", lambda: self.kube.watch_events("Deployment", stop, label_selector=sel),
             self.on_owned),
            ("operator-sim/pods", lambda: self.kube.watch_events("Pod", stop, label_selector=sel), self.on_owned),
        ]

    def start(self, stop: threading.Event) -> list[threading.Thread]:
        threads = self.servings.start(stop)  # first: serving's state is settled before any reconcile
        worker = threading.Thread(target=self._worker, args=(stop,), daemon=True, name="operator-sim/worker")
        worker.start()
        return [worker, *threads]

    def on_dgd(self, etype: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if etype == "DELETED":
            self.forget(key)
        else:
            self.queue.add(key)

    def on_owned(self, etype: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        name = (meta.get("labels") or {}).get(LABEL_DGD_NAME)
        if not name:
            return
        key = f"{meta.get('namespace')}/{name}"
        if etype == "DELETED" and obj.get("kind") == "Deployment":
            self._applied.pop(key, None)  # a child went away: apply the children again
        self.queue.add(key)

    def forget(self, key: str) -> None:
        """The DGD is gone: forget its children and stop its serving."""
        self._applied.pop(key, None)
        self.servings.forget(key)

    # ------------------------------------------------------------------ the work loop
    def _worker(self, stop: threading.Event) -> None:
        self._cleanup_orphans()
        while not stop.is_set():
            key = self.queue.get(stop)
            if key is None:
                continue
            try:
                self.reconcile(key)
            except KubeError as exc:
                self.log(f"operator-sim: reconcile {key}: {exc}")
                timer = threading.Timer(REQUEUE_S, self.queue.add, args=(key,))
                timer.daemon = True
                timer.start()
            except Exception as exc:  # a bug must not kill the loop; the log says what happened
                self.log(f"operator-sim: reconcile {key} crashed: {type(exc).__name__}: {exc}")

    def _cleanup_orphans(self) -> None:
        """Servings left by an earlier controllers process whose DGD is gone are stopped."""
        if not self.dynamo_root.is_dir():
            return
        try:
            items, _ = self.kube.list_items(self.dgd)
        except KubeError as exc:
            self.log(f"operator-sim: cannot list DGDs for orphan cleanup: {exc}")
            return
        self.servings.cleanup_orphans({f"{i['metadata']['namespace']}/{i['metadata']['name']}" for i in items})

    def reconcile(self, key: str) -> None:
        namespace, name = key.split("/", 1)
        obj = self.kube.get_or_none(self.dgd, name, namespace)
        if obj is None:
            self.forget(key)
            return
        finalizers = list(obj["metadata"].get("finalizers") or [])
        if obj["metadata"].get("deletionTimestamp"):
            # The garbage collector removes the children; the operator's finalizer only waits for
            # its own clean-up (the serving processes here), then lets the DGD go.
            if profiles.FINALIZER in finalizers:
                self.forget(key)
                self._set_finalizers(obj, [f for f in finalizers if f != profiles.FINALIZER])
            return
        if self.profile.finalizer and profiles.FINALIZER not in finalizers:
            obj = self._set_finalizers(obj, [*finalizers, profiles.FINALIZER])
        # Without conversion both served versions hold the same object: write through the shape's own.
        res = self.dgd if self.profile.storage == "v1alpha1" else DGD_ALPHA if is_alpha(obj) else DGD_BETA
        try:
            plan = build_plan(obj)
            self._check_pvcs(obj, plan)
            names = self._child_names(obj, plan)
            fault = self._fault(key)
            if self._gate_holds(obj, key, fault):
                fault = faultswitch.OperatorFault("checkpoint-gate")
            elif fault is not None and fault.kind == "checkpoint-gate":
                fault = None  # the checkpoint is ready: the workloads get their replicas
            deployments = self._apply_children(obj, plan, names, fault)
            self._transient(obj, key, fault, names)
        except ReconcileError as exc:
            why = self.profile.multinode_reason if isinstance(exc, multinode.NoOrchestrator) else FAILED_REASON
            self._write_status(res, obj, status_for(obj, "failed", why, str(exc), None, None,
                                                         observed_generation=self.profile.observed_generation))
            return
        self.servings.ensure(plan)
        component_status: dict[str, Obj] = {}
        not_ready: list[str] = []
        serving = self.servings.readiness(plan)
        for c in plan.model.components:
            dep_name = names[c.name]
            desired = c.replicas * c.node_count
            kind, children = "Deployment", [dep_name]
            if self._on_grove(obj):
                ready, reason, counts, kind, children = self.grove.readiness(plan, c)
            elif c.node_count > 1:
                kind, children = "LeaderWorkerSet", multinode.lws_names(dep_name, c.replicas)
                ready, reason, counts = self.lws.readiness(plan.namespace, plan.name, children, c.node_count)
            else:
                ready, reason, counts = deployment_readiness(deployments.get(dep_name), desired)
            if self.profile.dcds and not self._on_grove(obj):
                # The DCD reports its workload; the DGD sees only the DCD's Available condition.
                self._write_dcd_status(plan.namespace, dep_name, deployments.get(dep_name), ready)
                reason = DCD_NOT_READY
            if ready and c.name in plan.served_components() and serving is not None and desired:
                ready, reason = serving
            if not ready:
                not_ready.append(f"{dep_name}: {reason}")
            component_status[c.name] = {"componentKind": kind, "componentNames": children,
                                        "replicas": counts["replicas"], "updatedReplicas": counts["updatedReplicas"],
                                        "readyReplicas": counts["readyReplicas"],
                                        "availableReplicas": counts["availableReplicas"]}
            if plan.alpha:
                component_status[c.name]["componentName"] = dep_name
        if fault is not None and fault.kind == "checkpoint-gate":
            gpu = [c.name for c in plan.model.components if faultswitch.gated(plan.deployments[c.name])
                   is not plan.deployments[c.name]]
            state, reason, message = "pending", faultswitch.CHECKPOINT_REASON, \
                faultswitch.checkpoint_message(gpu, plan.name)
        elif not_ready:
            state, reason, message = "pending", NOT_READY_REASON, f"Resources not ready: {'; '.join(not_ready)}"
        else:
            state, reason, message = "successful", READY_REASON, "All resources are ready"
        self._write_status(res, obj, status_for(obj, state, reason, message, component_status, plan.alpha,
                                                     observed_generation=self.profile.observed_generation))
        self.servings.wire_pods(plan)

    # ------------------------------------------------------------------ children
    def _check_pvcs(self, obj: Obj, plan: Plan) -> None:
        """Top-level PVCs must exist (create: false) or are created (create: true), as reconcilePVCs
        does: a created one has the DGD as controller owner (every generation), set at creation only."""
        for pvc in plan.model.pvcs:
            if pvc.create:
                if self.kube.get_or_none("PersistentVolumeClaim", pvc.name, plan.namespace) is None:
                    self.kube.apply({
                        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                        "metadata": {"name": pvc.name, "namespace": plan.namespace,
                                     "ownerReferences": [owner_reference(obj)]},
                        "spec": {"accessModes": [pvc.access_mode or "ReadWriteOnce"],
                                 **({"storageClassName": pvc.storage_class} if pvc.storage_class else {}),
                                 "resources": {"requests": {"storage": pvc.size or "1Gi"}}}})
                continue
            if self.kube.get_or_none("PersistentVolumeClaim", pvc.name, plan.namespace, metadata_only=True) is None:
                raise ReconcileError(f"failed to reconcile top-level PVCs: persistentvolumeclaims "
                                     f"\"{pvc.name}\" not found")
        raw: list[Obj] = [] if plan.alpha else list(obj["spec"].get("components") or [])
        for c in plan.model.components:
            entry: Obj = next((x for x in raw if x.get("name") == c.name), {})
            cache = (entry.get("compilationCache") or {}).get("pvcName")
            if cache and self.kube.get_or_none("PersistentVolumeClaim", cache, plan.namespace,
                                               metadata_only=True) is None:
                raise ReconcileError(f"failed to reconcile Dynamo components deployments: component {c.name!r}: "
                                     f"compilation cache persistentvolumeclaims \"{cache}\" not found")

    def _on_grove(self, obj: Obj) -> bool:
        """The newest operator's path choice: Grove when it is installed and the DGD does not opt out."""
        return self.profile.dcds and "grove" in self.orchestrators and grove.wanted(obj)

    def _child_names(self, obj: Obj, plan: Plan) -> dict[str, str]:
        """Component -> the name of its Deployment (and DCD on the newest path)."""
        if not self.profile.dcds or self._on_grove(obj):
            return {c.name: child_name(plan.name, c.name) for c in plan.model.components}
        hash_ = components.worker_hash(obj)
        return {c.name: components.dcd_name(plan, c, hash_) for c in plan.model.components}

    def _workload(self, plan: Plan, c: Part, name: str, owner: Obj, deployment: Obj) -> list[Obj]:
        """A component's workload: its Deployment, or per replica a LeaderWorkerSet and a Volcano
        PodGroup when it is multinode (failing as the operator does without an orchestrator)."""
        if c.node_count <= 1:
            return [deployment]
        if "lws" not in self.orchestrators:
            raise multinode.NoOrchestrator(multinode.NO_ORCHESTRATOR)
        labels = deployment["metadata"]["labels"]
        out: list[Obj] = []
        for lws_name in multinode.lws_names(name, c.replicas):
            out.append(multinode.leader_worker_set(lws_name, plan.namespace, deployment, c.node_count, owner))
            out.append(multinode.pod_group(lws_name, plan.namespace, c.node_count, labels, owner))
        return out

    def _grove_children(self, obj: Obj, plan: Plan) -> list[Obj]:
        """Apply the Grove objects (after checking the KAI queue); return the Services to apply."""
        annotations = obj["metadata"].get("annotations") or {}
        queue = annotations.get(grove.QUEUE_ANNOTATION) or grove.DEFAULT_QUEUE
        if self.kube.get_or_none(self.kube.resource("scheduling.run.ai/v2", "Queue"), queue) is None:
            raise ReconcileError(f"kai-scheduler queue validation failed: queue \"{queue}\" not found")
        owner = next(iter(plan.deployments.values()))["metadata"]["ownerReferences"][0]
        self.grove.apply(plan, owner, queue)
        services = [s for c in plan.model.components if c.type != "frontend"
                    for s in [components.component_service(plan, c, owner)] if s is not None]
        return [*plan.services, *services]

    def _children(self, obj: Obj, plan: Plan, names: dict[str, str]) -> list[Obj]:
        """Apply the DCDs (newest path) and return the workloads and Services to apply."""
        if self._on_grove(obj):
            return self._grove_children(obj, plan)
        if not self.profile.dcds:
            out = []
            for c in plan.model.components:
                dep = plan.deployments[c.name]
                out += self._workload(plan, c, names[c.name], dep["metadata"]["ownerReferences"][0], dep)
            return [*out, *plan.services]
        if any(c.node_count > 1 for c in plan.model.components) and "lws" not in self.orchestrators:
            raise multinode.NoOrchestrator(multinode.NO_ORCHESTRATOR)  # before any DCD is made
        hash_ = components.worker_hash(obj)
        spec = obj.get("spec") or {}
        raws = {str(c.get("name")): c for c in spec.get("components") or []} if not plan.alpha else \
            {str(k): v or {} for k, v in (spec.get("services") or {}).items()}
        children: list[Obj] = list(plan.services)  # the frontend Services, as on every path
        for c in plan.model.components:
            dgd_owner = plan.deployments[c.name]["metadata"]["ownerReferences"][0]
            dcd = self.kube.apply(components.dcd_manifest(plan, c, names[c.name], dgd_owner, raws.get(c.name, {})),
                                  plan.namespace)
            owner = {"apiVersion": components.DCD_API, "kind": components.DCD_KIND, "name": names[c.name],
                     "uid": dcd["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
            worker = names[c.name] != child_name(plan.name, c.name)
            dep = components.owned_deployment(plan.deployments[c.name], names[c.name], owner, hash_ if worker else None)
            children += self._workload(plan, c, names[c.name], owner, dep)
            if self.profile.component_services and c.type != "frontend":
                service = components.component_service(plan, c, dgd_owner)
                if service is not None:
                    children.append(service)
        return children

    def _fault(self, key: str) -> faultswitch.OperatorFault | None:
        cm = self.kube.get_or_none("ConfigMap", faultswitch.CONFIGMAP[1], faultswitch.CONFIGMAP[0])
        return faultswitch.parse(((cm or {}).get("data") or {}).get(key.replace("/", ".", 1)))

    def _gate_holds(self, obj: Obj, key: str, fault: faultswitch.OperatorFault | None) -> bool:
        """The checkpoint-gate fault: held from the generation's first reconcile for its seconds,
        then a requeue opens it."""
        if fault is None or fault.kind != "checkpoint-gate":
            return False
        meta = obj["metadata"]
        stamp = (str(meta["uid"]), int(meta.get("generation") or 0))
        if key not in self._gates or self._gates[key][0] != stamp:
            self._gates[key] = (stamp, time.monotonic())
            timer = threading.Timer(fault.seconds, self.queue.add, args=(key,))
            timer.daemon = True
            timer.start()
        return time.monotonic() - self._gates[key][1] < fault.seconds

    def _transient(self, obj: Obj, key: str, fault: faultswitch.OperatorFault | None,
                   names: dict[str, str]) -> None:
        """The transient-failed fault: one failed reconcile per generation, then a requeue that recovers."""
        meta = obj["metadata"]
        stamp = (str(meta["uid"]), int(meta.get("generation") or 0))
        if fault is None or fault.kind != "transient-failed" or self._transient_fired.get(key) == stamp:
            return
        self._transient_fired[key] = stamp
        timer = threading.Timer(fault.seconds, self.queue.add, args=(key,))
        timer.daemon = True
        timer.start()
        first = next(iter(names.values()))
        kind = "dynamocomponentdeployments.nvidia.com" if self.profile.dcds else "deployments.apps"
        raise ReconcileError(faultswitch.conflict_message(kind, first))

    def _apply_children(self, obj: Obj, plan: Plan, names: dict[str, str],
                        fault: faultswitch.OperatorFault | None = None) -> dict[str, Obj]:
        meta = obj["metadata"]
        gate = fault is not None and fault.kind == "checkpoint-gate"
        stamp = (str(meta["uid"]), int(meta.get("generation") or 0), gate)
        selector = f"{LABEL_DGD_NAME}={plan.name}"
        if self._applied.get(plan.key) != stamp:
            children = self._children(obj, plan, names)
            if self.k8s_discovery:
                children = discovery.shape(children, plan, owner_reference(obj))
            if fault is not None and fault.kind == "invalid-template":
                children = [faultswitch.invalid_template(c) if c["kind"] == "Deployment" else c for c in children]
            if gate:
                children = [faultswitch.gated(c) for c in children]
            for child in children:
                self._apply_child(child, plan)
            wanted = {d["metadata"]["name"] for d in children} | set(names.values())
            kinds: list[str | Resource] = ["Deployment", "Service", *([DCD] if self.profile.dcds else []),
                                           *([multinode.LWS] if "lws" in self.orchestrators else [])]
            for kind in kinds:
                items, _ = self.kube.list_items(kind, plan.namespace, label_selector=selector)
                for item in items:
                    owners = item["metadata"].get("ownerReferences") or []
                    if item["metadata"]["name"] not in wanted and any(o.get("uid") == meta["uid"] for o in owners):
                        self.kube.delete(kind, item["metadata"]["name"], plan.namespace)
            self._applied[plan.key] = stamp
        if self._on_grove(obj):
            self.grove.ensure_pods(plan)  # Grove's part: the cliques' pods, the PodGang, the gates lifted
        elif "lws" in self.orchestrators and any(c.node_count > 1 for c in plan.model.components):
            for lws in self.kube.list_items(multinode.LWS, plan.namespace, label_selector=selector)[0]:
                self.lws.ensure(lws)  # level-based: a pod that went away is made again
        items, _ = self.kube.list_items("Deployment", plan.namespace, label_selector=selector)
        return {i["metadata"]["name"]: i for i in items}

    def _set_finalizers(self, obj: Obj, finalizers: list[str]) -> Obj:
        """A merge patch of ``metadata.finalizers``, guarded by the resourceVersion read (a conflict
        requeues the key, as the operator's update would)."""
        meta = obj["metadata"]
        body = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
        try:
            data = self.kube.transport.request("PATCH", self.dgd.path(meta["namespace"], meta["name"]), {}, body,
                                               "application/merge-patch+json")
        except Exception as exc:  # translated like every Kube call
            raise translate(exc, f"patch finalizers of {meta['namespace']}/{meta['name']}") from exc
        patched: Obj = json.loads(data)
        return patched

    # ------------------------------------------------------------------ status
    def _apply_child(self, child: Obj, plan: Plan) -> None:
        """Apply one child. A Deployment the apiserver refuses (an invalid pod template) is an error
        of its DCD on the newest path (the DGD stays pending), of the whole DGD on the older ones."""
        key = f"{plan.namespace}/{child['metadata']['name']}"
        try:
            self.kube.apply(child, plan.namespace)
        except Invalid as exc:
            if child["kind"] != "Deployment":
                raise
            if not self.profile.dcds:
                raise ReconcileError(f"failed to reconcile Dynamo components deployments: {exc}") from exc
            message = f"failed to create or update Deployment {child['metadata']['name']}: {exc}"
            self._dcd_errors[key] = message
            owner = child["metadata"]["ownerReferences"][0]
            self._warn(plan.namespace, owner, "FailedCreate", message)
            return
        if child["kind"] == "Deployment":
            self._dcd_errors.pop(key, None)

    def _warn(self, namespace: str, about: Obj, reason: str, message: str) -> None:
        """A Warning event on one of the replica's objects (``kubectl describe`` shows it)."""
        now = clock.iso_now()
        self.kube.create({"apiVersion": "v1", "kind": "Event",
                          # Named as client-go's event recorder names them (`<object>.<unix nanoseconds in hex>`).
                          "metadata": {"name": f"{about['name']}.{time.time_ns():x}", "namespace": namespace},
                          "involvedObject": {"apiVersion": about["apiVersion"], "kind": about["kind"],
                                             "name": about["name"], "namespace": namespace, "uid": about["uid"]},
                          "reason": reason, "message": message, "type": "Warning", "count": 1,
                          "firstTimestamp": now, "lastTimestamp": now,
                          "source": {"component": "dynamocomponentdeployment-controller"}}, namespace)

    def _write_dcd_status(self, namespace: str, name: str, deployment: Obj | None, ready: bool) -> None:
        key = f"{namespace}/{name}"
        cond = components.available_condition(deployment, ready, clock.iso_now(), self._dcd_errors.get(key))
        seen = (cond["status"], cond["reason"], cond["message"])
        if self._dcd_status.get(key) == seen:
            return
        try:
            self.kube.patch_status(DCD, name, namespace, {"conditions": [cond]})
        except NotFound:
            return
        self._dcd_status[key] = seen

    def _write_status(self, res: Resource, obj: Obj, status: Obj) -> None:
        if _same_status(obj.get("status") or {}, status):
            return
        meta = obj["metadata"]
        try:
            self.kube.patch_status(res, meta["name"], meta["namespace"], status)
        except NotFound:
            return


def status_for(obj: Obj, state: str, reason: str, message: str, components: dict[str, Obj] | None,
               alpha: bool | None, *, observed_generation: bool = True) -> Obj:
    """The status the operator writes for ``state`` (a merge patch over the object's current status);
    ``observed_generation`` False plays an operator before 1.0, which never writes the field."""
    old = obj.get("status") or {}
    now = clock.iso_now()
    ready = "True" if state == "successful" else "False"
    previous = next((c for c in old.get("conditions") or [] if c.get("type") == "Ready"), None)
    since = now if previous is None or previous.get("status") != ready else \
        str(previous.get("lastTransitionTime") or now)
    condition = {"type": "Ready", "status": ready, "reason": reason, "message": message, "lastTransitionTime": since}
    others = [c for c in old.get("conditions") or [] if c.get("type") != "Ready"]
    status: Obj = {"state": state, "conditions": [*others, condition]}
    if state != "failed" and observed_generation:
        # Only a successful reconcile advances observedGeneration (the operator's contract).
        status["observedGeneration"] = int(obj["metadata"].get("generation") or 0)
    if components is not None:
        field_name = "services" if alpha else "components"
        # A merge patch keeps map entries it does not mention: null out components that went away.
        stale = {k: None for k in (old.get(field_name) or {}) if k not in components}
        status[field_name] = {**stale, **components}
    return status


def _same_status(old: Obj, new: Obj) -> bool:
    for key, value in new.items():
        if key == "conditions":
            def strip(conds: list[Obj]) -> list[tuple[Any, ...]]:
                return [(c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in conds]
            if strip(old.get("conditions") or []) != strip(value):
                return False
        elif isinstance(value, dict):
            if {k: v for k, v in value.items() if v is not None} != (old.get(key) or {}):
                return False
        elif old.get(key) != value:
            return False
    return True
