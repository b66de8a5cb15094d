"""Deployment directories: this run's ``<EXP_ROOT>/artifacts/deploy-iter-NNN/`` and the previous one.

Exactly one directory per candidate. A rerun of the same candidate resumes in it (its ledger, or
with none yet the copy of ``deploy.yaml``, names the same DGD SHA-256); another candidate is
refused. One run at a time holds a directory (an exclusive lock). Run-scoped copies are written
atomically under stable names, and on a resume a copy whose source is unchanged is kept as it
is (it may carry recorded compatibility patches). The previous deployment is read from its ledger.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy_suite.errors import DeploymentLocked, InputError, LedgerError
from deploy_suite.model.files import FileRef, display, inside_exp_root, rel, sha256_file
from deploy_suite.model.workload import is_int
from deploy_suite.procedure.settings import Settings, deploy_id
from deploy_suite.record import ledger as ledger_mod
from deploy_suite.record.resume import recorded_uid

STABLE_NAMES = {
    "deploy": "deploy.yaml",
    "model-cache": "model-cache.yaml",
    "model-download": "model-download.yaml",
    "model-validate": "model-validate.yaml",
}


@dataclass(frozen=True)
class AppliedManifest:
    """A run-scoped copy under ``applied_manifests/`` and the source it came from."""

    type: str
    path: Path
    source: FileRef

    @property
    def source_name(self) -> str:
        return self.source.path.name

    def record(self, exp_root: Path) -> dict[str, str]:
        return {
            "type": self.type,
            "path": rel(self.path, exp_root),
            "source_path": self.source.rel,
            "source_name": self.source_name,
            "sha256": sha256_file(self.path),
            "source_sha256": self.source.sha256,
        }


@dataclass(frozen=True)
class Resume:
    """A rerun of the same candidate in its existing directory: what happened to each copy."""

    kept: tuple[str, ...] = ()
    recopied: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


@dataclass(frozen=True)
class PreviousDeployment:
    """What the previous iteration's ledger says must be retired (iteration > 0)."""

    root: Path
    ledger_path: Path
    iteration: int | None
    dgd_name: str
    kube_context: str
    namespace: str
    status: str | None
    applied_uid: str | None = None  # metadata.uid its step 5 recorded (None: an older ledger)
    torn_down_at: str | None = None

    def record(self, exp_root: Path) -> dict[str, Any]:
        return {
            "root": rel(self.root, exp_root),
            "ledger": rel(self.ledger_path, exp_root),
            "iteration": self.iteration,
            "dgd_name": self.dgd_name,
            "kube_context": self.kube_context,
            "namespace": self.namespace,
            "status": self.status,
        }


def read_previous(prev_root: Path, exp_root: Path, iteration: int) -> PreviousDeployment:
    """What iteration ``iteration - 1`` deployed, from its ledger; refused unless it names its DGD."""
    name = "--prev-deploy-root"
    expected = f"<EXP_ROOT>/artifacts/{deploy_id(iteration - 1)}"
    real = inside_exp_root(prev_root, exp_root, name)
    if not real.is_dir():
        raise InputError(name, f"{display(prev_root, exp_root)}: directory not found",
                         f"pass the previous deployment root {expected}")
    ledger_path = real / ledger_mod.LEDGER_NAME
    if not ledger_path.is_file():
        raise InputError(f"{name} ledger", f"{display(ledger_path, exp_root)}: file not found",
                         f"pass the deployment root of iteration {iteration - 1}, which holds its ledger")
    try:
        data = ledger_mod.read(ledger_path)
    except (LedgerError, OSError) as exc:
        raise InputError(f"{name} ledger", str(exc), "pass a deployment root whose ledger this suite wrote") from exc
    values: dict[str, str] = {}
    for key in ("dgd_name", "kube_context", "namespace"):
        value = data.get(key)
        if not isinstance(value, str) or not value:
            raise InputError(f"{name} ledger field {key}", "missing or empty, so the previous DGD cannot be retired",
                             f"pass the deployment root of iteration {iteration - 1} (a ledger that names its DGD)")
        values[key] = value
    prev_iteration = data.get("iteration")
    if is_int(prev_iteration) and prev_iteration != iteration - 1:
        raise InputError(f"{name} ledger field iteration", f"is {prev_iteration}, iteration {iteration} follows "
                         f"iteration {iteration - 1}", f"pass {expected}")
    status = data.get("status")
    return PreviousDeployment(
        root=real,
        ledger_path=ledger_path,
        iteration=prev_iteration if is_int(prev_iteration) else None,
        dgd_name=values["dgd_name"],
        kube_context=values["kube_context"],
        namespace=values["namespace"],
        status=status if isinstance(status, str) else None,
        applied_uid=recorded_uid(data),
        torn_down_at=data.get("torn_down_at") if isinstance(data.get("torn_down_at"), str) else None,
    )


