"""The one Kubernetes access layer.

Every request the suite makes goes through :class:`Kube`, which is

* pinned to one kubeconfig context, named explicitly (the workload's ``kube_context``); the
  ambient ``current-context`` is never read, so a decoy current-context sees no connection;
* recorded: each read, dry-run, mutation and watch is reported to ``on_command`` as the
  kubectl command line a person could run to repeat it (always carrying ``--context``);
* translated: client and transport exceptions become the suite's error tree
  (:mod:`deploy_suite.errors`) with the cause chained and bodies bounded;
* raw: objects are plain JSON dicts (camelCase, exactly what ``kubectl get -o json`` shows),
  which the pure library modules (capacity, triage, dgd) consume without knowing the client.

It is also home to the single wait primitive, :meth:`Kube.wait_for`: list, then watch from the
list's resourceVersion, re-evaluating a predicate on every event under a deadline. Watches are
resumed after a dropped connection (an apiserver restart) and relisted after ``410 Gone``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import urllib3
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from deploy_suite import clock
from deploy_suite.errors import (
    Conflict,
    Forbidden,
    InputError,
    Invalid,
    KubeError,
    NotFound,
    Unavailable,
    WaitTimeout,
    cut,
)

Obj = dict[str, Any]
FIELD_MANAGER = "deploy-suite"
# Metadata-only answers: the server strips data/stringData, so Secret values never leave it.
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"


@dataclass(frozen=True)
class CommandRecord:
    """One request, as the kubectl command line that repeats it."""

    command: str
    kind: str  # read | mutate | dry-run | watch
    at: str
    outcome: str  # "ok" or a short error


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the REST API."""

    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def kubectl_name(self) -> str:
        """The name kubectl accepts unambiguously (plural.group for non-core kinds)."""
        return f"{self.plural}.{self.group}" if self.group and self.group not in {"apps", "batch"} else self.plural

    def path(self, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace)}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name)}"
        if sub:
            base += f"/{sub}"
        return base


# Kinds the suite touches, so that the common path needs no discovery round trip.
KNOWN: dict[str, Resource] = {
    r.kind: r
    for r in (
        Resource("", "v1", "namespaces", False, "Namespace"),
        Resource("", "v1", "nodes", False, "Node"),
        Resource("", "v1", "pods", True, "Pod"),
        Resource("", "v1", "services", True, "Service"),
        Resource("", "v1", "secrets", True, "Secret"),
        Resource("", "v1", "configmaps", True, "ConfigMap"),
        Resource("", "v1", "events", True, "Event"),
        Resource("", "v1", "persistentvolumeclaims", True, "PersistentVolumeClaim"),
        Resource("", "v1", "persistentvolumes", False, "PersistentVolume"),
        Resource("", "v1", "serviceaccounts", True, "ServiceAccount"),
        Resource("", "v1", "resourcequotas", True, "ResourceQuota"),
        Resource("apps", "v1", "deployments", True, "Deployment"),
        Resource("apps", "v1", "replicasets", True, "ReplicaSet"),
        Resource("batch", "v1", "jobs", True, "Job"),
        Resource("storage.k8s.io", "v1", "storageclasses", False, "StorageClass"),
        Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", False, "CustomResourceDefinition"),
        Resource("rbac.authorization.k8s.io", "v1", "roles", True, "Role"),
        Resource("rbac.authorization.k8s.io", "v1", "rolebindings", True, "RoleBinding"),
        Resource("rbac.authorization.k8s.io", "v1", "clusterroles", False, "ClusterRole"),
        Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", False, "ClusterRoleBinding"),
        Resource("nvidia.com", "v1alpha1", "dynamographdeployments", True, "DynamoGraphDeployment"),
        Resource("nvidia.com", "v1alpha1", "dynamocomponentdeployments", True, "DynamoComponentDeployment"),
    )
}
DGD = KNOWN["DynamoGraphDeployment"]


def _outcome(exc: BaseException) -> str:
    if isinstance(exc, KubeError):
        return f"error {exc.status} {exc.reason}".strip()
    return f"error {type(exc).__name__}"


