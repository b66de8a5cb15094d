"""Step 1: judge the handed-off inputs, then create the deployment directory.

Everything here is local file work; nothing talks to a cluster. The order is the integrity
order docs/procedure.md's step table gives: (1) the workload's SHA-256 is recomputed before anything in
it is read, (2) the DGD's SHA-256 is recomputed before any copy, (3) at iteration 0 the assigned
DGD must be the workload's ``deployment.dgd_path`` / ``dgd_sha256``. Only then is
``<EXP_ROOT>/artifacts/deploy-iter-NNN/applied_manifests/`` created and filled with run-scoped
copies under stable names. Every refusal is an ``InputError`` naming the input and the fix.

The rules themselves live in their own modules: option values in ``deploy_suite.procedure.settings``, the
workload schema in ``deploy_suite.model.workload``, what a manifest may hold in
``deploy_suite.model.manifests``, the deployment directory (lock, resume, copies, the previous
deployment) in ``deploy_suite.procedure.workspace``; recording the result is ``deploy_suite.procedure.context``'s job.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy_suite import clock
from deploy_suite.constants import DGD_KIND
from deploy_suite.errors import InputError, RefusedCandidate
from deploy_suite.model.files import (
    FileRef,
    check_sha,
    display,
    existing_file,
    hash_of,
    inside_exp_root,
    is_inside,
    rel,
    sha256_file,
    shown_path,
)
from deploy_suite.model.manifests import (
    Incompatibility,
    check_support_documents,
    dgd_incompatibilities,
    dgd_precision,
    select_download_variant,
)
from deploy_suite.model.portable import CopyPatch, portable_copy
from deploy_suite.model.workload import MISSING, WORKLOAD_FIX, Workload, contract_dgd_candidates, lookup, parse_workload
from deploy_suite.procedure import compat_patches
from deploy_suite.procedure.compat_patches import Patch
from deploy_suite.procedure.settings import Settings, SupportInput, deploy_id
from deploy_suite.procedure.workspace import AppliedManifest, PreviousDeployment, Resume, claim, fill, read_previous
from deploy_suite.record.ledger import Ledger, atomic_write_text
from deploy_suite.record.resume import Carried
from deploy_suite.vocab import BlockerClass
from deploy_suite.yamlio import dump_all, load_all, load_yaml_documents

STEP = "step1_inputs"


@dataclass(frozen=True)
class Prepared:
    """Result of step 1: everything later steps need about the inputs."""

    exp_root: Path
    deploy_root: Path
    workload_file: FileRef
    workload: Workload
    source_dgd: FileRef
    dgd_name: str
    precision: tuple[str, ...]
    manifests: tuple[AppliedManifest, ...]
    unselected: tuple[FileRef, ...]
    previous: PreviousDeployment | None
    resume: Resume | None
    iteration: int = 0
    # What an earlier run of this iteration recorded (a rerun): its own apply, retire, allocations.
    carried: Carried = field(default_factory=Carried)
    # Handed-over compatibility patches applied in this step, and those already applied earlier.
    patches: tuple[Patch, ...] = ()
    patches_skipped: tuple[str, ...] = ()
    # Step 1's own patches of the copies, what an exported manifest carries (deploy_suite.model.portable).
    portable: tuple[tuple[Path, CopyPatch], ...] = ()

    def record(self, ledger: Ledger) -> Mapping[str, Any]:
        """Step 1's ledger fields, and its evidence card."""
        exp_root = self.exp_root
        for name, value in (
            ("kube_context", self.workload.kube_context), ("namespace", self.workload.namespace),
            ("dgd_name", self.dgd_name), ("user_workload", self.workload_file.record()),
            ("source_dgd", self.source_dgd.record()),
            ("applied_manifests", [m.record(exp_root) for m in self.manifests]),
            ("previous_deployment", self.previous.record(exp_root) if self.previous else None),
        ):
            ledger.set_section(name, value)
        for patch in self.patches:
            ledger.add_patch(patch.as_dict())
        if self.resume is not None:
            ledger.note_resume(kept=list(self.resume.kept), recopied=list(self.resume.recopied),
                               removed=list(self.resume.removed))
        for copy, found in self.portable:
            ledger.add_patch({"file": rel(copy, exp_root), "at": clock.iso_now(), **found.record()})
        download = next((m for m in self.manifests if m.type == "model-download"), None)
        evidence: dict[str, Any] = {
            "deploy_root": rel(self.deploy_root, exp_root),
            "directory": "resumed" if self.resume is not None else "created",
            "checks": [
                "user_workload.yaml SHA-256 recomputed and equal to the handoff",
                "user_workload.yaml is one mapping with the required fields",
                "assigned DGD SHA-256 recomputed and equal to the handoff before copying",
                *(["assigned DGD equals the contract's deployment.dgd_path and dgd_sha256"]
                  if self.iteration == 0 else
                  ["previous deployment ledgers read: DGD, context and namespace to retire" if self.previous else
                   "previous deployment ledgers read: no earlier iteration applied a DGD, nothing to retire"]),
                "the workload and the DGD resolve inside EXP_ROOT",
                "sources re-hashed after copying: unchanged",
            ],
            # Handed over explicitly from elsewhere (the recipe's checkout): recorded by path and hash.
            "outside_exp_root": {m.type: m.source.record() for m in self.manifests
                                 if not is_inside(m.source.path, exp_root)},
            "portable_patches": [f"{rel(copy, exp_root)}: {found.change}" for copy, found in self.portable],
            "dgd_precision_tokens": list(self.precision),
            "handed_over_patches": [p.change for p in self.patches],
            **({"handed_over_patches_already_applied": list(self.patches_skipped)} if self.patches_skipped else {}),
            "copies": {m.type: {"copy": rel(m.path, exp_root), "from": m.source.rel} for m in self.manifests},
        }
        if download is not None:
            evidence["download_variant"] = {
                "chosen": download.source_name,
                "not_chosen": [u.path.name for u in self.unselected],
            }
        return evidence

    def manifest_paths(self) -> dict[str, Path]:
        return {m.type: m.path for m in self.manifests}

    def sources(self) -> tuple[FileRef, ...]:
        """Every handed-off file, for the end-of-run check that none was modified."""
        return (self.workload_file, *(m.source for m in self.manifests if m.type != "deploy"),
                self.source_dgd, *self.unselected)


