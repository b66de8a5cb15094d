"""An in-memory apiserver behind ``Kube``'s transport seam, for unit tests of the access layer.

``Kube(context, transport=FakeApi(...))`` runs the real access layer (recording, error
translation, the one wait loop) against it. The fake holds objects (``put``), answers gets, lists,
applies, creates, patches and deletes like an apiserver, and plays scripted watch streams
(``script_watch``): events, dropped connections, ``410 Gone``; scripted failures of any request
(``fail``) raise exactly what the real transport raises (``ApiException``, urllib3 errors), so
``kube.translate`` is exercised too.

Time: with a :class:`deploy_suite.clock.FakeClock` installed, a watch whose script is exhausted
is held "until its timeoutSeconds" by advancing the fake clock, but only once every scripted
stream has been played and ``watchers`` watches are held (set it to 2 for a wait over a DGD and
its pods), so a wait over several collections sees every scripted event before its deadline;
nothing really sleeps.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from deploy_suite import clock
from deploy_suite.access.kube import CommandRecord, Kube, Resource
from deploy_suite.constants import LABEL_DGD_NAME, Obj

SERVER = "https://fake-apiserver.invalid"
# How long a held watch lets other threads play their scripts before time moves anyway.
QUIESCENCE_LIMIT_S = 2.0


def status(code: int, reason: str, message: str) -> ApiException:
    """What the real transport raises for a non-2xx answer (a Status body)."""
    body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                       "reason": reason, "code": code})
    return ApiException(status=code, reason=reason, body=body)


def forbidden(verb: str = "watch", plural: str = "pods") -> ApiException:
    return status(403, "Forbidden", f'{plural} is forbidden: User "deployer" cannot {verb} resource "{plural}"')


def gone() -> ApiException:
    return status(410, "Expired", "too old resource version")


def dropped() -> urllib3.exceptions.ProtocolError:
    """A connection broken mid-stream (an apiserver restart)."""
    return urllib3.exceptions.ProtocolError("Connection broken: IncompleteRead(0 bytes read)")


def event(kind: str, obj: Obj) -> Obj:
    return {"type": kind, "object": obj}


def error_event(code: int, message: str = "too old resource version") -> Obj:
    return {"type": "ERROR", "object": {"kind": "Status", "code": code, "message": message}}


@dataclass(frozen=True)
class Request:
    method: str  # GET, WATCH, PATCH, POST, DELETE
    path: str
    query: dict[str, Any]
    body: Any = None


@dataclass
class _Fault:
    method: str
    path: str
    error: BaseException
    times: int
    after: int = 0


@dataclass
class _Path:
    prefix: str  # /api/v1 or /apis/group/version
    namespace: str | None
    plural: str
    name: str | None = None
    sub: str | None = None

    @classmethod
    def parse(cls, path: str) -> _Path:
        parts = path.strip("/").split("/")
        head, rest = (parts[:2], parts[2:]) if parts[0] == "api" else (parts[:3], parts[3:])
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        return cls("/" + "/".join(head), namespace, rest[0] if rest else "",
                   rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None)

    @property
    def collection(self) -> str:
        """The collection's request path (a watch script's key)."""
        return f"{self.prefix}{f'/namespaces/{self.namespace}' if self.namespace else ''}/{self.plural}"


def _matches(obj: Obj, label_selector: str | None, field_selector: str | None) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (label_selector or "").split(",")):
        k, _, v = term.partition("=")
        if labels.get(k) != v:
            return False
    for term in filter(None, (field_selector or "").split(",")):
        negate = "!=" in term  # the apiserver's field selectors take = and !=
        dotted, _, want = term.replace("!=", "=", 1).partition("=")
        value: Any = obj
        for part in dotted.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if (str(value) == want) == negate:
            return False
    return True


@dataclass
class FakeApi:
    """The transport: objects by (prefix, plural) then (namespace, name); scripted watches and faults."""

    fake_clock: clock.FakeClock | None = None
    server: str = SERVER
    objects: dict[tuple[str, str], dict[tuple[str, str], Obj]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    logs: dict[tuple[str, str], str] = field(default_factory=dict)
    previous_logs: dict[tuple[str, str], str] = field(default_factory=dict)  # `logs --previous`, where it differs
    version: int = 100
    served: list[Resource] = field(default_factory=list)  # kinds discovery answers for
    # Preferred version per group in `GET /apis` (default: the first version served).
    preferred: dict[str, str] = field(default_factory=dict)
    git_version: str = "v1.36.1"
    # Admission, as a webhook would judge a write (dry-run too): (operation CREATE|UPDATE, the body,
    # the stored object or None) -> an exception to raise (e.g. ``status(...)``), or None to admit.
    admission: list[Callable[[str, Obj, Obj | None], BaseException | None]] = field(default_factory=list)
    closed: bool = False
    _faults: list[_Fault] = field(default_factory=list)
    _watches: dict[str, deque[list[Any]]] = field(default_factory=dict)
    _playing: int = 0
    # How many watches one wait holds open at once (2 for a DGD and its pods): held watches let
    # time move only when all of them are held, so no collection misses its events.
    watchers: int = 1
    # Delete a DGD's pods with it, as owner references and the garbage collector do (opt-in).
    garbage_collect: bool = False
    _held: list[float] = field(default_factory=list)
    _lock: threading.Condition = field(default_factory=threading.Condition)

    # ------------------------------------------------------------------ test set-up
    def put(self, resource: Resource, obj: Obj) -> Obj:
        """Store ``obj`` as the server would (resourceVersion, generation); returns the stored copy."""
        meta = obj.setdefault("metadata", {})
        if not resource.namespaced:
            meta.pop("namespace", None)
        with self._lock:
            self.version += 1
            meta.setdefault("resourceVersion", str(self.version))
        meta.setdefault("generation", 1)
        meta.setdefault("uid", f"uid-{meta.get('name')}")
        bucket = self.objects.setdefault((self._prefix(resource), resource.plural), {})
        bucket[(meta.get("namespace") or "", meta["name"])] = obj
        return obj

    def script_watch(self, resource: Resource, namespace: str | None, *streams: list[Any]) -> None:
        """Queue watch streams of a collection, one per watch request, in order. A stream holds
        events (``event(...)``/``error_event(...)``) and exceptions to raise at that point; once it
        is played the stream ends, as at the server's timeoutSeconds."""
        path = _Path(self._prefix(resource), namespace if resource.namespaced else None, resource.plural).collection
        self._watches.setdefault(path, deque()).extend(list(s) for s in streams)

    def fail(self, method: str, path: str, error: BaseException, times: int = 1, after: int = 0) -> None:
        """After ``after`` more requests of ``method`` (WATCH for a watch) on ``path``, the next
        ``times`` raise ``error``."""
        self._faults.append(_Fault(method, path, error, times, after))

    def watches_left(self) -> int:
        return sum(len(q) for q in self._watches.values())

    def of(self, method: str) -> list[Request]:
        return [r for r in self.requests if r.method == method]

    # ------------------------------------------------------------------ the Transport protocol
    def request(self, method: str, path: str, query: Mapping[str, Any], body: Any = None,
                content_type: str = "application/json", accept: str = "application/json",
                timeout: float | None = None) -> bytes:
        self.requests.append(Request(method, path, dict(query), copy.deepcopy(body)))
        self._raise_fault(method, path)
        if method == "GET" and path in {"/apis", "/version"}:
            return json.dumps(self._groups() if path == "/apis" else {"gitVersion": self.git_version}).encode()
        where = _Path.parse(path)
        if method == "GET" and not where.plural:  # discovery of one group/version
            served = [{"name": r.plural, "namespaced": r.namespaced, "kind": r.kind}
                      for r in self.served if self._prefix(r) == where.prefix]
            if not served:
                raise status(404, "NotFound", "the server could not find the requested resource")
            return json.dumps({"kind": "APIResourceList", "resources": served}).encode()
        if method == "GET" and where.sub == "log":
            key = (where.namespace or "", where.name or "")
            if query.get("previous") == "true" and key in self.previous_logs:
                return self.previous_logs[key].encode()
            return self.logs.get(key, "").encode()
        if method == "PATCH" and content_type == "application/json-patch+json":
            return json.dumps(self._json_patch(where, body)).encode()
        handler = {"GET": self._get, "PATCH": self._patch, "POST": self._post, "DELETE": self._delete}[method]
        return json.dumps(handler(where, dict(query), body)).encode()

    def lines(self, path: str, query: Mapping[str, Any], timeout: float) -> Generator[bytes, None, None]:
        self.requests.append(Request("WATCH", path, dict(query)))
        self._raise_fault("WATCH", path)
        with self._lock:
            queued = self._watches.get(path)
            stream = queued.popleft() if queued else None
            self._playing += stream is not None
        if stream is None:
            started = self.fake_clock.monotonic() if self.fake_clock is not None else 0.0
            self._hold(started + float(query.get("timeoutSeconds", timeout)))
            return
        try:
            for step in stream:
                if isinstance(step, BaseException):
                    raise step
                self._remember(path, step)
                yield json.dumps(step).encode()
        finally:
            with self._lock:
                self._playing -= 1
                self._lock.notify_all()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            self._lock.notify_all()

    # ------------------------------------------------------------------ the server
    def _groups(self) -> Obj:
        """``GET /apis``: the groups of the served kinds, versions in the order first served."""
        versions: dict[str, list[str]] = {}
        for r in self.served:
            if r.group and r.version not in versions.setdefault(r.group, []):
                versions[r.group].append(r.version)
        return {"kind": "APIGroupList", "groups": [
            {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
             "preferredVersion": {"groupVersion": f"{g}/{self.preferred.get(g, vs[0])}",
                                  "version": self.preferred.get(g, vs[0])}} for g, vs in versions.items()]}

    def _admit(self, body: Obj, current: Obj | None) -> None:
        for judge in self.admission:
            refusal = judge("UPDATE" if current is not None else "CREATE", body, current)
            if refusal is not None:
                raise refusal

    def _prefix(self, resource: Resource) -> str:
        return f"/apis/{resource.group}/{resource.version}" if resource.group else f"/api/{resource.version}"

    def _raise_fault(self, method: str, path: str) -> None:
        for fault in self._faults:
            if fault.method != method or fault.path != path:
                continue
            if fault.after > 0:
                fault.after -= 1
            elif fault.times > 0:
                fault.times -= 1
                raise fault.error

    def _bucket(self, where: _Path) -> dict[tuple[str, str], Obj]:
        return self.objects.setdefault((where.prefix, where.plural), {})

    def _get(self, where: _Path, query: dict[str, Any], _body: Any) -> Obj:
        bucket = self._bucket(where)
        if where.name is not None:
            found = bucket.get((where.namespace or "", where.name))
            if found is None:
                raise status(404, "NotFound", f'{where.plural} "{where.name}" not found')
            return found
        items = [o for (ns, _), o in sorted(bucket.items()) if where.namespace in (None, ns)
                 and _matches(o, query.get("labelSelector"), query.get("fieldSelector"))]
        return {"kind": "List", "metadata": {"resourceVersion": str(self.version)}, "items": items}

    def _patch(self, where: _Path, query: dict[str, Any], body: Any) -> Obj:
        bucket = self._bucket(where)
        current = bucket.get((where.namespace or "", where.name or ""))
        if where.sub is None:
            self._admit(body, current)
        if query.get("dryRun") == "All":  # answered as if applied, never stored
            return {**copy.deepcopy(current or {}), **copy.deepcopy(body)}
        if where.sub == "status":
            if current is None:
                raise status(404, "NotFound", f'{where.plural} "{where.name}" not found')
            current["status"] = {**(current.get("status") or {}), **body["status"]}
            current["metadata"].pop("resourceVersion", None)
            return self._store(where, current)
        merged = copy.deepcopy(body)
        if current is not None:
            merged["metadata"] = {**current["metadata"], **merged.get("metadata", {})}
            merged["metadata"].pop("resourceVersion", None)
            merged.setdefault("status", current.get("status"))
        manager = query.get("fieldManager")
        if manager:  # server-side apply records its manager, as the apiserver does (managedFields)
            fields = merged["metadata"].setdefault("managedFields", [])
            if not any(f.get("manager") == manager and f.get("operation") == "Apply" for f in fields):
                fields.append({"manager": manager, "operation": "Apply", "apiVersion": body.get("apiVersion")})
        return self._store(where, merged)

    def _json_patch(self, where: _Path, ops: list[Obj]) -> Obj:
        """RFC 6902 ``test`` and ``remove`` (what the suite sends): a failed test refuses the whole
        patch (422, as the apiserver answers), nothing changed."""
        current = self._bucket(where).get((where.namespace or "", where.name or ""))
        if current is None:
            raise status(404, "NotFound", f'{where.plural} "{where.name}" not found')
        patched = copy.deepcopy(current)
        for op in ops:
            *parents, last = [int(p) if p.isdigit() else p for p in op["path"].lstrip("/").split("/")]
            node: Any = patched
            try:
                for part in parents:
                    node = node[part]
                if op["op"] == "test" and node[last] != op["value"]:
                    raise KeyError(last)
                if op["op"] == "remove":
                    del node[last]
            except (KeyError, IndexError, TypeError):
                raise status(422, "Invalid", f"the server rejected our request due to an error in our request: "
                                             f"testing path {op['path']}") from None
        patched["metadata"].pop("resourceVersion", None)
        return self._store(where, patched)

    def _post(self, where: _Path, _query: dict[str, Any], body: Any) -> Obj:
        name = body["metadata"]["name"]
        if (where.namespace or "", name) in self._bucket(where):
            raise status(409, "AlreadyExists", f'{where.plural} "{name}" already exists')
        self._admit(body, None)
        return self._store(where, copy.deepcopy(body))

    def _delete(self, where: _Path, _query: dict[str, Any], _body: Any) -> Obj:
        found = self._bucket(where).pop((where.namespace or "", where.name or ""), None)
        if found is None:
            raise status(404, "NotFound", f'{where.plural} "{where.name}" not found')
        if where.plural == "dynamographdeployments" and self.garbage_collect:
            # The operator's children are owned by the DGD: garbage collection removes its pods.
            pods = self.objects.get(("/api/v1", "pods"), {})
            for k in [k for k, p in pods.items() if k[0] == (where.namespace or "") and
                      (p.get("metadata", {}).get("labels") or {}).get(LABEL_DGD_NAME) == where.name]:
                del pods[k]
        return {"kind": "Status", "status": "Success"}

    def _store(self, where: _Path, obj: Obj) -> Obj:
        if where.namespace:
            obj.setdefault("metadata", {})["namespace"] = where.namespace
        with self._lock:
            self.version += 1
            obj["metadata"]["resourceVersion"] = str(self.version)
        obj["metadata"].setdefault("generation", 1)
        # The apiserver gives each created object a uid of its own (never reused).
        obj["metadata"].setdefault("uid", f"uid-{obj['metadata']['name']}-{self.version}")
        self._bucket(where)[(where.namespace or "", obj["metadata"]["name"])] = obj
        return obj

    def _remember(self, path: str, step: Obj) -> None:
        """A scripted event changes the store too, so later lists agree with what was watched."""
        obj = step.get("object") or {}
        meta = obj.get("metadata")
        if step.get("type") not in {"ADDED", "MODIFIED", "DELETED"} or not isinstance(meta, dict):
            return
        with self._lock:
            self.version += 1
            meta.setdefault("resourceVersion", str(self.version))
        where = _Path.parse(path)
        bucket = self._bucket(where)
        item = (meta.get("namespace") or where.namespace or "", meta["name"])
        if step["type"] == "DELETED":
            bucket.pop(item, None)
        else:
            bucket[item] = obj

    def _hold(self, until: float) -> None:
        """Nothing more to say: the watch stays open until its timeoutSeconds (``until`` on the fake
        clock). Time moves only when ``watchers`` watches are held and no stream is left to play
        (or is playing); then to the earliest end among them, so held watches share the clock."""
        if self.fake_clock is None:
            return
        limit = time.monotonic() + QUIESCENCE_LIMIT_S
        with self._lock:
            self._held.append(until)
            self._lock.notify_all()
            try:
                while not self.closed and (now := self.fake_clock.monotonic()) < until:
                    ahead = [t for t in self._held if t > now]  # held watches not yet at their end
                    quiet = len(ahead) >= self.watchers and not self._playing and not any(self._watches.values())
                    if quiet or time.monotonic() >= limit:  # real time: a watcher that will never come
                        self.fake_clock.advance(min(ahead) - now)
                        self._lock.notify_all()
                        limit = time.monotonic() + QUIESCENCE_LIMIT_S
                    self._lock.wait(0.005)
            finally:
                self._held.remove(until)
                self._lock.notify_all()


