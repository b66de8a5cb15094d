"""The bad-input corpus: one folder per case under ``tests/security/corpus/``; adding a case is adding a folder.

A case folder holds the offending file(s) and ``case.yaml``::

    about: one line saying what is wrong
    input: the handoff field / option the files replace (documentation)
    files:                      # EXP_ROOT-relative destination: file of this folder
      inputs/user_provided_dgd.yaml: dgd.yaml
    iteration: 0                # --iter on the command line (default 0); null: not passed
    stage: 1                    # stage the sample's iteration-1 candidate first (iteration > 0 cases)
    rehash: true                # default: hashes recomputed after the files are placed, so the
                                # content is judged, not the hash (false: the hash check must catch it)
    args: [--iter=-1]           # extra command-line options
    symlinks: {inputs/model-cache.yaml: "${OUTSIDE}/model-cache.yaml"}
    generate: {path: inputs/user_provided_dgd.yaml, pad_to_mb: 50}   # grow a file (not kept in git)
    exit: 1                     # expected exit status (4: usage error before any directory, 1: step 1)
    ledger: blocked             # a DGD refused for its own reasons once its hashes verified: a blocked
                                # ledger in artifacts/deploy-iter-000 lists them (default: nothing on disk)
    expect: ["--dgd inputs/user_provided_dgd.yaml", "fix:"]   # substrings of the one error line
    max_seconds: 30             # optional bounds of the whole run (wall clock, peak RSS)
    max_rss_mb: 300

Case files are templates (``string.Template``, unknown ``$names`` left alone): ``${CONTEXT}``,
``${NAMESPACE}``, ``${EXP_ROOT}``, ``${OUTSIDE}`` (a directory outside EXP_ROOT holding valid copies of
the sample inputs), ``${DGD_CONTRACT_PATH}``, ``${DGD_SHA256}``, ``${WORKLOAD_SHA256}`` and
``${CANDIDATE_SHA256}`` (hashes as placed, so a case can be wrong in exactly one way).
"""

from __future__ import annotations

import shutil
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy_suite import yamlio
from deploy_suite.fixtures.experiments.make_experiment import set_line, stage_candidate
from deploy_suite.model.files import sha256_file
from tests import support

CORPUS = Path(__file__).with_name("corpus")
DEFAULT_MAX_SECONDS = 90.0  # a loaded 2-core CI machine; the bomb cases set tighter bounds
DEFAULT_MAX_RSS_MB = 400.0


def case_names() -> list[str]:
    return sorted(p.name for p in CORPUS.iterdir() if (p / "case.yaml").is_file())


@dataclass(frozen=True)
class Case:
    name: str
    folder: Path
    spec: dict[str, Any]

    @classmethod
    def load(cls, name: str) -> Case:
        folder = CORPUS / name
        spec: dict[str, Any] = yamlio.load_one(folder / "case.yaml")
        return cls(name, folder, spec)

    @property
    def iteration(self) -> int | None:
        value = self.spec.get("iteration", 0)
        return None if value is None else int(value)

    @property
    def expect(self) -> list[str]:
        return [str(s) for s in self.spec["expect"]]

    @property
    def exit(self) -> int:
        return int(self.spec["exit"])

    @property
    def max_seconds(self) -> float:
        return float(self.spec.get("max_seconds", DEFAULT_MAX_SECONDS))

    @property
    def max_rss_mb(self) -> float:
        return float(self.spec.get("max_rss_mb", DEFAULT_MAX_RSS_MB))


def _render(text: str, values: dict[str, str]) -> str:
    return string.Template(text).safe_substitute(values)


@dataclass
class Materialized:
    exp_root: Path
    handoff: Path
    args: list[str]
    values: dict[str, str] = field(default_factory=dict)