def translate(exc: BaseException, what: str) -> KubeError:
    """Map a client or transport exception to the suite's error tree (the only place that does)."""
    if isinstance(exc, ApiException):
        body = exc.body.decode() if isinstance(exc.body, bytes) else str(exc.body or "")
        message = exc.reason or ""
        reason = ""
        try:
            status_obj = json.loads(body)
            message = status_obj.get("message", message)
            reason = status_obj.get("reason", "")
        except (ValueError, AttributeError):
            pass
        status = int(exc.status or 0)
        text = f"{what}: {message}"
        by_status: dict[int, type[KubeError]] = {404: NotFound, 403: Forbidden, 409: Conflict, 422: Invalid,
                                                 400: Invalid}
        cls = by_status.get(status, Unavailable if status == 0 or status >= 500 else KubeError)
        return cls(text, status=status, reason=reason or (exc.reason or ""), body=body)
    if isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError | OSError):
        return Unavailable(f"{what}: {type(exc).__name__}: {cut(str(exc), 300)}")
    return KubeError(f"{what}: {type(exc).__name__}: {cut(str(exc), 300)}")


@dataclass(frozen=True)
class WatchSpec:
    """One collection watched by :meth:`Kube.wait_multi`."""

    kind: str | Resource
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None


@dataclass
class WaitState:
    """What a wait has seen so far: the watched objects by name and the predicate's last words."""

    objects: dict[str, Obj] = field(default_factory=dict)
    description: str = "nothing observed yet"


# A predicate looks at the watched objects and says (done, one-line description of the state).
# It may raise (StepFailure) to stop waiting at once (a failed Job, an unschedulable pod).
Predicate = Callable[[dict[str, Obj]], tuple[bool, str]]