@contextmanager
def installed(**kube_options: Any) -> Iterator[tuple[FakeApi, Kube, list[CommandRecord]]]:
    """A FakeClock installed, a FakeApi and a Kube over it recording its commands; all undone after."""
    fake_clock = clock.FakeClock()
    previous = clock.install(fake_clock)
    api = FakeApi(fake_clock)
    records: list[CommandRecord] = []
    kube = Kube("fake-ctx", transport=api, on_command=records.append, **kube_options)
    try:
        yield api, kube, records
    finally:
        kube.close()
        clock.install(previous)


# ------------------------------------------------------------------ objects as the server shows them


def pod(name: str, namespace: str, *, phase: str = "Pending", ready: bool = False,
        labels: Mapping[str, str] | None = None, gpus: int = 0, node: str | None = None,
        unschedulable: str | None = None, waiting: str | None = None, version: str | None = None) -> Obj:
    """A pod; ``unschedulable`` is the scheduler's message, ``waiting`` a container's waiting reason."""
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if unschedulable is not None:
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                           "message": unschedulable, "lastTransitionTime": "2026-01-01T00:00:00Z"})
    main = {"name": "main", "image": "registry.local/runtime:1", "args": ["--model", "m"],
            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}}
    statuses = [{"name": "main", "restartCount": 3, "state": {"waiting": {"reason": waiting}}}] if waiting else []
    meta: Obj = {"name": name, "namespace": namespace, "labels": dict(labels or {}),
                 "creationTimestamp": "2026-01-01T00:00:00Z"}
    if version is not None:
        meta["resourceVersion"] = version
    return {"metadata": meta, "spec": {"containers": [main], **({"nodeName": node} if node else {})},
            "status": {"phase": phase, "conditions": conditions, "containerStatuses": statuses}}


