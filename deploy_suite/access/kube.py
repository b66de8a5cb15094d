"""The one Kubernetes access layer.

Every request the suite makes goes through :class:`Kube`, which is

* pinned to one kubeconfig context, named explicitly (the workload's ``kube_context``); the
  ambient ``current-context`` is never read, so a decoy current-context sees no connection;
* recorded: each read, dry-run, mutation and watch is reported to ``on_command`` as the
  kubectl command line a person could run to repeat it (always carrying ``--context``);
* translated: client and transport exceptions become the suite's error tree
  (:mod:`deploy_suite.errors`) with the cause chained and bodies bounded (:func:`translate`);
* raw: objects are plain JSON dicts (camelCase, exactly what ``kubectl get -o json`` shows),
  which the pure library modules (capacity, triage, dgd) consume without knowing the client.

HTTP goes through a :class:`Transport`: :class:`ClientTransport` (the generated client, built
from the kubeconfig) in a run, an in-memory fake in the unit tests (``tests/fakekube.py``).
Waits are :mod:`deploy_suite.access.watch`'s one list+watch loop, which this class feeds
(:meth:`Kube.wait`, :meth:`Kube.wait_for`, :meth:`Kube.watch_events`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import threading
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from deploy_suite import clock, yamlio
from deploy_suite.access import tls, watch
from deploy_suite.access.portforward import PortForward as PortForward
from deploy_suite.access.resources import DGD as DGD
from deploy_suite.access.resources import KNOWN as KNOWN
from deploy_suite.access.resources import VERSIONED_KINDS, pick_version, resolve
from deploy_suite.access.resources import Obj as Obj
from deploy_suite.access.resources import Resource as Resource
from deploy_suite.access.watch import Condition, Judge, WaitState, Watch
from deploy_suite.constants import WEBHOOK_UNREACHABLE
from deploy_suite.errors import (
    Conflict,
    Forbidden,
    InputError,
    Invalid,
    KubeError,
    NotFound,
    PlatformFault,
    Unavailable,
    cut,
)

# The default server-side-apply field manager (tools, the offline cluster); a run applies with its
# experiment's manager instead (deploy_suite.judges.ownership.field_manager), read back to tell its DGDs.
FIELD_MANAGER = "deploy-suite"
JSON = "application/json"
# Metadata-only answers: the server strips data/stringData, so Secret values never leave it.
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
# A watch request outlives its own timeoutSeconds by this much before the client gives up on it.
WATCH_READ_GRACE_S = 10.0


@dataclass(frozen=True)
class CommandRecord:
    """One request, as the kubectl command line that repeats it."""

    command: str
    kind: str  # read | mutate | dry-run | watch
    at: str
    outcome: str  # "ok" or a short error


_BY_STATUS: dict[int, type[KubeError]] = {404: NotFound, 403: Forbidden, 409: Conflict, 422: Invalid, 400: Invalid}


# The API server's words when a webhook behind it cannot be called (docs/operator-generations.md).
_PLATFORM = re.compile(WEBHOOK_UNREACHABLE, re.I)


def status_error(status: int, what: str, message: str, reason: str = "", body: str = "") -> KubeError:
    """The error of an HTTP status (an answer, or a watch's ERROR event): 5xx and 0 are temporary;
    an unreachable webhook of the platform is a :class:`PlatformFault`."""
    if _PLATFORM.search(message):
        return PlatformFault(f"{what}: {message}", status=status, reason=reason, body=body)
    cls = _BY_STATUS.get(status, Unavailable if status == 0 or status >= 500 else KubeError)
    return cls(f"{what}: {message}", status=status, reason=reason, body=body)


def translate(exc: BaseException, what: str) -> KubeError:
    """Map a client or transport exception to the suite's error tree (the only place that does)."""
    if isinstance(exc, KubeError):
        return exc
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
        return status_error(int(exc.status or 0), what, message, reason or (exc.reason or ""), body)
    if isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError | OSError):
        return Unavailable(f"{what}: {type(exc).__name__}: {cut(str(exc), 300)}")
    return KubeError(f"{what}: {type(exc).__name__}: {cut(str(exc), 300)}")