class Kube:
    """A client pinned to one context. Construction only reads the kubeconfig file."""

    def __init__(
        self,
        context: str,
        kubeconfig: str | os.PathLike[str] | None = None,
        on_command: Callable[[CommandRecord], None] | None = None,
        request_timeout: float = 30.0,
        user_agent: str = "deploy-suite",
    ) -> None:
        if not context:
            raise InputError("kube_context", "empty context name", "name a context from your kubeconfig")
        self.context = context
        self.kubeconfig = str(kubeconfig) if kubeconfig else None
        self.on_command = on_command
        self.request_timeout = request_timeout
        self._discovered: dict[tuple[str, str], Resource] = {}
        config_file = self.kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
        self._config_file = config_file
        try:
            # Explicit context: the kubeconfig's current-context is never consulted.
            self.api: k8s_client.ApiClient = k8s_config.new_client_from_config(
                config_file=config_file, context=context, persist_config=False
            )
        except ConfigException as exc:
            raise InputError(
                "kube_context",
                f"context {context!r} cannot be loaded from kubeconfig {config_file}: {cut(str(exc), 200)}",
                "pass --kubeconfig with a file that defines this context, or fix kubernetes.kube_context",
            ) from exc
        except OSError as exc:
            raise InputError("kubeconfig", f"cannot read {config_file}: {exc.strerror}",
                              "pass --kubeconfig PATH to a readable kubeconfig") from exc
        self.server = str(self.api.configuration.host)
        # The audit log records the user agent: tests use it to tell the harness's requests apart.
        self.api.user_agent = user_agent

    # ------------------------------------------------------------------ recording
    def kubectl(self, *args: str) -> str:
        """The kubectl command line equivalent to a request, always pinned with --context."""
        head = ["kubectl", "--context", self.context]
        if self.kubeconfig:
            head += ["--kubeconfig", self.kubeconfig]
        return shlex.join([*head, *args])

    def _record(self, kind: str, args: list[str], outcome: str) -> None:
        if self.on_command is not None:
            self.on_command(CommandRecord(self.kubectl(*args), kind, clock.iso_now(), outcome))

    # ------------------------------------------------------------------ raw REST
    def _request(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        accept: str = "application/json",
        stream: bool = False,
        timeout: float | None = None,
    ) -> Any:
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        # The generated client (kubernetes>=35) serialises auth and the URL; we keep the raw
        # urllib3 response so objects stay plain JSON and watches can stream.
        method_, url, header_params, body_, post = self.api.param_serialize(
            method, path, query_params=params, header_params=headers, body=body, auth_settings=["BearerToken"])
        resp = self.api.call_api(method_, url, header_params=header_params, body=body_, post_params=post,
                                 _request_timeout=timeout if timeout is not None else self.request_timeout)
        if not 200 <= resp.status <= 299:
            raise ApiException(status=resp.status, reason=resp.reason, body=resp.read().decode("utf-8", "replace"))
        if stream:
            return resp.response
        try:
            data = resp.read()
        except BaseException:
            resp.response.close()  # broken mid-read (apiserver restart): never back to the pool
            raise
        return json.loads(data) if data else {}

    def _call(self, kind: str, args: list[str], what: str, fn: Callable[[], Any]) -> Any:
        try:
            result = fn()
        except Exception as exc:  # translated right here, nowhere else
            err = translate(exc, what)
            self._record(kind, args, _outcome(err))
            raise err from exc
        self._record(kind, args, "ok")
        return result

    # ------------------------------------------------------------------ discovery
    def resource(self, api_version: str, kind: str) -> Resource:
        """Where ``kind`` lives; the static table first, then one discovery request."""
        known = KNOWN.get(kind)
        if known is not None and (known.api_version == api_version or not api_version):
            return known
        if known is not None and kind == "DynamoGraphDeployment":
            return Resource("nvidia.com", api_version.rsplit("/", maxsplit=1)[-1], known.plural, True, kind)
        key = (api_version, kind)
        if key in self._discovered:
            return self._discovered[key]
        group, _, version = api_version.rpartition("/")
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        args = ["api-resources", f"--api-group={group}"]
        doc = self._call("read", args, f"discover {api_version}", lambda: self._request("GET", path))
        for item in doc.get("resources", []):
            if item.get("kind") == kind and "/" not in item.get("name", ""):
                res = Resource(group, version, item["name"], bool(item.get("namespaced")), kind)
                self._discovered[key] = res
                return res
        raise NotFound(f"the server does not serve kind {kind} in {api_version}", status=404)

    def _res(self, kind: str | Resource) -> Resource:
        return kind if isinstance(kind, Resource) else KNOWN[kind]

    # ------------------------------------------------------------------ reads
    def get(self, kind: str | Resource, name: str, namespace: str | None = None, metadata_only: bool = False) -> Obj:
        res = self._res(kind)
        args = ["get", res.kubectl_name, name, *(["-n", namespace] if res.namespaced and namespace else []),
                "-o", "json" if not metadata_only else "jsonpath={.metadata}"]
        accept = METADATA_ONLY if metadata_only else "application/json"
        obj: Obj = self._call("read", args, f"get {res.plural}/{name}",
                              lambda: self._request("GET", res.path(namespace, name), accept=accept))
        return obj

    def get_or_none(self, kind: str | Resource, name: str, namespace: str | None = None,
                    metadata_only: bool = False) -> Obj | None:
        try:
            return self.get(kind, name, namespace, metadata_only=metadata_only)
        except NotFound:
            return None

    def secret_exists(self, name: str, namespace: str) -> bool:
        """Secrets are checked by name only: a metadata-only GET, so no value leaves the server."""
        return self.get_or_none("Secret", name, namespace, metadata_only=True) is not None

    def list_items(
        self,
        kind: str | Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        slim: Callable[[Obj], Obj] | None = None,
        metadata_only: bool = False,
    ) -> tuple[list[Obj], str]:
        """All items (paged, so huge clusters stay in bounded memory) and the list resourceVersion.

        ``slim`` may shrink each item as pages arrive (the capacity engine keeps a few fields of
        20,000 pods rather than whole objects).
        """
        res = self._res(kind)
        args = ["get", res.kubectl_name]
        args += (["-n", namespace] if namespace else ["-A"]) if res.namespaced else []
        if label_selector:
            args += ["-l", label_selector]
        if field_selector:
            args += ["--field-selector", field_selector]
        args += ["-o", "json"]
        accept = METADATA_ONLY.replace("PartialObjectMetadata", "PartialObjectMetadataList") \
            if metadata_only else "application/json"

        def fetch() -> tuple[list[Obj], str]:
            items: list[Obj] = []
            token: str | None = None
            version = ""
            while True:
                page = self._request("GET", res.path(namespace), accept=accept, query={
                    "labelSelector": label_selector, "fieldSelector": field_selector,
                    "limit": page_size, "continue": token})
                got = page.get("items") or []
                items.extend(slim(i) for i in got) if slim else items.extend(got)
                meta = page.get("metadata") or {}
                version = meta.get("resourceVersion", version)
                token = meta.get("continue")
                if not token:
                    return items, version

        result: tuple[list[Obj], str] = self._call("read", args, f"list {res.plural}", fetch)
        return result

    def events_for(self, name: str, namespace: str, kind: str = "Pod") -> list[Obj]:
        items, _ = self.list_items("Event", namespace,
                             field_selector=f"involvedObject.name={name},involvedObject.kind={kind}")
        return sorted(items, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")

    def pod_log(self, name: str, namespace: str, container: str | None = None, tail: int = 50,
                previous: bool = False) -> str:
        res = KNOWN["Pod"]
        args = ["logs", name, "-n", namespace, f"--tail={tail}"]
        if container:
            args += ["-c", container]
        if previous:
            args.append("--previous")

        def fetch() -> str:
            resp = self._request("GET", res.path(namespace, name, "log"), accept="*/*", stream=True, query={
                "container": container, "tailLines": tail, "previous": "true" if previous else None})
            try:
                return bytes(resp.read()).decode("utf-8", errors="replace")
            finally:
                resp.release_conn()

        text: str = self._call("read", args, f"logs {name}", fetch)
        return text

    def can_i(self, verb: str, resource: str, namespace: str | None = None, group: str = "") -> bool:
        """SelfSubjectAccessReview: lets a step say 'forbidden' before trying."""
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {"verb": verb, "resource": resource, "group": group,
                                                **({"namespace": namespace} if namespace else {})}}}
        args = ["auth", "can-i", verb, f"{resource}.{group}" if group else resource,
                *(["-n", namespace] if namespace else [])]
        out = self._call("read", args, "auth can-i", lambda: self._request(
            "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=body))
        return bool(out.get("status", {}).get("allowed"))

    # ------------------------------------------------------------------ mutations
    def apply(self, doc: Obj, namespace: str | None = None, dry_run: bool = False,
              source: str | None = None) -> Obj:
        """Server-side apply of one object (``kubectl apply --server-side``), or its server dry-run."""
        api_version = str(doc.get("apiVersion", ""))
        kind = str(doc.get("kind", ""))
        name = str((doc.get("metadata") or {}).get("name", ""))
        if not (api_version and kind and name):
            raise InputError(source or "manifest", "a document lacks apiVersion, kind or metadata.name",
                             "give every document apiVersion, kind and metadata.name")
        res = self.resource(api_version, kind)
        ns = (doc.get("metadata") or {}).get("namespace") or namespace if res.namespaced else None
        body = json.loads(json.dumps(doc))
        if res.namespaced and ns:
            body.setdefault("metadata", {})["namespace"] = ns
        args = ["apply", "--server-side", f"--field-manager={FIELD_MANAGER}", "--force-conflicts"]
        if dry_run:
            args.append("--dry-run=server")
        if ns:
            args += ["-n", ns]
        args += ["-f", source] if source else [f"{res.kubectl_name}/{name}"]
        query = {"fieldManager": FIELD_MANAGER, "force": "true", "dryRun": "All" if dry_run else None}
        out: Obj = self._call("dry-run" if dry_run else "mutate", args, f"apply {kind}/{name}", lambda: self._request(
            "PATCH", res.path(ns, name), query=query, body=body, content_type="application/apply-patch+yaml"))
        return out

    def apply_file(self, path: Path, namespace: str | None, dry_run: bool = False,
                   display: str | None = None) -> list[Obj]:
        """Apply every document of a (multi-document) file, in file order."""
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        return [self.apply(d, namespace, dry_run=dry_run, source=display or str(path)) for d in docs]

    def patch_status(self, kind: str | Resource, name: str, namespace: str | None, status: Obj) -> Obj:
        res = self._res(kind)
        args = ["patch", res.kubectl_name, name, *(["-n", namespace] if namespace else []),
                "--subresource=status", "--type=merge", "-p", json.dumps({"status": status})]
        out: Obj = self._call("mutate", args, f"patch {res.plural}/{name}/status", lambda: self._request(
            "PATCH", res.path(namespace, name, "status"), body={"status": status},
            content_type="application/merge-patch+json"))
        return out

    def create(self, doc: Obj, namespace: str | None = None) -> Obj:
        res = self.resource(str(doc.get("apiVersion", "")), str(doc.get("kind", "")))
        ns = (doc.get("metadata") or {}).get("namespace") or namespace if res.namespaced else None
        name = (doc.get("metadata") or {}).get("name") or (doc.get("metadata") or {}).get("generateName", "")
        args = ["create", "-n", ns, "-f", f"{res.kubectl_name}/{name}"] if ns else \
            ["create", "-f", f"{res.kubectl_name}/{name}"]
        out: Obj = self._call("mutate", args, f"create {res.plural}/{name}",
                              lambda: self._request("POST", res.path(ns), body=doc))
        return out

    def delete(self, kind: str | Resource, name: str, namespace: str | None = None,
               propagation: str = "Background", missing_ok: bool = True) -> bool:
        """Delete one object by exact name; True if a deletion was issued."""
        res = self._res(kind)
        args = ["delete", res.kubectl_name, name, *(["-n", namespace] if namespace else []), "--wait=false",
                f"--cascade={'background' if propagation == 'Background' else 'foreground'}"]
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        try:
            self._call("mutate", args, f"delete {res.plural}/{name}",
                       lambda: self._request("DELETE", res.path(namespace, name), body=body))
        except NotFound:
            if missing_ok:
                return False
            raise
        return True

    # ------------------------------------------------------------------ the wait primitive
    def wait_for(
        self,
        kind: str | Resource,
        predicate: Predicate,
        *,
        awaited: str,
        timeout: float,
        namespace: str | None = None,
        name: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        on_progress: Callable[[str], None] | None = None,
        watch_chunk: float = 60.0,
    ) -> WaitState:
        """Watch ``kind`` (one object by name, or a selection) until ``predicate`` says done.

        React to events as they come: no polling interval. A deadline bounds the whole wait; on
        expiry :class:`WaitTimeout` says what was awaited, for how long and the last state seen.
        Dropped connections are retried with a short capped backoff and the watch resumes from
        the last resourceVersion; ``410 Gone`` relists.
        """
        res = self._res(kind)
        if name:
            field_selector = ",".join(filter(None, [f"metadata.name={name}", field_selector]))
        started = clock.monotonic()
        deadline = started + timeout
        state = WaitState()
        args = ["get", res.kubectl_name, *([name] if name else []),
                *((["-n", namespace] if namespace else ["-A"]) if res.namespaced else []),
                *(["-l", label_selector] if label_selector else []),
                *(["--field-selector", field_selector] if field_selector and not name else []), "--watch"]
        self._record("watch", args, "started")
        backoff = 0.05
        version: str | None = None

        def evaluate() -> bool:
            done, desc = predicate(state.objects)
            if desc != state.description and on_progress is not None:
                on_progress(desc)
            state.description = desc
            return done

        while True:
            remaining = deadline - clock.monotonic()
            if remaining <= 0:
                raise WaitTimeout(awaited, clock.monotonic() - started, state.description)
            try:
                if version is None:
                    items, version = self._list_quiet(res, namespace, label_selector, field_selector)
                    state.objects = {_key(i): i for i in items}
                    if evaluate():
                        return state
                for event in self._watch_stream(res, namespace, label_selector, field_selector, version,
                                                min(remaining, watch_chunk)):
                    etype = event.get("type")
                    obj = event.get("object") or {}
                    if etype == "ERROR":
                        if obj.get("code") == 410:
                            version = None  # too old: relist
                            break
                        code = int(obj.get("code", 0))
                        raise KubeError(f"watch error: {obj.get('message', '')}", status=code)
                    version = (obj.get("metadata") or {}).get("resourceVersion", version)
                    if etype == "BOOKMARK":
                        continue
                    if etype == "DELETED":
                        state.objects.pop(_key(obj), None)
                    else:
                        state.objects[_key(obj)] = obj
                    if evaluate():
                        return state
                    if clock.monotonic() >= deadline:
                        break
                backoff = 0.05
            except ApiException as exc:
                if exc.status == 410:
                    version = None
                    continue
                err = translate(exc, f"watch {res.plural}")
                if not isinstance(err, Unavailable):
                    raise err from exc
                backoff = self._pause(backoff, deadline)
            except (Unavailable, urllib3.exceptions.HTTPError, ConnectionError, OSError):
                # apiserver restarting or connection dropped: resume from the last version seen.
                backoff = self._pause(backoff, deadline)

    def watch_events(self, kind: str | Resource, stop: threading.Event, namespace: str | None = None,
                     label_selector: str | None = None, chunk: float = 30.0,
                     field_selector: str | None = None) -> Iterator[tuple[str, Obj]]:
        """Endless list+watch for controllers: yields (type, object); after a relist every object
        comes again as ADDED, so handlers must be level-based. Ends when ``stop`` is set."""
        res = self._res(kind)
        version: str | None = None
        backoff = 0.05
        while not stop.is_set():
            try:
                if version is None:
                    items, version = self._list_quiet(res, namespace, label_selector, field_selector)
                    for item in items:
                        yield "ADDED", item
                for event in self._watch_stream(res, namespace, label_selector, field_selector, version, chunk):
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        version = None
                        break
                    version = (obj.get("metadata") or {}).get("resourceVersion", version)
                    if event.get("type") != "BOOKMARK":
                        yield str(event.get("type")), obj
                    if stop.is_set():
                        return
                backoff = 0.05
            except ApiException as exc:
                if exc.status == 410:
                    version = None
                    continue
                backoff = self._pause(backoff, clock.monotonic() + 1.0)
            except (urllib3.exceptions.HTTPError, ConnectionError, OSError):
                backoff = self._pause(backoff, clock.monotonic() + 1.0)

    def wait_multi(
        self,
        watches: Mapping[str, WatchSpec],
        predicate: Callable[[dict[str, dict[str, Obj]]], tuple[bool, str]],
        *,
        awaited: str,
        timeout: float,
        on_progress: Callable[[str], None] | None = None,
    ) -> dict[str, dict[str, Obj]]:
        """Like :meth:`wait_for`, over several watched collections at once (e.g. a DGD and its
        pods): one thread per watch feeds a queue; the predicate sees every collection by label
        and runs on each event. The predicate may raise to stop at once."""
        started = clock.monotonic()
        deadline = started + timeout
        stop = threading.Event()
        events: queue.Queue[tuple[str, str, Obj] | tuple[str, str, BaseException]] = queue.Queue()
        state: dict[str, dict[str, Obj]] = {label: {} for label in watches}
        description = "nothing observed yet"

        def pump(label: str, spec: WatchSpec) -> None:
            try:
                for etype, obj in self.watch_events(spec.kind, stop, spec.namespace, spec.label_selector,
                                                    field_selector=spec.field_selector):
                    events.put((label, etype, obj))
            except BaseException as exc:  # surfaced in the waiting thread
                events.put((label, "__error__", exc))

        for label, spec in watches.items():
            self._record("watch", ["get", self._res(spec.kind).kubectl_name,
                                   *(["-n", spec.namespace] if spec.namespace else []),
                                   *(["-l", spec.label_selector] if spec.label_selector else []),
                                   *(["--field-selector", spec.field_selector] if spec.field_selector else []),
                                   "--watch"], "started")
            threading.Thread(target=pump, args=(label, spec), daemon=True, name=f"watch-{label}").start()
        try:
            while True:
                remaining = deadline - clock.monotonic()
                if remaining <= 0:
                    raise WaitTimeout(awaited, clock.monotonic() - started, description)
                try:
                    label, etype, obj = events.get(timeout=remaining)
                except queue.Empty:
                    continue
                if etype == "__error__":
                    assert isinstance(obj, BaseException)
                    raise obj
                assert isinstance(obj, dict)
                if etype == "DELETED":
                    state[label].pop(_key(obj), None)
                else:
                    state[label][_key(obj)] = obj
                if not events.empty():
                    continue  # drain a burst (initial lists) before judging
                done, desc = predicate(state)
                if desc != description and on_progress is not None:
                    on_progress(desc)
                description = desc
                if done:
                    return state
        finally:
            stop.set()

    def _pause(self, backoff: float, deadline: float) -> float:
        # Only reached when the apiserver is unreachable: a short capped backoff, never past the deadline.
        threading.Event().wait(max(0.0, min(backoff, deadline - clock.monotonic())))
        return min(backoff * 2, 1.0)

    def _list_quiet(self, res: Resource, namespace: str | None, label_selector: str | None,
                    field_selector: str | None) -> tuple[list[Obj], str]:
        page = self._request("GET", res.path(namespace), query={
            "labelSelector": label_selector, "fieldSelector": field_selector})
        return page.get("items") or [], (page.get("metadata") or {}).get("resourceVersion", "")

    def _watch_stream(self, res: Resource, namespace: str | None, label_selector: str | None,
                      field_selector: str | None, version: str, seconds: float) -> Iterator[Obj]:
        query = {"watch": "true", "resourceVersion": version, "allowWatchBookmarks": "true",
                 "timeoutSeconds": max(1, int(seconds)), "labelSelector": label_selector,
                 "fieldSelector": field_selector}
        resp = self._request("GET", res.path(namespace), query=query, stream=True, timeout=seconds + 10)
        finished = False
        try:
            buf = b""
            for chunk in resp.stream(amt=None, decode_content=False):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
            finished = True
        finally:
            if finished:
                resp.release_conn()
            else:
                # Abandoned (the predicate was satisfied) or broken (apiserver restart): the
                # connection still carries a watch, never reusable; close its socket now rather
                # than leave it to the garbage collector (a ResourceWarning in a later step).
                resp.close()

    # ------------------------------------------------------------------ port-forward
    def port_forward(self, target: str, namespace: str, remote_port: int, local_port: int = 0,
                     kubectl: str = "kubectl") -> PortForward:
        """Start ``kubectl port-forward`` (owned: always stop it) on 127.0.0.1 only."""
        args = ["port-forward", target, f"{local_port or ''}:{remote_port}", "-n", namespace,
                "--address", "127.0.0.1"]
        argv = [kubectl, "--context", self.context, *(["--kubeconfig", self.kubeconfig] if self.kubeconfig
                                                        else []), *args]
        self._record("read", args, "started")
        return PortForward(argv)

    def close(self) -> None:
        self.api.close()


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _parent_death_signal() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when the harness dies (Linux only).

    ``stop()`` always ends the port-forward, but a harness killed with SIGKILL (OOM killer, CI
    timeout, a person) runs no cleanup: kubectl, in its own session, would live on forever holding
    a local port and a stream through the apiserver. The kernel's parent-death signal ends it. The
    function only calls prctl (libc is loaded here, in the parent, not in the forked child).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the harness died before prctl took effect
            os._exit(1)

    return preexec


class PortForward:
    """A ``kubectl port-forward`` child process; learns its local port from kubectl's first line.

    The child is tied to the life of the thread that starts it (the kernel's parent-death signal
    follows the creating thread): start it from the thread that owns the smoke test.
    """

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True, preexec_fn=_parent_death_signal())  # noqa: PLW1509
        self.local_port: int | None = None
        self.output: list[str] = []
        self._reader: threading.Thread | None = None

    def wait_ready(self, timeout: float) -> int:
        """Read kubectl's output until it prints 'Forwarding from 127.0.0.1:<port>'."""
        done = threading.Event()

        def reader() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line.rstrip())
                if self.local_port is None and "Forwarding from 127.0.0.1:" in line:
                    self.local_port = int(line.split("127.0.0.1:")[1].split()[0])
                    done.set()
            done.set()

        self._reader = threading.Thread(target=reader, daemon=True)
        self._reader.start()
        done.wait(timeout)
        if self.local_port is None:
            self.stop()
            raise WaitTimeout("kubectl port-forward to listen", timeout,
                              " | ".join(self.output[-3:]) or "no output")
        return self.local_port

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        if self._reader is not None:
            self._reader.join(5)  # EOF after the process exits
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> PortForward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
