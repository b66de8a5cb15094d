"""The operator simulator's serving: a real Dynamo frontend + mocker per DGD, wired into kwok.

Each DGD with a frontend (or a gaie graph: an ``epp`` component and a frontend sidecar in the
worker pods) gets a Dynamo frontend + mocker on 127.0.0.1 (:mod:`deploy_suite_offline.dynamo_runtime`),
started on a thread of its own so a reconcile never waits for it. kwok ``PortForward`` and ``Logs``
objects then point the served pods' port 8000 and ``kubectl logs`` at those processes. A served
component only counts as ready once its serving answers, as the real frontend pod's readiness
probe would (:meth:`Servings.readiness`); if the Dynamo environment cannot be built the error is
logged and DGDs are reported from their Deployments only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from deploy_suite import clock
from deploy_suite.access.kube import Kube
from deploy_suite.constants import LABEL_COMPONENT, LABEL_DGD_NAME
from deploy_suite.errors import SuiteError, Unavailable
from deploy_suite_offline import dynamo_env, dynamo_runtime
from deploy_suite_offline.faults import SERVING_FAULTS_CONFIGMAP, cri_log, logs_object, port_forward_object
from deploy_suite_offline.operator_sim.plan import FRONTEND_PORT, Plan
from deploy_suite_offline.operator_sim.spec import MAIN_CONTAINER
from deploy_suite_offline.procs import Log

# Cluster-side serving fault switch: data `<namespace>.<dgd>: <one of dynamo_runtime.FAULTS>`,
# read when a DGD's serving starts (apply it before the DGD).
FAULTS_CONFIGMAP = SERVING_FAULTS_CONFIGMAP



class LogMirror:
    """Copies growing process logs into CRI-format files that kwok's ``Logs`` can serve.

    kwok hands ``kubectl logs`` to the kubelet's CRI log reader, which only accepts
    ``<time> <stream> F <line>`` lines, while the Dynamo processes write plain text. A daemon thread
    appends each new complete line, so ``kubectl logs -f`` follows the live process.
    """

    # Not a wait: the copy interval of a background tailer (files have no change notification here).
    INTERVAL_S = 0.25

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[Path, tuple[Path, int]] = {}  # destination -> (source, bytes copied)

    def mirror(self, source: Path) -> Path:
        dest = source.parent / "k8s-logs" / source.name
        with self._lock:
            if dest not in self._files:
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text("")
                self._files[dest] = (source, 0)
        self.copy_once()
        return dest

    def forget(self, root: Path) -> None:
        with self._lock:
            for dest in [d for d in self._files if root in d.parents]:
                del self._files[dest]

    def copy_once(self) -> None:
        with self._lock:
            for dest, (source, copied) in list(self._files.items()):
                try:
                    # A restarted serving truncated its log: start over.
                    done = 0 if source.stat().st_size < copied else copied
                    with source.open("rb") as f:
                        f.seek(done)
                        chunk = f.read()
                except OSError:
                    continue
                complete = chunk[: chunk.rfind(b"\n") + 1]
                if not complete:
                    continue
                with dest.open("a") as out:
                    out.write(cri_log(complete.decode("utf-8", errors="replace")))
                self._files[dest] = (source, done + len(complete))

    def run(self, stop: threading.Event) -> None:
        while not clock.wait_event(stop, self.INTERVAL_S):
            self.copy_once()


@dataclass
class ServingState:
    signature: tuple[str, str]
    state: str = "starting"  # starting | ready | failed | stopped
    serving: dynamo_runtime.Serving | None = None
    error: str = ""


class Servings:
    """The Dynamo processes of every served DGD, keyed ``<namespace>/<name>``.

    ``requeue(key)`` asks the controller to reconcile a DGD again (its serving came up or failed).
    With ``enabled`` False nothing is started and serving never gates readiness.
    """

    def __init__(self, kube: Kube, dynamo_root: Path, log: Log, requeue: Callable[[str], None], *,
                 enabled: bool = True, dynamo_version: str = dynamo_env.DEFAULT_VERSION) -> None:
        self.kube = kube
        self.root = dynamo_root
        self.log = log
        self.requeue = requeue
        self.enabled = enabled
        self.dynamo_version = dynamo_version
        self._lock = threading.Lock()
        self._states: dict[str, ServingState] = {}
        self._serials: dict[str, threading.Lock] = {}  # key -> its lock (see _serial)
        self._env: dynamo_env.DynamoEnv | None = None
        self._env_error: str | None = None
        self._env_ready = threading.Event()
        self._wired: dict[str, int] = {}  # pod uid -> serving port its PortForward points at
        self.logs = LogMirror()

    def start(self, stop: threading.Event) -> list[threading.Thread]:
        """The log mirror, and (when enabled) the one-off build of the Dynamo environment."""
        threads = [threading.Thread(target=self.logs.run, args=(stop,), daemon=True, name="operator-sim/logs")]
        if self.enabled:
            threads.append(threading.Thread(target=self._build_env, daemon=True, name="operator-sim/env"))
        else:
            self._env_error = "serving disabled"
            self._env_ready.set()
        for t in threads:
            t.start()
        return threads

    def _build_env(self) -> None:
        try:
            self._env = dynamo_env.ensure_dynamo_env(self.dynamo_version, log=lambda m: self.log(f"operator-sim: {m}"))
        except Exception as exc:  # any failure: serve nothing, keep reconciling the rest
            self._env_error = f"{type(exc).__name__}: {exc}"
            self.log(f"operator-sim: the Dynamo environment cannot be built, DGDs get no serving "
                     f"(port-forward/logs): {self._env_error}")
        self._env_ready.set()
        with self._lock:
            keys = list(self._states)
        for key in keys:
            self.requeue(key)

    def readiness(self, plan: Plan) -> tuple[bool, str] | None:
        """None when serving does not gate readiness, else (ready, reason) for served components."""
        if not (plan.serves and self.enabled) or self._env_error is not None:
            return None
        with self._lock:
            st = self._states.get(plan.key)
        if st is None or st.state == "starting":
            return False, "frontend not serving yet"
        if st.state == "ready" and st.serving is not None and st.serving.alive():
            return True, ""
        if st.state == "ready":
            return False, "frontend process exited"
        return None  # failed to start: logged; the Deployments alone decide

    def ensure(self, plan: Plan) -> None:
        """Start the DGD's serving (in the background) unless it runs with the same settings."""
        if not (plan.serves and self.enabled):
            return
        with self._lock:
            st = self._states.get(plan.key)
            if st is not None and st.signature == plan.signature and (
                    st.state in ("starting", "failed") or (st.serving is not None and st.serving.alive())):
                return
            old = st
            new = ServingState(plan.signature)
            self._states[plan.key] = new
        threading.Thread(target=self._start, args=(plan, new, old), daemon=True,
                         name=f"operator-sim/serve {plan.key}").start()

    def _fault_for(self, key: str) -> str | None:
        """The serving fault for ``<ns>/<dgd>``, keyed ``<ns>.<dgd>`` in the ConfigMap (data keys
        cannot hold '/'; a namespace holds no '.', so the first dot splits the key unambiguously)."""
        cm = self.kube.get_or_none("ConfigMap", FAULTS_CONFIGMAP[1], FAULTS_CONFIGMAP[0])
        value = ((cm or {}).get("data") or {}).get(key.replace("/", ".", 1))
        if value and value not in dynamo_runtime.FAULTS:
            self.log(f"operator-sim: {FAULTS_CONFIGMAP[0]}/{FAULTS_CONFIGMAP[1]} names unknown fault {value!r} "
                     f"for {key}; known: {', '.join(dynamo_runtime.FAULTS)}")
            return None
        return value or None

    def _workdir(self, key: str) -> Path:
        namespace, name = key.split("/", 1)
        return self.root / namespace / name

    def _serial(self, key: str) -> threading.Lock:
        """The lock that keeps one DGD's starts and stops from overlapping: they share the DGD's
        working directory and its pid file, and a start running beside a stop (a DGD replaced or
        deleted while its serving started) overwrote or removed the other's record, which let its
        processes outlive `cluster down`."""
        with self._lock:
            return self._serials.setdefault(key, threading.Lock())

    def _start(self, plan: Plan, st: ServingState, old: ServingState | None) -> None:
        with self._serial(plan.key):
            again = self._start_alone(plan, st, old)
        if again:
            clock.sleep(1.0)
        self.requeue(plan.key)

    def _start_alone(self, plan: Plan, st: ServingState, old: ServingState | None) -> bool:
        """Start ``st``'s serving (the DGD's lock held); True when it should be tried again."""
        workdir = self._workdir(plan.key)
        serving: dynamo_runtime.Serving | None = None
        try:
            if old is not None and old.serving is not None:
                old.serving.stop()
            with self._lock:
                if self._states.get(plan.key) is not st:
                    return False  # replaced while it waited: the newer start stops what is left
            self._env_ready.wait()
            if self._env is None:
                st.state = "failed"
                return False
            fault = self._fault_for(plan.key)
            serving = self._adopt(workdir, plan, fault)
            if serving is None:
                dynamo_runtime.stop_all(workdir)
                started = clock.monotonic()
                serving = dynamo_runtime.start_serving(plan.key, plan.served_model, workdir,
                                                       router_mode=plan.router_mode, env=self._env, fault=fault)
                self.log(f"operator-sim: serving {plan.key} ({plan.served_model}, {plan.router_mode}"
                         f"{', fault ' + fault if fault else ''}) on 127.0.0.1:{serving.port}")
                serving.wait_model_listed(60.0)
                self.log(f"operator-sim: {plan.key} lists {plan.served_model} "
                         f"{clock.monotonic() - started:.1f}s after start")
            serving.worker_instance_ids()  # also writes the gaie sidecar's log line (hex id)
            with self._lock:
                current = self._states.get(plan.key) is st
            if not current:  # the DGD went away (or changed) while we were starting
                serving.stop()
                return False
            st.serving = serving
            st.state = "ready"
        except Unavailable as exc:  # the API server restarting: not this DGD's failure, start it again
            self.log(f"operator-sim: serving {plan.key} could not start yet ({type(exc).__name__}: {exc}); "
                     "starting again")
            with self._lock:
                if self._states.get(plan.key) is st:
                    del self._states[plan.key]
            return True
        except Exception as exc:  # logged; the DGD keeps being reported from its Deployments
            if serving is not None:  # started but never ready: its processes serve nothing
                serving.stop()
            st.state = "failed"
            st.error = f"{type(exc).__name__}: {exc}"
            self.log(f"operator-sim: serving {plan.key} failed to start: {st.error}")
        return False

    def _adopt(self, workdir: Path, plan: Plan, fault: str | None) -> dynamo_runtime.Serving | None:
        """A serving a previous controllers process started for the same DGD and settings."""
        if not (workdir / "serving.json").is_file():
            return None
        try:
            serving = dynamo_runtime.load_serving(workdir)
        except SuiteError:
            return None
        same = (serving.served_model, serving.router_mode, serving.fault) == (plan.served_model, plan.router_mode,
                                                                            fault)
        return serving if same and serving.alive() else None

    def forget(self, key: str) -> None:
        """The DGD is gone: stop its processes (no finalizer: the DELETED event is enough)."""
        with self._lock:
            st = self._states.pop(key, None)
        workdir = self._workdir(key)

        def stop() -> None:
            with self._serial(key):
                if st is not None and st.serving is not None:
                    st.serving.stop()
                with self._lock:
                    back = key in self._states
                if back:  # a DGD of the same name came back: its start stops whatever is left first
                    return
                self.logs.forget(workdir)
                stopped = dynamo_runtime.stop_all(workdir) if workdir.is_dir() else []
            if st is not None or stopped:
                self.log(f"operator-sim: {key} deleted: serving stopped")

        threading.Thread(target=stop, daemon=True, name=f"operator-sim/stop {key}").start()

    def cleanup_orphans(self, alive: set[str]) -> None:
        """Servings left by an earlier controllers process whose DGD (key) is not in ``alive`` are stopped."""
        for workdir in sorted(p for p in self.root.glob("*/*") if p.is_dir()):
            key = f"{workdir.parent.name}/{workdir.name}"
            if key not in alive:
                with self._serial(key):
                    stopped = dynamo_runtime.stop_all(workdir)
                if stopped:
                    self.log(f"operator-sim: stopped orphaned serving {key} ({len(stopped)} process groups)")

    def wire_pods(self, plan: Plan) -> None:
        """PortForward + Logs for each served pod, once its serving is up."""
        if not (plan.serves and self.enabled):
            return
        with self._lock:
            st = self._states.get(plan.key)
        serving = st.serving if st is not None and st.state == "ready" else None
        if serving is None:
            return
        served = set(plan.served_components())
        pods, _ = self.kube.list_items("Pod", plan.namespace, label_selector=f"{LABEL_DGD_NAME}={plan.name}")
        for item in pods:
            meta = item["metadata"]
            component = (meta.get("labels") or {}).get(LABEL_COMPONENT, "")
            if meta.get("deletionTimestamp") or not (item.get("spec") or {}).get("nodeName"):
                continue
            if self._wired.get(meta["uid"]) == serving.port:
                continue
            pod = {**item, "apiVersion": "v1", "kind": "Pod"}
            files: dict[str, Path] = {}
            if component in served:
                self.kube.apply(port_forward_object(pod, FRONTEND_PORT, serving.port), plan.namespace)
                files[MAIN_CONTAINER] = self.logs.mirror(serving.frontend_log if plan.frontends
                                                         else serving.worker_log)
                sidecar = plan.sidecars.get(component)
                if sidecar:
                    files[sidecar] = self.logs.mirror(serving.sidecar_log)
            else:
                files[MAIN_CONTAINER] = self.logs.mirror(serving.worker_log)
            self.kube.apply(logs_object(pod, files), plan.namespace)
            self._wired[meta["uid"]] = serving.port