class Transport(Protocol):
    """HTTP to one apiserver. A non-2xx answer raises ``ApiException``; a broken connection raises
    what urllib3 or the OS raise: :func:`translate` maps both, so fakes raise the same."""

    server: str

    def request(self, method: str, path: str, query: Mapping[str, Any], body: Any = None,
                content_type: str = JSON, accept: str = JSON, timeout: float | None = None) -> bytes:
        """The whole answer body."""
        ...

    def lines(self, path: str, query: Mapping[str, Any], timeout: float) -> Generator[bytes, None, None]:
        """A streamed GET (a watch), one line at a time; closing the generator closes the connection."""
        ...

    def close(self) -> None: ...


class ClientTransport:
    """The generated Kubernetes client (kubernetes>=35): it serialises auth and the URL; we keep
    the raw urllib3 response so objects stay plain JSON and watches can stream."""

    def __init__(self, api: k8s_client.ApiClient, request_timeout: float) -> None:
        self.api = api
        # A connection reset before its TLS handshake (an apiserver restarting) is closed at once.
        tls.close_failed_handshakes(api.rest_client.pool_manager)
        self.request_timeout = request_timeout
        self.server = str(api.configuration.host)

    @classmethod
    def from_kubeconfig(cls, config_file: str, context: str, user_agent: str,
                        request_timeout: float) -> ClientTransport:
        try:
            # Explicit context: the kubeconfig's current-context is never consulted.
            api = k8s_config.new_client_from_config(config_file=config_file, context=context, persist_config=False)
        except ConfigException as exc:
            raise InputError(
                "kube_context",
                f"context {context!r} cannot be loaded from kubeconfig {config_file}: {cut(str(exc), 200)}",
                "pass --kubeconfig with a file that defines this context, or fix kubernetes.kube_context",
            ) from exc
        except OSError as exc:
            raise InputError("kubeconfig", f"cannot read {config_file}: {exc.strerror}",
                             "pass --kubeconfig PATH to a readable kubeconfig") from exc
        # The audit log records the user agent: tests use it to tell the harness's requests apart.
        api.user_agent = user_agent
        return cls(api, request_timeout)

    def _open(self, method: str, path: str, query: Mapping[str, Any], body: Any, content_type: str, accept: str,
              timeout: float | None) -> Any:
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        method_, url, header_params, body_, post = self.api.param_serialize(
            method, path, query_params=list(query.items()), header_params=headers, body=body,
            auth_settings=["BearerToken"])
        resp = self.api.call_api(method_, url, header_params=header_params, body=body_, post_params=post,
                                 _request_timeout=timeout if timeout is not None else self.request_timeout)
        if not 200 <= resp.status <= 299:
            raise ApiException(status=resp.status, reason=resp.reason, body=resp.read().decode("utf-8", "replace"))
        return resp

    def request(self, method: str, path: str, query: Mapping[str, Any], body: Any = None,
                content_type: str = JSON, accept: str = JSON, timeout: float | None = None) -> bytes:
        resp = self._open(method, path, query, body, content_type, accept, timeout)
        try:
            return bytes(resp.read())
        except BaseException:
            resp.response.close()  # broken mid-read (apiserver restart): never back to the pool
            raise

    def lines(self, path: str, query: Mapping[str, Any], timeout: float) -> Generator[bytes, None, None]:
        resp = self._open("GET", path, query, None, JSON, JSON, timeout).response
        finished = False
        try:
            buf = b""
            for chunk in resp.stream(amt=None, decode_content=False):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    yield line
            finished = True
        finally:
            if finished:
                resp.release_conn()
            else:
                # Abandoned (the condition was satisfied) or broken (apiserver restart): the
                # connection still carries a watch, never reusable; close its socket now rather
                # than leave it to the garbage collector (a ResourceWarning in a later step).
                resp.close()

    def close(self) -> None:
        self.api.close()