# (deploy_root, resumed, earlier ledger or None)
OnDirectory = Callable[[Path, bool, Mapping[str, Any] | None], None]


def prepare(settings: Settings, on_directory: OnDirectory | None = None) -> Prepared:
    """Step 1, whole: judge every input, then create and fill the deployment directory.

    ``on_directory(deploy_root, resumed, earlier_ledger)`` is called once the directory exists and
    before anything is copied into it, so the caller can write the first ledger there.
    """
    exp_root_input = f"--exp-root {settings.exp_root}"
    if not settings.exp_root.is_dir():
        raise InputError(exp_root_input, "directory not found",
                         "pass the experiment root runs/<EXP_ID> that user-interviewer created")
    exp_root = Path(os.path.realpath(settings.exp_root))
    superseded = exp_root / "SUPERSEDED"
    if superseded.exists():
        raise InputError(exp_root_input, "is marked SUPERSEDED (the workload was corrected after handoff)",
                         "use the new EXP_ROOT named in its SUPERSEDED file")

    # (1) The workload: hash first, then read.
    workload_name = f"--workload {display(settings.workload, exp_root)}"
    hand_fix = f"ask {settings.provenance} to re-issue the handoff; never edit the hash to match"
    workload_real = existing_file(settings.workload, exp_root, workload_name,
                                   "pass the exact <EXP_ROOT>/user_workload.yaml path")
    workload_sha = check_sha(workload_real, settings.workload_sha256, workload_name, hand_fix)
    workload = parse_workload(load_yaml_documents(workload_real, workload_name, WORKLOAD_FIX), workload_name)
    workload_file = FileRef(workload_real, rel(workload_real, exp_root), workload_sha)

    # (2) The assigned DGD: hash before anything is copied.
    dgd_name_in = f"--dgd {display(settings.dgd, exp_root)}"
    dgd_real = existing_file(settings.dgd, exp_root, dgd_name_in, "pass the assigned DGD manifest path")
    dgd_sha = check_sha(dgd_real, settings.dgd_sha256, dgd_name_in, hand_fix)
    dgd_docs = load_yaml_documents(dgd_real, dgd_name_in, hand_fix)
    source_dgd = FileRef(dgd_real, rel(dgd_real, exp_root), dgd_sha)

    # (3) Iteration 0: the assigned DGD is the contract's baseline.
    if settings.iteration == 0:
        _check_contract(workload, exp_root, dgd_real, dgd_sha, dgd_name_in)

    # The DGD's own reasons not to deploy it, judged once its hashes verified: all of them are
    # recorded in a blocked ledger of this candidate's directory (claimed below), not one line alone.
    incompatible, dgd_model = dgd_incompatibilities(dgd_docs, dgd_name_in)

    # Support manifests: only what the handoff contains.
    precision = dgd_precision(dgd_model) if dgd_model is not None else set()
    chosen, unselected = _choose_support(settings.support, exp_root, workload, precision)

    previous = None
    if settings.iteration > 0:
        assert settings.prev_deploy_root is not None  # settings refuse iteration > 0 without it
        previous = read_previous(settings.prev_deploy_root, exp_root, settings.iteration)

    # The directory: exactly one per candidate; a rerun of the same candidate resumes in it.
    deploy_root = exp_root / "artifacts" / deploy_id(settings.iteration)
    inside_exp_root(deploy_root, exp_root, f"{exp_root_input} artifacts/")
    if previous is not None and previous.root == Path(os.path.realpath(deploy_root)):
        raise InputError("--prev-deploy-root", "is this iteration's own deployment directory",
                         f"pass <EXP_ROOT>/artifacts/{deploy_id(settings.iteration - 1)}")
    # One run per deployment directory: claimed under its lock before anything is written in it.
    resuming, earlier = claim(deploy_root, settings.iteration, dgd_sha)
    if on_directory is not None:
        on_directory(deploy_root, resuming, earlier)
    if incompatible:
        raise Refused(exp_root, deploy_root, workload_file, workload, source_dgd,
                      _dgd_name(dgd_docs), tuple(incompatible)).error(dgd_name_in)
    assert dgd_model is not None  # no incompatibility: the model was built
    manifests, resume = fill(deploy_root, source_dgd, chosen, resuming, earlier, exp_root)
    # What an exported manifest carries from its cluster, dropped first: the caller's fix addresses the copy.
    portable = _portable(manifests, workload.namespace)
    # The caller's Kubernetes-only fix, in place in the copies (and the earlier ones a re-made copy lost).
    handed, skipped = compat_patches.apply_handed(
        settings.compat_patch, {m.type: m.path for m in manifests}, set(resume.recopied) if resume else set(),
        [p for p in (earlier or {}).get("patches") or [] if isinstance(p, Mapping)], exp_root)
    # The sources must still be what was handed over once copied (nobody edited them meanwhile).
    for ref in (workload_file, source_dgd, *chosen.values()):
        if sha256_file(ref.path) != ref.sha256:
            raise InputError(f"source {ref.rel}", "changed while it was being copied",
                             "stop whatever edits the handed-off files and rerun")
    dgd_name = dgd_model.name
    return Prepared(
        exp_root=exp_root,
        deploy_root=deploy_root,
        workload_file=workload_file,
        workload=workload,
        source_dgd=source_dgd,
        dgd_name=dgd_name,
        precision=tuple(sorted(precision)),
        manifests=tuple(manifests),
        unselected=tuple(unselected),
        previous=previous,
        resume=resume,
        iteration=settings.iteration,
        carried=Carried.of(earlier if resuming else None),
        patches=tuple(handed),
        patches_skipped=tuple(skipped),
        portable=tuple(portable),
    )


