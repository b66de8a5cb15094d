"""The one wait loop: list, then watch from the list's resourceVersion, under one error policy.

Every wait of the suite (a Job, a PVC, a DGD and its pods, a deletion) and the offline
controllers' endless streams run :class:`ListWatch`:

* list the collection, then watch it from the list's ``resourceVersion``; a watch that ends
  (the server's ``timeoutSeconds``, a dropped connection) resumes from the last version seen;
* ``410 Gone`` (the version is too old, as an HTTP status or an ``ERROR`` event) relists;
* one error policy, read from the error tree (``deploy_suite.errors``): a *temporary* error
  (``Unavailable``: no answer, 5xx, dropped connection) is retried with a capped backoff inside
  the deadline; any other error (401, 403, 404, an invalid request) stops the wait at once, so a
  missing permission reads as itself, never as a timeout.

:func:`wait` watches one or several collections (a DGD and its pods) until a condition (see
:mod:`deploy_suite.judges.conditions`) says done; :func:`stream` is the controllers' endless form. All
time goes through :mod:`deploy_suite.clock`. Requests and their translation into the error tree
belong to the access layer (:class:`deploy_suite.access.kube.Kube` implements :class:`Source`).
"""

from __future__ import annotations

import contextlib
import math
import queue
import threading
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from deploy_suite import clock
from deploy_suite.access.resources import Obj, Resource, key, resolve
from deploy_suite.constants import PLATFORM_GRACE_S
from deploy_suite.errors import KubeError, PlatformFault, SuiteError, WaitTimeout

# Retry pause after a temporary error: doubles from the first to the cap, never past the deadline.
BACKOFF_FIRST_S = 0.05
BACKOFF_CAP_S = 1.0
# A controller's pause before it relists after a refusal (see stream()).
CONTROLLER_PAUSE_S = 1.0
# A wait over several collections judges at least this often, with or without changes.
TICK_S = 5.0
GONE = 410
SYNC = "SYNC"  # a Change carrying a fresh list: the whole collection as the server has it now

# What a condition sees: each watched collection by its label, objects keyed namespace/name.
Seen = dict[str, dict[str, Obj]]
# A condition says (done, one-line description of the state). It may raise (a StepFailure: a
# failed Job, a pod that can never schedule) to stop the wait at once.
Judge = Callable[[Seen], tuple[bool, str]]


@dataclass(frozen=True)
class Watch:
    """One watched collection: a kind, optionally narrowed to a namespace, a name, selectors."""

    kind: str | Resource
    namespace: str | None = None
    name: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None

    @property
    def resource(self) -> Resource:
        return resolve(self.kind)

    @property
    def fields(self) -> str | None:
        """The field selector sent to the server (one object by name is a ``metadata.name`` selector)."""
        parts = [f"metadata.name={self.name}" if self.name else "", self.field_selector or ""]
        return ",".join(p for p in parts if p) or None

    def kubectl_args(self) -> list[str]:
        """``kubectl get ... --watch`` arguments that repeat this watch."""
        res = self.resource
        args = ["get", res.kubectl_name, *([self.name] if self.name else [])]
        if res.namespaced:
            args += ["-n", self.namespace] if self.namespace else ["-A"]
        if self.label_selector:
            args += ["-l", self.label_selector]
        if self.field_selector:
            args += ["--field-selector", self.field_selector]
        return [*args, "--watch"]


class Source(Protocol):
    """What the loop needs from the access layer; errors arrive already translated (``KubeError``)."""

    def list_collection(self, watch: Watch) -> tuple[list[Obj], str]:
        """The collection's items and the list's resourceVersion."""
        ...

    def watch_collection(self, watch: Watch, version: str, seconds: float) -> Generator[Obj, None, None]:
        """Watch events from ``version`` for about ``seconds``; an ``ERROR`` event is raised as the
        KubeError of its status code."""
        ...

    def record_watch(self, watch: Watch) -> None:
        """Record the kubectl command that repeats the watch."""
        ...


class Condition(Protocol):
    """A named condition: what it awaits, the collections it watches (by label), and its judge."""

    @property
    def awaited(self) -> str: ...

    @property
    def watches(self) -> Mapping[str, Watch]: ...

    def __call__(self, seen: Seen) -> tuple[bool, str]: ...


