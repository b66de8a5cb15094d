"""Step 2's platform checks: can this cluster run any DGD at all? Read-only.

A fault of the platform (a dead operator, an unreachable webhook, a DGD API version the cluster does
not serve, GPU nodes whose device plugin advertises no GPU, no multinode orchestrator, a missing
KAI queue) is not the candidate's: it blocks step 2 with the class ``BlockerClass.PLATFORM`` (a ``blocked``
run, never a failed attempt, so no budget is charged: ``deploy_suite/record/budget.py``), naming the
fault and the fix, before anything is retired or applied. ``Forbidden`` on any read here is a
limitation, as everywhere in step 2 (docs/procedure.md, "Step 2: the platform and the dry-run").

Evidence (the ledger's ``preflight.platform``): the Kubernetes server version, the API groups of the
orchestrators, the DGD versions served and stored and the one the run talks in, the operator's
Deployment and version, the webhook configurations that match DGDs, the GPU nodes' state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from deploy_suite.access.kube import Kube, Obj, Resource
from deploy_suite.constants import DGD_GROUP, DGD_KIND, DGD_PLURAL, GPU_PRODUCT_LABEL, GPU_RESOURCE
from deploy_suite.errors import Forbidden
from deploy_suite.model.dgd import Dgd
from deploy_suite.vocab import BlockerClass

GROVE_GROUP = "grove.io"
LWS_GROUP = "leaderworkerset.x-k8s.io"
VOLCANO_GROUP = "scheduling.volcano.sh"
KAI_GROUP = "scheduling.run.ai"
# DGD metadata annotations that choose the Grove path and the KAI queue (docs/procedure.md, step 2).
GROVE_ANNOTATION = "nvidia.com/enable-grove"
KAI_QUEUE_ANNOTATION = "nvidia.com/kai-scheduler-queue"
# GPU Feature Discovery labels: a node carrying one has GPUs, whatever its device plugin advertises.
GFD_LABELS = (GPU_PRODUCT_LABEL, "nvidia.com/gpu.present", "nvidia.com/gpu.count")
# Labels the operator's Helm chart puts on its Deployment, tried when no webhook names its Service.
OPERATOR_SELECTORS = ("app.kubernetes.io/part-of=dynamo-operator", "app.kubernetes.io/name=dynamo-operator")
# The label Grove's Helm chart puts on its operator Deployment.
GROVE_SELECTOR = "app.kubernetes.io/name=grove-operator"
WEBHOOK_CONFIGS = {
    "validating": Resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", False,
                           "ValidatingWebhookConfiguration"),
    "mutating": Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", False,
                         "MutatingWebhookConfiguration"),
}
OPERATOR_FIX = "check the operator pod: kubectl -n {ns} get pods; kubectl -n {ns} describe deployment {name}"
_MAX_NAMED = 5


@dataclass
class Verdicts:
    """What a group of step-2 checks found: blockers ``(category, message, fix)``, warnings,
    limitations (a read this identity may not make) and evidence for the ledger."""

    blockers: list[tuple[BlockerClass, str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    limitations: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)

    def block(self, message: str, fix: str, category: BlockerClass = BlockerClass.PLATFORM) -> None:
        self.blockers.append((category, message, fix))


def _names(names: list[str]) -> str:
    more = len(names) - _MAX_NAMED
    return ", ".join(names[:_MAX_NAMED]) + (f" and {more} more" if more > 0 else "")


def _available(obj: Obj) -> bool:
    return any(c.get("type") == "Available" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


class PlatformCheck:
    """The platform checks of one step-2 run (:func:`check_platform`)."""

    def __init__(self, kube: Kube, dgd: Dgd, dgd_doc: Obj, crd: Obj | None, nodes: list[Obj] | None) -> None:
        self.kube = kube
        self.dgd = dgd
        self.annotations: Mapping[str, Any] = (dgd_doc.get("metadata") or {}).get("annotations") or {}
        self.crd = crd
        self.nodes = nodes
        self.out = Verdicts()
        self.ev = self.out.evidence
        self.groups: dict[str, tuple[list[str], str]] | None = None

    def run(self) -> Verdicts:
        self.versions()
        self.dgd_api()
        services = self.webhooks()
        self.operator(services)
        self.gpu_nodes()
        self.orchestrators()
        return self.out

    # ------------------------------------------------------------------ versions and the DGD API
    def versions(self) -> None:
        try:
            self.ev["kubernetes_version"] = str(self.kube.server_version().get("gitVersion") or "unknown")
        except Forbidden:
            self.ev["kubernetes_version"] = "forbidden"
            self.out.limitations.append("server version (/version) forbidden for this identity")
        try:
            self.groups = self.kube.api_groups()
        except Forbidden:
            self.out.limitations.append("API discovery (/apis) forbidden: served DGD versions and multinode "
                                        "orchestrators unknown")
        self.ev["api_groups"] = "forbidden" if self.groups is None else {
            name: name in self.groups for name in (GROVE_GROUP, LWS_GROUP, VOLCANO_GROUP, KAI_GROUP)}

    def dgd_api(self) -> None:
        """The DGD versions the server serves (discovery) and stores (the CRD, when readable); the
        manifest's apiVersion must be one of them; the run then reads DGDs in a served version."""
        api = self.dgd.api_version
        crd_versions = ((self.crd or {}).get("spec") or {}).get("versions") or []
        record: dict[str, Any] = {
            "manifest": api,
            "crd_served": [v.get("name") for v in crd_versions if v.get("served")] if self.crd else None,
            "crd_storage": next((v.get("name") for v in crd_versions if v.get("storage")), None),
        }
        self.ev["dgd_api"] = record
        if self.groups is None:
            return
        served = self._served(DGD_GROUP, DGD_KIND)
        if served is None:
            return
        record["served"] = served
        record["preferred"] = self.groups.get(DGD_GROUP, ([], ""))[1] or None
        wanted = api.rpartition("/")[2]
        if served and wanted not in served:
            self.out.block(f"the manifest's apiVersion {api} is not served by {self.kube.context} "
                           f"(DynamoGraphDeployment is served in {', '.join(served)})",
                           f"write the candidate in a served version ({DGD_GROUP}/{served[0]}) or install a Dynamo "
                           "platform whose CRDs serve this one")
        if served:
            record["used"] = dict(self.kube.resolve_versions(api))

    def _served(self, group: str, kind: str) -> list[str] | None:
        """The versions of ``group`` serving ``kind``; None (a limitation) when discovery is forbidden."""
        try:
            return self.kube.served_versions(group, kind)
        except Forbidden:
            self.out.limitations.append(f"API discovery of {group} forbidden: the versions serving {kind} are unknown")
            return None

    # ------------------------------------------------------------------ webhooks and the operator
    def webhooks(self) -> list[tuple[str, str]]:
        """Webhook configurations whose rules match DGDs; the Services they (and the CRD's conversion
        webhook) call, first the operator's own: where its Deployment is found."""
        services: list[tuple[str, str]] = []
        conversion = (((self.crd or {}).get("spec") or {}).get("conversion") or {})
        svc = ((conversion.get("webhook") or {}).get("clientConfig") or {}).get("service") or {}
        if svc.get("name"):
            services.append((str(svc.get("namespace")), str(svc["name"])))
        found: dict[str, Any] = {"conversion": "/".join(services[0]) if services else None}
        for which, res in WEBHOOK_CONFIGS.items():
            try:
                configs = self.kube.list_items(res)[0]
            except Forbidden:
                found[which] = "forbidden"
                self.out.limitations.append(f"{res.plural} list forbidden: the webhooks judging DGDs are unknown")
                continue
            found[which] = []
            for config in configs:
                for hook in config.get("webhooks") or []:
                    if not _matches_dgd(hook):
                        continue
                    target = (hook.get("clientConfig") or {}).get("service") or {}
                    where = f"{target.get('namespace')}/{target.get('name')}" if target.get("name") else \
                        str((hook.get("clientConfig") or {}).get("url") or "")
                    found[which].append({"config": config["metadata"]["name"], "webhook": hook.get("name"),
                                         "service": where, "failure_policy": hook.get("failurePolicy", "Fail")})
                    if target.get("name") and "dynamo" in f"{config['metadata']['name']} {target['name']}":
                        services.append((str(target.get("namespace")), str(target["name"])))
        self.ev["webhooks"] = found
        return services

    def operator(self, services: list[tuple[str, str]]) -> None:
        """The operator's Deployment, found through the Services its webhooks call, else by its
        chart's labels; ``unknown`` when neither finds it (a platform installed otherwise)."""
        record: dict[str, Any] = {"state": "unknown"}
        self.ev["operator"] = record
        try:
            found = self._operator_by_service(services) or self._operator_by_labels()
        except Forbidden:
            record["state"] = "forbidden"
            self.out.limitations.append("the Dynamo operator's Deployment cannot be read: its health is unknown")
            return
        if found is None:
            return
        deployment, how = found
        meta, spec = deployment["metadata"], deployment.get("spec") or {}
        containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
        manager = next((c for c in containers if c.get("name") == "manager"), containers[0] if containers else {})
        flag = next((str(a).split("=", 1)[1] for a in manager.get("args") or []
                     if str(a).startswith("--operator-version=")), None)
        status = deployment.get("status") or {}
        ready = f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 1)}"
        available = _available(deployment)
        record.update({"state": "available" if available else "unavailable", "found_by": how,
                       "deployment": f"{meta.get('namespace')}/{meta.get('name')}", "ready": ready,
                       "image": manager.get("image"),
                       "version": flag or (meta.get("labels") or {}).get("app.kubernetes.io/version")})
        if not available:
            self.out.block(f"the Dynamo operator Deployment {record['deployment']} is not Available ({ready} ready): "
                           "no DGD would be reconciled",
                           OPERATOR_FIX.format(ns=meta.get("namespace"), name=meta.get("name")))

    def _operator_by_service(self, services: list[tuple[str, str]]) -> tuple[Obj, str] | None:
        for ns, name in dict.fromkeys(services):  # one operator Service often serves every webhook
            svc = self.kube.get_or_none("Service", name, ns)
            selector = ((svc or {}).get("spec") or {}).get("selector") or {}
            if not selector:
                continue
            for deployment in self.kube.list_items("Deployment", ns)[0]:
                labels = (((deployment.get("spec") or {}).get("template") or {}).get("metadata") or {}).get(
                    "labels") or {}
                if all(labels.get(k) == v for k, v in selector.items()):
                    return deployment, f"the webhook Service {ns}/{name}"
        return None

    def _operator_by_labels(self) -> tuple[Obj, str] | None:
        for selector in OPERATOR_SELECTORS:
            items = self.kube.list_items("Deployment", None, label_selector=selector)[0]
            manager = [d for d in items if "controller-manager" in d["metadata"]["name"]] or items
            if manager:
                return manager[0], f"the label {selector}"
        return None

    # ------------------------------------------------------------------ GPU nodes
    def gpu_nodes(self) -> None:
        """GFD labels without allocatable GPUs are a device plugin that advertises nothing: a
        platform fault when no node can offer a GPU the candidate requests."""
        if self.nodes is None:
            return  # the node list is forbidden: advisory_reads recorded the limitation
        labelled, allocatable, unlabelled = [], [], []
        for node in self.nodes:
            labels = (node.get("metadata") or {}).get("labels") or {}
            has_labels = any(k in labels for k in GFD_LABELS) and labels.get("nvidia.com/gpu.present") != "false"
            gpus = int(str(((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE, "0")) or 0)
            name = str(node["metadata"]["name"])
            if gpus > 0:
                allocatable.append(name)
                if not has_labels:
                    unlabelled.append(name)
            elif has_labels:
                labelled.append(name)
        self.ev["gpu_nodes"] = {"with_allocatable_gpus": len(allocatable), "labelled_without_allocatable": labelled,
                                "without_gfd_labels": unlabelled}
        if not labelled or self.dgd.total_gpus() == 0:
            return
        message = (f"GPU node(s) {_names(labelled)} carry GPU Feature Discovery labels but no allocatable "
                   f"{GPU_RESOURCE}: the NVIDIA device plugin is not advertising their GPUs")
        fix = "check the device plugin pods on those nodes (GPU Operator: its nvidia-device-plugin DaemonSet)"
        if allocatable:
            self.out.warnings.append(f"{message}; fix: {fix}")
        else:
            self.out.block(message, fix)

    # ------------------------------------------------------------------ Grove, LWS, KAI
    def orchestrators(self) -> None:
        multinode = {c.name: c.node_count for c in self.dgd.components if c.multinode and c.node_count > 1}
        grove_off = str(self.annotations.get(GROVE_ANNOTATION, "")).lower() == "false"
        wants_grove = str(self.annotations.get(GROVE_ANNOTATION, "")).lower() == "true"
        queue = self.annotations.get(KAI_QUEUE_ANNOTATION)
        need: dict[str, Any] = {"multinode": multinode, "grove": wants_grove, "kai_queue": queue}
        self.ev["needs"] = need
        if not (multinode or wants_grove or queue):
            return
        if self.groups is None:
            self.out.limitations.append("API discovery forbidden: the orchestrators the DGD needs are unverified")
            return
        grove = GROVE_GROUP in self.groups and not grove_off
        lws = LWS_GROUP in self.groups and VOLCANO_GROUP in self.groups
        if wants_grove and GROVE_GROUP not in self.groups:
            self.out.block(f"the DGD asks for Grove ({GROVE_ANNOTATION}: true) but the API group {GROVE_GROUP} is "
                           f"not served on {self.kube.context}", "install Grove (the Dynamo platform chart's grove "
                           f"option) or remove the {GROVE_ANNOTATION} annotation")
        if multinode:
            need["orchestrator"] = "grove" if grove else "lws" if lws else None
        if multinode and not (grove or lws):
            counts = ", ".join(f"{name} nodeCount {n}" for name, n in multinode.items())
            self.out.block(f"multinode components ({counts}) need Grove ({GROVE_GROUP}) or LWS "
                           f"({LWS_GROUP} with {VOLCANO_GROUP}), and {self.kube.context} serves neither: the operator "
                           "would fail the DGD with 'no multinode orchestrator available'",
                           "install Grove, or LeaderWorkerSet and Volcano, on the cluster; or run the candidate "
                           "on one node per replica")
        if GROVE_GROUP in self.groups and (wants_grove or need.get("orchestrator") == "grove"):
            self._grove_health()
        if queue:
            self._kai_queue(str(queue))

    def _grove_health(self) -> None:
        """Grove's operator Deployment (its chart's label) Available when the DGD goes the Grove way;
        ``unknown`` when not found (installed otherwise)."""
        try:
            items = self.kube.list_items("Deployment", None, label_selector=GROVE_SELECTOR)[0]
        except Forbidden:
            self.ev["needs"]["grove_operator"] = "forbidden"
            self.out.limitations.append("Grove's operator Deployment cannot be read: its health is unknown")
            return
        if not items:
            self.ev["needs"]["grove_operator"] = "unknown"
            return
        meta = items[0]["metadata"]
        where = f"{meta.get('namespace')}/{meta.get('name')}"
        available = _available(items[0])
        self.ev["needs"]["grove_operator"] = f"{where} {'available' if available else 'unavailable'}"
        if not available:
            self.out.block(f"Grove's operator Deployment {where} is not Available: the DGD's pods would never be "
                           "created", OPERATOR_FIX.format(ns=meta.get("namespace"), name=meta.get("name")))

    def _kai_queue(self, queue: str) -> None:
        served = self._served(KAI_GROUP, "Queue")
        if served is None:
            return
        if not served:
            self.out.block(f"the DGD names the KAI queue {queue!r} ({KAI_QUEUE_ANNOTATION}) but the KAI scheduler's "
                           f"API ({KAI_GROUP}) is not served on {self.kube.context}",
                           "install the KAI scheduler, or remove the annotation")
            return
        try:
            found = self.kube.get_or_none(Resource(KAI_GROUP, served[0], "queues", False, "Queue"), queue)
        except Forbidden:
            self.out.limitations.append(f"KAI queue {queue}: read forbidden")
            return
        self.ev["needs"]["kai_queue_exists"] = found is not None
        if found is None:
            self.out.block(f"the KAI queue {queue!r} named by {KAI_QUEUE_ANNOTATION} does not exist: the operator "
                           "would fail the DGD with 'kai-scheduler queue validation failed'",
                           f"create the queue {queue!r} or name an existing one in the annotation")


def _matches_dgd(hook: Mapping[str, Any]) -> bool:
    """A webhook whose rules cover DGDs (the operator's, or a cluster-wide policy engine's)."""
    return any(({DGD_GROUP, "*"} & set(rule.get("apiGroups") or []))
               and ({DGD_PLURAL, "*"} & set(rule.get("resources") or []))
               for rule in hook.get("rules") or [])


def check_platform(kube: Kube, dgd: Dgd, dgd_doc: Obj, crd: Obj | None, nodes: list[Obj] | None) -> Verdicts:
    """Every platform check of step 2 (read-only); resolves the run's DGD API version as a side effect
    on ``kube`` (:meth:`deploy_suite.access.kube.Kube.resolve_versions`)."""
    return PlatformCheck(kube, dgd, dgd_doc, crd, nodes).run()