def _check_contract(workload: Workload, exp_root: Path, dgd_real: Path, dgd_sha: str, dgd_name_in: str) -> None:
    """Iteration 0 deploys the baseline: the contract's ``deployment.dgd_path`` and ``dgd_sha256``."""
    contract_paths = contract_dgd_candidates(workload.dgd_path, exp_root)
    if not any(Path(os.path.realpath(p)) == dgd_real for p in contract_paths):
        raise InputError(
            dgd_name_in,
            f"is not the contract's deployment.dgd_path {workload.dgd_path!r} (iteration 0 deploys the baseline)",
            "pass --dgd <EXP_ROOT>/inputs/user_provided_dgd.yaml as recorded in user_workload.yaml",
        )
    if dgd_sha != workload.dgd_sha256:
        raise InputError(
            dgd_name_in,
            f"SHA-256 {dgd_sha} differs from the contract's deployment.dgd_sha256 {workload.dgd_sha256}",
            "deploy the baseline user_workload.yaml records, or ask user-interviewer for a new EXP_ROOT",
        )


def _dgd_name(documents: Sequence[Any]) -> str | None:
    """The DGD's ``metadata.name`` when the file names one DGD (a refused file may not)."""
    dgds = [d for d in documents if isinstance(d, dict) and d.get("kind") == DGD_KIND]
    name = lookup(dgds[0], "metadata.name") if len(dgds) == 1 else MISSING
    return name if isinstance(name, str) and name else None