@dataclass(frozen=True)
class Change:
    """What one collection did: a fresh list (``SYNC``), or one watch event (ADDED, MODIFIED, DELETED)."""

    type: str
    objects: list[Obj]


class ListWatch:
    """One collection, listed then watched until the deadline passes or ``stop`` is set.

    Iterating yields :class:`Change` s. ``version`` is the last resourceVersion seen (the point a
    watch resumes from); ``last_error`` the temporary error being retried, if any.
    """

    def __init__(self, source: Source, watch: Watch, *, deadline: float | None = None,
                 stop: threading.Event | None = None, chunk: float = 60.0) -> None:
        self.source = source
        self.watch = watch
        self.deadline = deadline
        self.stop = stop if stop is not None else threading.Event()
        self.chunk = chunk
        self.version: str | None = None
        self.last_error: KubeError | None = None
        self.platform_since: float | None = None  # when the platform fault being retried began

    def remaining(self) -> float:
        return math.inf if self.deadline is None else self.deadline - clock.monotonic()

    def over(self) -> bool:
        return self.stop.is_set() or self.remaining() <= 0

    def __iter__(self) -> Iterator[Change]:
        return self.changes()

    def changes(self) -> Generator[Change, None, None]:
        backoff = BACKOFF_FIRST_S
        first = True  # the first list is always tried, so that a spent deadline still judges once
        while not self.stop.is_set() and (first or self.remaining() > 0):
            first = False
            try:
                if self.version is None:
                    items, self.version = self.source.list_collection(self.watch)
                    yield Change(SYNC, items)
                    if self.over():
                        return
                window = min(self.chunk, self.remaining())
                with contextlib.closing(self.source.watch_collection(self.watch, self.version, window)) as events:
                    for event in events:
                        obj = event.get("object") or {}
                        self.version = (obj.get("metadata") or {}).get("resourceVersion") or self.version
                        if event.get("type") == "BOOKMARK":
                            continue
                        yield Change(str(event.get("type")), [obj])
                        if self.over():
                            return
                backoff, self.last_error, self.platform_since = BACKOFF_FIRST_S, None, None
            except KubeError as err:
                if err.status == GONE:
                    self.version = None  # our version is older than the server keeps: relist
                    continue
                if not err.temporary:
                    raise
                # An unreachable webhook of the platform is retried for a bounded grace only: past
                # it, the wait stops with the fault (docs/operator-generations.md, "Platform faults").
                if isinstance(err, PlatformFault):
                    if self.platform_since is None:
                        self.platform_since = clock.monotonic()
                    if clock.monotonic() - self.platform_since >= PLATFORM_GRACE_S:
                        raise
                else:
                    self.platform_since = None
                # The apiserver restarting or a dropped connection: resume from self.version.
                self.last_error = err
                clock.wait_event(self.stop, max(0.0, min(backoff, self.remaining())))
                backoff = min(backoff * 2, BACKOFF_CAP_S)


# Changes that arrived together, by the label of their collection.
Burst = list[tuple[str, Change]]


@dataclass
class WaitState:
    """What a wait has seen: each collection's objects by namespace/name, and the last description."""

    collections: dict[str, dict[str, Obj]] = field(default_factory=dict)
    description: str = "nothing observed yet"

    @property
    def objects(self) -> dict[str, Obj]:
        """The first watched collection (the only one of a single-collection wait)."""
        return next(iter(self.collections.values()), {})


def _apply(objects: dict[str, Obj], change: Change) -> None:
    if change.type == SYNC:
        objects.clear()
    for obj in change.objects:
        if change.type == "DELETED":
            objects.pop(key(obj), None)
        else:
            objects[key(obj)] = obj