class Kube:
    """A client pinned to one context. Construction only reads the kubeconfig file (or takes a
    ready ``transport``, which is how the unit tests put a fake under the real code)."""

    def __init__(
        self,
        context: str,
        kubeconfig: str | os.PathLike[str] | None = None,
        on_command: Callable[[CommandRecord], None] | None = None,
        request_timeout: float = 30.0,
        user_agent: str = "deploy-suite",
        transport: Transport | None = None,
        field_manager: str = FIELD_MANAGER,
    ) -> None:
        if not context:
            raise InputError("kube_context", "empty context name", "name a context from your kubeconfig")
        self.context = context
        self.field_manager = field_manager
        self.kubeconfig = str(kubeconfig) if kubeconfig else None
        self.on_command = on_command
        self.request_timeout = request_timeout
        # Discovery answers, asked once per Kube (a run): group -> (versions by priority, preferred);
        # group/version -> its resources; the operator's kinds in the version the server serves.
        self._groups: dict[str, tuple[list[str], str]] | None = None
        self._group_resources: dict[str, list[Obj]] = {}
        self._versions: dict[str, Resource] = {}
        config_file = self.kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
        self._config_file = config_file
        self.transport: Transport = transport if transport is not None else ClientTransport.from_kubeconfig(
            config_file, context, user_agent, request_timeout)
        self.server = self.transport.server

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
    def _request(self, method: str, path: str, query: Mapping[str, Any] | None = None, body: Any = None,
                 content_type: str = JSON, accept: str = JSON, timeout: float | None = None) -> Any:
        """One request; the answer parsed as JSON. Untranslated: callers go through :meth:`_call`."""
        params = {k: v for k, v in (query or {}).items() if v is not None}
        data = self.transport.request(method, path, params, body, content_type, accept, timeout)
        return json.loads(data) if data else {}

    def _call(self, kind: str, args: list[str], what: str, fn: Callable[[], Any]) -> Any:
        try:
            result = fn()
        except Exception as exc:  # translated right here, nowhere else
            err = translate(exc, what)
            self._record(kind, args, f"error {err.status} {err.reason}".strip())
            if err is exc:
                raise
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
        group, _, version = api_version.rpartition("/")
        for item in self.group_resources(api_version):
            if item.get("kind") == kind and "/" not in item.get("name", ""):
                return Resource(group, version, item["name"], bool(item.get("namespaced")), kind)
        raise NotFound(f"the server does not serve kind {kind} in {api_version}", status=404)

    def group_resources(self, api_version: str, fresh: bool = False) -> list[Obj]:
        """The resources the server serves in one group/version (one request, cached; ``fresh`` asks
        again); none when the group/version is not served. A group not served is not cached: a CRD
        created meanwhile is served moments after it is Established, and a later call must see it."""
        if fresh or api_version not in self._group_resources:
            group, _, version = api_version.rpartition("/")
            path = f"/apis/{group}/{version}" if group else f"/api/{version}"
            try:
                doc = self._call("read", ["api-resources", f"--api-group={group}"], f"discover {api_version}",
                                 lambda: self._request("GET", path))
            except NotFound:
                return []
            self._group_resources[api_version] = list(doc.get("resources") or [])
        return self._group_resources[api_version]

    def api_groups(self) -> dict[str, tuple[list[str], str]]:
        """Every API group the server serves: its versions by priority and the preferred one
        (``GET /apis``, asked once per Kube, so once per run)."""
        if self._groups is None:
            doc = self._call("read", ["api-versions"], "discover API groups", lambda: self._request("GET", "/apis"))
            self._groups = {
                str(g.get("name")): ([str(v.get("version")) for v in g.get("versions") or []],
                                     str((g.get("preferredVersion") or {}).get("version") or ""))
                for g in doc.get("groups") or []}
        return self._groups

    def served_versions(self, group: str, kind: str) -> list[str]:
        """The versions of ``group`` that serve ``kind``, by priority (empty: the group is not served)."""
        versions, _ = self.api_groups().get(group, ([], ""))
        return [v for v in versions if any(r.get("kind") == kind and "/" not in str(r.get("name", ""))
                                           for r in self.group_resources(f"{group}/{v}"))]

    def server_version(self) -> Obj:
        """The apiserver's ``/version`` (``gitVersion``, ...)."""
        doc: Obj = self._call("read", ["version", "-o", "json"], "server version",
                              lambda: self._request("GET", "/version"))
        return doc

    def resolve_versions(self, wanted: str | None) -> dict[str, str | None]:
        """Read, list and watch the operator's kinds (DGD, DCD) in the version the server serves from
        now on: ``wanted`` (the manifest's apiVersion) when served, else the preferred one
        (:func:`deploy_suite.access.resources.pick_version`). Until called, the table's version is used
        without any discovery request (the fast path). Returns kind -> version (None: not served)."""
        picked: dict[str, str | None] = {}
        for kind in VERSIONED_KINDS:
            known = KNOWN[kind]
            served = self.served_versions(known.group, kind)
            preferred = self.api_groups().get(known.group, ([], ""))[1]
            version = pick_version(served, (wanted or "").rpartition("/")[2] or None, preferred or None)
            picked[kind] = version
            if version is not None:
                self._versions[kind] = Resource(known.group, version, known.plural, known.namespaced, kind)
        return picked

    def _res(self, kind: str | Resource) -> Resource:
        """``kind`` as :func:`resolve` gives it; the table's entry of an operator kind in the version
        resolved for it (a caller naming another version explicitly keeps it)."""
        res = resolve(kind)
        return self._versions.get(res.kind, res) if res.kind in VERSIONED_KINDS and res is KNOWN[res.kind] else res

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
                previous: bool = False, *, limit_bytes: int | None = None) -> str:
        res = KNOWN["Pod"]
        args = ["logs", name, "-n", namespace, f"--tail={tail}", *(["-c", container] if container else []),
                *(["--previous"] if previous else []), *([f"--limit-bytes={limit_bytes}"] if limit_bytes else [])]

        def fetch() -> str:
            data = self.transport.request("GET", res.path(namespace, name, "log"), {k: v for k, v in {
                "container": container, "tailLines": tail, "previous": "true" if previous else None,
                "limitBytes": limit_bytes}.items() if v is not None}, accept="*/*")
            return data.decode("utf-8", errors="replace")

        text: str = self._call("read", args, f"logs {name}", fetch)
        return text

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
        args = ["apply", "--server-side", f"--field-manager={self.field_manager}", "--force-conflicts"]
        if dry_run:
            args.append("--dry-run=server")
        if ns:
            args += ["-n", ns]
        args += ["-f", source] if source else [f"{res.kubectl_name}/{name}"]
        query = {"fieldManager": self.field_manager, "force": "true", "dryRun": "All" if dry_run else None}
        out: Obj = self._call("dry-run" if dry_run else "mutate", args, f"apply {kind}/{name}", lambda: self._request(
            "PATCH", res.path(ns, name), query=query, body=body, content_type="application/apply-patch+yaml"))
        return out

    def apply_file(self, path: Path, namespace: str | None, dry_run: bool = False,
                   display: str | None = None) -> list[Obj]:
        """Apply every document of a (multi-document) file, in file order."""
        docs = yamlio.load_all(path, display)
        return self.apply_documents(docs, namespace, display or str(path), dry_run=dry_run)

    def apply_documents(self, docs: list[Any], namespace: str | None, source: str, dry_run: bool = False) -> list[Obj]:
        """Apply already parsed documents, in order (``source`` names their file in records)."""
        return [self.apply(d, namespace, dry_run=dry_run, source=source) for d in docs]

    def patch_status(self, kind: str | Resource, name: str, namespace: str | None, status: Obj) -> Obj:
        res = self._res(kind)
        args = ["patch", res.kubectl_name, name, *(["-n", namespace] if namespace else []),
                "--subresource=status", "--type=merge", "-p", json.dumps({"status": status})]
        out: Obj = self._call("mutate", args, f"patch {res.plural}/{name}/status", lambda: self._request(
            "PATCH", res.path(namespace, name, "status"), body={"status": status},
            content_type="application/merge-patch+json"))
        return out

    def patch_json(self, kind: str | Resource, name: str, namespace: str | None, ops: list[Obj]) -> Obj:
        """A JSON patch (RFC 6902) of one object (``kubectl patch --type=json``): its ``test``
        operations make the whole patch fail when the object changed meanwhile."""
        res = self._res(kind)
        args = ["patch", res.kubectl_name, name, *(["-n", namespace] if namespace else []), "--type=json",
                "-p", json.dumps(ops)]
        out: Obj = self._call("mutate", args, f"patch {res.plural}/{name}", lambda: self._request(
            "PATCH", res.path(namespace, name), body=ops, content_type="application/json-patch+json"))
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

    def create_token(self, service_account: str, namespace: str, seconds: int) -> str:
        """``kubectl create token``: a token of the ServiceAccount (its TokenRequest subresource)."""
        args = ["create", "token", service_account, "-n", namespace, f"--duration={seconds}s"]
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"expirationSeconds": seconds}}
        out: Obj = self._call("mutate", args, f"create token {service_account}", lambda: self._request(
            "POST", KNOWN["ServiceAccount"].path(namespace, service_account, "token"), body=body))
        return str(out["status"]["token"])

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

    # ------------------------------------------------------------------ waits (deploy_suite.access.watch)
    def list_collection(self, spec: Watch) -> tuple[list[Obj], str]:
        """One unpaged list for a wait (not recorded: the wait records its ``kubectl get --watch``)."""
        res = self._res(spec.resource)
        try:
            page = self._request("GET", res.path(spec.namespace), query={
                "labelSelector": spec.label_selector, "fieldSelector": spec.fields})
        except Exception as exc:
            raise translate(exc, f"list {res.plural}") from exc
        return page.get("items") or [], (page.get("metadata") or {}).get("resourceVersion", "")

    def watch_collection(self, spec: Watch, version: str, seconds: float) -> Generator[Obj, None, None]:
        """Watch events from ``version``; errors (an ERROR event too) arrive translated."""
        res = self._res(spec.resource)
        what = f"watch {res.plural}"
        query = {"watch": "true", "resourceVersion": version, "allowWatchBookmarks": "true",
                 "timeoutSeconds": max(1, int(seconds)), "labelSelector": spec.label_selector,
                 "fieldSelector": spec.fields}
        params = {k: v for k, v in query.items() if v is not None}
        try:
            with contextlib.closing(self.transport.lines(res.path(spec.namespace), params,
                                                         seconds + WATCH_READ_GRACE_S)) as lines:
                for line in lines:
                    if not line.strip():
                        continue
                    event: Obj = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        raise status_error(int(status.get("code") or 0), what, str(status.get("message", "")),
                                           str(status.get("reason", "")))
                    yield event
        except KubeError:
            raise
        except Exception as exc:
            raise translate(exc, what) from exc

    def record_watch(self, spec: Watch) -> None:
        self._record("watch", spec.kubectl_args(), "started")

    def wait(self, condition: Condition, *, timeout: float, on_progress: Callable[[str], None] | None = None,
             chunk: float = 60.0) -> WaitState:
        """Wait for a named condition (:mod:`deploy_suite.judges.conditions`) under ``timeout``."""
        return watch.wait(self, condition.watches, condition, awaited=condition.awaited, timeout=timeout,
                          on_progress=on_progress, chunk=chunk)

    def wait_for(self, spec: Watch, predicate: Callable[[dict[str, Obj]], tuple[bool, str]], *, awaited: str,
                 timeout: float, on_progress: Callable[[str], None] | None = None,
                 chunk: float = 60.0) -> WaitState:
        """Watch one collection (``spec``: a kind, one object by name, or a selection) until ``predicate``
        says done: the same loop as :meth:`wait`, with an ad-hoc condition over that collection."""
        judge: Judge = lambda seen: predicate(seen["objects"])  # noqa: E731 - the predicate sees one collection
        return watch.wait(self, {"objects": spec}, judge, awaited=awaited, timeout=timeout,
                          on_progress=on_progress, chunk=chunk)

    def watch_events(self, kind: str | Resource, stop: threading.Event, namespace: str | None = None,
                     label_selector: str | None = None, chunk: float = 30.0,
                     field_selector: str | None = None) -> Iterator[tuple[str, Obj]]:
        """Endless list+watch for controllers: yields (type, object); after a relist every object
        comes again as ADDED, so handlers must be level-based. Ends when ``stop`` is set."""
        spec = Watch(kind, namespace, label_selector=label_selector, field_selector=field_selector)
        return watch.stream(self, spec, stop, chunk)

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
        self.transport.close()