def _portable(manifests: Sequence[AppliedManifest], namespace: str) -> list[tuple[Path, CopyPatch]]:
    """What each run-scoped copy carries from the cluster it was exported from, or another namespace,
    dropped or retargeted in the copy (``deploy_suite.model.portable``); the copy is rewritten only when
    something changed. A resumed copy already patched needs nothing: no second record."""
    done: list[tuple[Path, CopyPatch]] = []
    for manifest in manifests:
        docs = load_all(manifest.path, f"run-scoped copy {manifest.path.name}", "rerun: the copy is made again")
        patches = portable_copy(docs, namespace)
        if patches:
            atomic_write_text(manifest.path, dump_all([d for d in docs if d is not None]))
            done.extend((manifest.path, p) for p in patches)
    return done


@dataclass(frozen=True)
class Refused:
    """Step 1's partial result for a candidate refused for reasons of its own after its hashes
    verified: the inputs as judged and every incompatibility, for the ``blocked`` ledger the
    optimization loop reads ("the deployer records the blocking incompatibilities")."""

    exp_root: Path
    deploy_root: Path
    workload_file: FileRef
    workload: Workload
    source_dgd: FileRef
    dgd_name: str | None
    problems: tuple[Incompatibility, ...]

    def error(self, input_name: str) -> RefusedCandidate:
        """The one line the step stops with: the first incompatibility, counting the others."""
        problem, fix = self.problems[0]
        more = len(self.problems) - 1
        shown = problem if not more else f"{problem} (and {more} more incompatibilities in the ledger)"
        return RefusedCandidate(input_name, shown, fix, result=self)

    def record(self, ledger: Ledger) -> Mapping[str, Any]:
        """The inputs' sections and every incompatibility but the first (the step's own blocker, last)."""
        for name, value in (
            ("kube_context", self.workload.kube_context), ("namespace", self.workload.namespace),
            ("dgd_name", self.dgd_name), ("user_workload", self.workload_file.record()),
            ("source_dgd", self.source_dgd.record()),
        ):
            ledger.set_section(name, value)
        input_name = f"--dgd {self.source_dgd.rel}"
        for problem, fix in self.problems[1:]:
            ledger.add_blocker(STEP, BlockerClass.INPUT, f"{input_name}: {problem}", fix)
        return {"deploy_root": rel(self.deploy_root, self.exp_root),
                "incompatibilities": [{"problem": p, "fix": f} for p, f in self.problems]}


def _choose_support(
    support: Sequence[SupportInput], exp_root: Path, workload: Workload, precision: set[str]
) -> tuple[dict[str, FileRef], list[FileRef]]:
    """One manifest per type (the download variant matching the model precision of the DGD and
    of ``preferences.precision``), and the download variants not chosen."""
    by_type: dict[str, list[FileRef]] = {}
    for item in support:
        by_type.setdefault(item.type, []).append(_support_ref(item, exp_root))
    for kind in ("model-cache", "model-validate"):
        if len(by_type.get(kind, [])) > 1:
            names = ", ".join(r.rel for r in by_type[kind])
            raise InputError(f"--support {kind}", f"handed over {len(by_type[kind])} times ({names})",
                             f"pass exactly one {kind} manifest")
    chosen = {k: v[0] for k, v in by_type.items() if k != "model-download"}
    unselected: list[FileRef] = []
    if "model-download" in by_type:
        pick = select_download_variant(by_type["model-download"], precision, workload.precision)
        chosen["model-download"] = pick
        unselected = [v for v in by_type["model-download"] if v is not pick]
    return chosen, unselected


def _support_ref(item: SupportInput, exp_root: Path) -> FileRef:
    # Handed over explicitly, a support manifest may live outside EXP_ROOT (the recipe's checkout):
    # recorded by its absolute path and SHA-256 (docs/procedure.md, "Support manifests from outside EXP_ROOT").
    name = f"--support {item.type}={display(item.path, exp_root)}"
    real = existing_file(item.path, exp_root, name, f"pass the {item.type} manifest that was handed over",
                         anywhere=True)
    sha = hash_of(real, name)
    check_support_documents(load_yaml_documents(real, name, "fix the YAML or hand over the right file"), name,
                            item.type)
    return FileRef(real, shown_path(real, exp_root), sha)


def verify_sources(prepared: Prepared) -> list[str]:
    """Problems found when re-hashing every handed-off source (empty = untouched)."""
    problems = []
    for ref in prepared.sources():
        try:
            actual = sha256_file(ref.path)
        except OSError as exc:
            problems.append(f"{ref.rel}: cannot be read at the end of the run ({exc.strerror})")
            continue
        if actual != ref.sha256:
            problems.append(f"{ref.rel}: modified during the run (SHA-256 {actual}, was {ref.sha256})")
    return problems