# --- this run's directory ---------------------------------------------------------------------


def copy_atomically(source: Path, dest: Path) -> None:
    # A kill mid-copy must not leave a truncated copy that a resume would keep.
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# Deployment directories this process holds, realpath -> the descriptor carrying the flock. The
# lock is the directory's own flock (no lock file to leave behind or to list in the directory): the
# kernel releases it when the holder exits, so a SIGKILLed run never blocks the rerun. Descriptors
# are close-on-exec, so a child (kubectl port-forward) can never keep a dead run's lock alive.
_HELD: dict[str, int] = {}


def _lock_holder(fd: int) -> str:
    """``pid N`` of the process holding the flock on ``fd``'s inode, from /proc/locks (Linux)."""
    st = os.fstat(fd)
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == inode:
                return f"pid {fields[4]}"
    except OSError:
        pass
    return "another process"


def lock_deployment(deploy_root: Path, iteration: int) -> None:
    """Take the exclusive lock on a deployment directory for this process (re-entrant), or refuse."""
    key = os.path.realpath(deploy_root)
    if key in _HELD:
        return
    fd = os.open(key, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _lock_holder(fd)
        os.close(fd)
        raise DeploymentLocked(
            f"--iter {iteration}",
            f"artifacts/{deploy_id(iteration)} is in use by another run of this iteration ({holder}); "
            "nothing was written",
            "wait for that run to finish (two runs of one iteration would change the same DGD), then rerun",
        ) from None
    _HELD[key] = fd


def release_deployment_lock(deploy_root: Path) -> None:
    """Release the lock taken by :func:`lock_deployment` (at session end); a no-op if not held."""
    fd = _HELD.pop(os.path.realpath(deploy_root), None)
    if fd is not None:
        os.close(fd)


def existing_candidate(deploy_root: Path, dgd_sha256: str) -> tuple[bool, Mapping[str, Any] | None]:
    """Whether an existing deployment directory belongs to this candidate, and its ledger.

    Belongs = its ledger names the same source DGD SHA-256, or (no ledger yet: the earlier run
    died before writing one) it is empty or holds a ``deploy.yaml`` copy with that SHA-256.
    """
    ledger_path = deploy_root / ledger_mod.LEDGER_NAME
    if ledger_path.is_file():
        try:
            data = ledger_mod.read(ledger_path)
        except (LedgerError, OSError):
            return False, None
        source = data.get("source_dgd")
        return isinstance(source, dict) and source.get("sha256") == dgd_sha256, data
    applied = deploy_root / "applied_manifests"
    copy = applied / STABLE_NAMES["deploy"]
    if copy.is_file():
        return sha256_file(copy) == dgd_sha256, None
    # No ledger and no DGD copy: only the empty skeleton of a run that died at once is ours.
    others = [p for p in deploy_root.iterdir() if not p.name.startswith(".") and p != applied]
    return not others and not (applied.is_dir() and any(applied.iterdir())), None


def claim(deploy_root: Path, iteration: int, dgd_sha256: str) -> tuple[bool, Mapping[str, Any] | None]:
    """Create this candidate's directory, or resume in it: ``(resuming, earlier ledger or None)``.

    The lock is taken before anything is written in the directory (the earlier ledger is read
    under it), so a concurrent run of the same iteration stops here having written nothing.
    """
    resuming = deploy_root.exists()
    deploy_root.mkdir(parents=True, exist_ok=True)
    lock_deployment(deploy_root, iteration)
    earlier: Mapping[str, Any] | None = None
    if resuming:
        mine, earlier = existing_candidate(deploy_root, dgd_sha256)
        if not mine:
            raise InputError(
                f"--iter {iteration}",
                f"artifacts/{deploy_id(iteration)} already holds another candidate (a different DGD SHA-256)",
                "a new candidate gets a new iteration: pass the iteration this candidate was handed for",
            )
    (deploy_root / "applied_manifests").mkdir(parents=True, exist_ok=True)
    return resuming, earlier


def own_directory_ledger(settings: Settings) -> Mapping[str, Any] | None:
    """The ledger of this candidate's existing directory, for recording a refusal in it.

    Used when step 1 refuses an input before it could create or claim the directory: a rerun of
    the same candidate (same handed DGD SHA-256) then still gets a ``blocked`` ledger.
    """
    try:
        root = Path(os.path.realpath(settings.exp_root))
        deploy_root = Path(os.path.realpath(settings.deploy_root))
    except OSError:
        return None
    if not deploy_root.is_relative_to(root) or not deploy_root.is_dir():
        return None
    mine, data = existing_candidate(deploy_root, settings.dgd_sha256)
    return data if mine else None


def fill(
    deploy_root: Path,
    source_dgd: FileRef,
    chosen: Mapping[str, FileRef],
    resuming: bool,
    earlier: Mapping[str, Any] | None,
    exp_root: Path,
) -> tuple[list[AppliedManifest], Resume | None]:
    """Copy sources to stable names under ``applied_manifests/``. On a resume, a copy whose source
    is unchanged is kept as it is (it may carry recorded compatibility patches: the latest
    attempted copy) when it is what the ledger recorded last; stale types go."""
    applied = deploy_root / "applied_manifests"
    recorded: dict[str, Mapping[str, Any]] = {}
    if earlier is not None:
        for entry in earlier.get("applied_manifests") or []:
            if isinstance(entry, Mapping) and isinstance(entry.get("type"), str):
                recorded[entry["type"]] = entry
    wanted = {"deploy": source_dgd, **chosen}
    manifests: list[AppliedManifest] = []
    kept: list[str] = []
    recopied: list[str] = []
    for kind, stable in STABLE_NAMES.items():
        if kind not in wanted:
            continue
        source = wanted[kind]
        dest = applied / stable
        before = recorded.get(kind)
        if (resuming and dest.is_file() and before is not None and before.get("source_sha256") == source.sha256
                and _as_recorded(dest, before, _patching_stopped(earlier), exp_root)):
            kept.append(stable)
        else:
            copy_atomically(source.path, dest)
            if sha256_file(dest) != source.sha256:
                raise InputError(f"copy {rel(dest, exp_root)}", "differs from its source after copying",
                                 "check the disk (full or failing?) and rerun")
            if resuming:
                recopied.append(stable)
        manifests.append(AppliedManifest(kind, dest, source))
    removed: list[str] = []
    if resuming:
        for kind, name in STABLE_NAMES.items():
            stale = applied / name
            if kind not in wanted and stale.is_file():
                stale.unlink()  # one file per manifest type used, exactly the handed-off set
                removed.append(name)
    return manifests, (Resume(tuple(kept), tuple(recopied), tuple(removed)) if resuming else None)


def _patching_stopped(earlier: Mapping[str, Any] | None) -> bool:
    """Whether the earlier run stopped inside step 2, which may have patched a copy without recording it yet."""
    steps = (earlier or {}).get("steps") or []
    return any(isinstance(s, Mapping) and s.get("name") == "step2_validate" and s.get("started_at")
               and not s.get("ended_at") for s in steps)


def _as_recorded(copy: Path, recorded: Mapping[str, Any], patching_stopped: bool, exp_root: Path) -> bool:
    """Keep a copy that is what the ledger recorded last (step 1's copy, or step 2's patched one).

    Any other content is an edit no record explains: applying it would deploy what neither the
    handoff nor a recorded patch says, and dropping it would lose someone's work, so it is refused
    (docs/procedure.md, "Resume"). The one exception is a step 2 that stopped before recording its
    patches: the copy is then made again from its source (False) and step 2 redoes and records them."""
    expected, actual = recorded.get("sha256"), sha256_file(copy)
    if actual == expected:
        return True
    if patching_stopped:
        return False
    shown = rel(copy, exp_root)
    raise InputError(
        f"run-scoped copy {shown}",
        f"was edited after the run recorded it (SHA-256 {actual}, the ledger recorded {expected}); an edit with no "
        "patch record is never applied",
        f"remove {shown} and rerun to have it copied again from {recorded.get('source_path')} (step 2 redoes and "
        "records its compatibility patches); a change to the candidate is handed over as a new candidate",
    )