def wait(source: Source, watches: Mapping[str, Watch], judge: Judge, *, awaited: str, timeout: float,
         on_progress: Callable[[str], None] | None = None, chunk: float = 60.0, tick: float = TICK_S) -> WaitState:
    """Watch ``watches`` until ``judge`` says done; :class:`WaitTimeout` when ``timeout`` runs out.

    React to events as they come: no polling interval. The judge runs once every collection has
    been listed, then after every burst of changes (the initial lists arrive as one) and, over
    several collections, at least every ``tick`` seconds (so time-based judgements, such as a
    contention wait's next check or a no-progress bound, happen on time); a change of its
    description is reported through ``on_progress``. On expiry the timeout says what was awaited,
    for how long, the last state seen and the temporary error being retried, if any.
    """
    started = clock.monotonic()
    stop = threading.Event()
    feeds = {label: ListWatch(source, spec, deadline=started + timeout, stop=stop, chunk=chunk)
             for label, spec in watches.items()}
    for spec in watches.values():
        source.record_watch(spec)
    state = WaitState({label: {} for label in watches})
    synced: set[str] = set()
    try:
        with contextlib.closing(_merged(feeds, stop, tick)) as merged:
            for burst in merged:
                for label, change in burst:
                    _apply(state.collections[label], change)
                    if change.type == SYNC:
                        synced.add(label)
                if len(synced) < len(feeds):
                    continue
                done, description = judge(state.collections)
                if description != state.description and on_progress is not None:
                    on_progress(description)
                state.description = description
                if done:
                    return state
    finally:
        stop.set()
    retrying = "; ".join(f"retrying after: {feed.last_error}" for feed in feeds.values() if feed.last_error)
    raise WaitTimeout(awaited, clock.monotonic() - started, "; ".join(filter(None, [state.description, retrying])))


def _merged(feeds: Mapping[str, ListWatch], stop: threading.Event,
            tick: float = math.inf) -> Generator[Burst, None, None]:
    """Every feed's changes, in bursts of what has arrived (at least one change each); ends when
    every feed has ended.

    One feed is read in the caller's thread, one change at a time. Several are read by one thread
    each (a blocked watch read cannot be multiplexed through the client), feeding a queue; a
    feed's error is raised here.
    """
    if len(feeds) == 1:
        ((label, feed),) = feeds.items()
        with contextlib.closing(feed.changes()) as changes_of_one:
            for change in changes_of_one:
                yield [(label, change)]
        return
    arrived: queue.Queue[tuple[str, Change | BaseException | None]] = queue.Queue()

    def pump(label: str, feed: ListWatch) -> None:
        try:
            with contextlib.closing(feed.changes()) as each:
                for change in each:
                    arrived.put((label, change))
                    if stop.is_set():
                        return
        except BaseException as exc:  # raised in the waiting thread
            arrived.put((label, exc))
        finally:
            arrived.put((label, None))

    for label, feed in feeds.items():
        threading.Thread(target=pump, args=(label, feed), daemon=True, name=f"watch-{label}").start()
    deadline = min(feed.deadline or math.inf for feed in feeds.values())
    running, listed = len(feeds), set[str]()
    while running:
        # Until every feed has listed (or ended), nothing can be judged: wait for them; each ends
        # by itself at the deadline. After that the deadline is kept here to the moment.
        remaining = max(0.0, deadline - clock.monotonic())
        timeout = min(remaining, tick) if len(listed) == len(feeds) else None
        try:
            items = [arrived.get(timeout=timeout)]
        except queue.Empty:
            if timeout is not None and timeout < remaining:
                yield []  # a tick: nothing changed, time passed
                continue
            return
        with contextlib.suppress(queue.Empty):
            while True:  # drain a burst (the initial lists) before judging
                items.append(arrived.get_nowait())
        burst: Burst = []
        for label, item in items:
            listed.add(label)
            if item is None:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                burst.append((label, item))
        if burst:
            yield burst


def stream(source: Source, watch: Watch, stop: threading.Event, chunk: float = 30.0) -> Iterator[tuple[str, Obj]]:
    """Endless list+watch for controllers: (type, object) until ``stop`` is set.

    After a (re)list every object comes again as ``ADDED``, so handlers must be level-based.
    Temporary errors are retried inside :class:`ListWatch` as in every wait. A controller has no
    deadline and must outlive a passing refusal (RBAC still being set up, a CRD not yet served),
    so a non-temporary error pauses and relists here instead of ending the stream.
    """
    pause = BACKOFF_FIRST_S
    while not stop.is_set():
        try:
            for change in ListWatch(source, watch, stop=stop, chunk=chunk):
                for obj in change.objects:
                    yield ("ADDED" if change.type == SYNC else change.type), obj
                pause = BACKOFF_FIRST_S
        except SuiteError:
            clock.wait_event(stop, pause)
            pause = min(pause * 2, CONTROLLER_PAUSE_S)