def materialize(case: Case, dest: Path, context: str, namespace: str) -> Materialized:
    """A fresh copy of the sample experiment with the case's files in place."""
    exp = support.write_experiment(dest / "scratch", context=context, namespace=namespace)
    root = exp.exp_root
    outside = dest / "outside"
    outside.mkdir(parents=True)
    for sample in ("user_workload.yaml", "inputs/user_provided_dgd.yaml", "inputs/model-cache.yaml",
                   "inputs/model-download.yaml"):
        shutil.copyfile(root / sample, outside / Path(sample).name)
    values = {"CONTEXT": context, "NAMESPACE": namespace, "EXP_ROOT": str(root), "OUTSIDE": str(outside),
              "DGD_CONTRACT_PATH": f"runs/{root.name}/inputs/user_provided_dgd.yaml"}
    candidate = root / "artifacts" / "deploy-iter-000" / "next-candidate" / "deploy-draft.yaml"
    if case.spec.get("stage"):
        (root / "artifacts" / "deploy-iter-000").mkdir(parents=True)
        stage_candidate(root, int(case.spec["stage"]))
    files: dict[str, str] = dict(case.spec.get("files") or {})
    late = {d for d in files if d == "user_workload.yaml" or Path(d).name.startswith("handoff")}

    def place(dest_rel: str) -> None:
        target = root / dest_rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.exists():
            target.unlink()
        target.write_text(_render((case.folder / files[dest_rel]).read_text(encoding="utf-8"), values),
                          encoding="utf-8")

    for dest_rel in sorted(set(files) - late):
        place(dest_rel)
    generate = case.spec.get("generate")
    if generate:  # before hashing: the generated file is the handed-off one
        _pad(root / str(generate["path"]), int(generate["pad_to_mb"]) << 20)
    rehash = bool(case.spec.get("rehash", True))
    workload = root / "user_workload.yaml"
    values["DGD_SHA256"] = sha256_file(root / "inputs" / "user_provided_dgd.yaml")
    if rehash and "user_workload.yaml" not in files:
        set_line(workload, "dgd_sha256", f'"{values["DGD_SHA256"]}"')
    if "user_workload.yaml" in files:
        place("user_workload.yaml")
    values["WORKLOAD_SHA256"] = sha256_file(workload)
    if candidate.is_file():
        values["CANDIDATE_SHA256"] = sha256_file(candidate)
    if rehash:
        for handoff_name, dgd_key in (("handoff-iter-000.yaml", "DGD_SHA256"), ("handoff-iter-001.yaml",
                                                                                 "CANDIDATE_SHA256")):
            path = root / handoff_name
            if handoff_name not in files and path.is_file():
                set_line(path, "workload_sha256", f'"{values["WORKLOAD_SHA256"]}"')
                set_line(path, "dgd_sha256", f'"{values[dgd_key]}"')
    for dest_rel in sorted(late - {"user_workload.yaml"}):
        place(dest_rel)
    for link, target in (case.spec.get("symlinks") or {}).items():
        path = root / link
        if path.exists() or path.is_symlink():
            path.unlink()
        path.symlink_to(_render(str(target), values))
    handoff = root / str(case.spec.get("handoff") or f"handoff-iter-{case.iteration or 0:03d}.yaml")
    args = [_render(str(a), values) for a in case.spec.get("args") or []]
    return Materialized(root, handoff, args, values)


def _pad(path: Path, size: int) -> None:
    """Grow a YAML file whose last line opens a mapping (``data:``) to ``size`` bytes of valid YAML."""
    line = "  pad-{:08d}: \"" + "x" * 100 + "\"\n"
    with path.open("a", encoding="utf-8") as handle:
        index = 0
        written = path.stat().st_size
        while written < size:
            text = "".join(line.format(index + i) for i in range(1000))
            handle.write(text)
            written += len(text)
            index += 1000


@dataclass(frozen=True)
class CaseResult:
    case: Case
    run: support.SuiteRun
    events: list[dict[str, Any]]  # the run's audited requests

    @property
    def mutations(self) -> list[dict[str, Any]]:
        return support.mutations(self.events)


def run_case(case: Case, dest: Path, context: str, namespace: str, kubeconfig: str, audit_log: str) -> CaseResult:
    """Materialize the case, run the real suite on it, and collect its audited requests."""
    mat = materialize(case, dest, context, namespace)
    agent = support.new_user_agent(f"security-corpus/{case.name}")
    run = support.run_suite(mat.exp_root, case.iteration, kubeconfig, dest / "reports", *mat.args,
                            handoff=mat.handoff, user_agent=agent, timeout=max(case.max_seconds * 3, 120.0))
    generate = case.spec.get("generate")
    if generate:  # 50 MB of padding need not outlive the run
        (mat.exp_root / str(generate["path"])).unlink()
    kube = support.sentinel_kube(context, kubeconfig, agent)
    try:
        events = support.audit_events(audit_log, kube, agent)
    finally:
        kube.close()
    return CaseResult(case, run, events)