def scheduling_event(pod_name: str, namespace: str, message: str, name: str | None = None) -> Obj:
    return {"metadata": {"name": name or f"{pod_name}.sched", "namespace": namespace}, "reason": "FailedScheduling",
            "message": message, "lastTimestamp": "2026-01-01T00:00:01Z",
            "involvedObject": {"kind": "Pod", "name": pod_name}}


def job(name: str, namespace: str, *conditions: str) -> Obj:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace},
            "status": {"active": 0 if conditions else 1,
                       "conditions": [{"type": c, "status": "True"} for c in conditions]}}


def dgd(name: str, namespace: str, state: str = "pending", ready: bool = False, generation: int = 1,
        observed: int | None = 1, message: str = "", manager: str | None = "deploy-suite") -> Obj:
    """A DGD; ``manager`` is the field manager that applied it (the fake Kube's default: ours),
    None for one without managedFields."""
    fields = [{"manager": manager, "operation": "Apply", "apiVersion": "nvidia.com/v1alpha1"}] if manager else []
    return {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
            "metadata": {"name": name, "namespace": namespace, "generation": generation, "managedFields": fields},
            "status": {"state": state, "observedGeneration": observed, "conditions": [
                {"type": "Ready", "status": "True" if ready else "False",
                 "reason": "AllReady" if ready else "NotReady", "message": message}]}}
