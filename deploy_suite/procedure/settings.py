"""One frozen settings object per run, built once from the command line and the handoff file.

Grouped dataclasses with documented defaults, built in one place and passed down explicitly, so
no step reads pytest options or the environment and a default is written once. The
pytest side (``deploy_suite.plugins.options``) only collects raw values; everything that
can be judged without opening an input file is judged here, so an option-level mistake is
refused before any directory exists. File contents (hashes, YAML) are judged in step 1
(``deploy_suite.procedure.inputs``).

Precedence: command-line value > handoff file value > documented default. Relative paths on the
command line are relative to the invocation directory; relative paths in a handoff file are
relative to the directory holding that file (so a handoff kept in EXP_ROOT can use EXP_ROOT-
relative paths and be moved together with the experiment).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from deploy_suite.errors import InputError
from deploy_suite.yamlio import MAX_YAML_BYTES, load_yaml_text

PROVENANCES = ("user-interviewer", "hypothesis-challenger")
SUPPORT_TYPES = ("model-cache", "model-download", "model-validate")
DEFAULT_SMOKE_PROMPT = "Simply output the phrase: NVIDIA Dynamo"
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Timeouts:
    """Bounds of every wait in later steps, in seconds (or attempts). The Job, retire and smoke
    defaults are the bounds of the reference procedure, ``bench/reference_procedure.sh``."""

    job_download_s: float = 6000.0  # 200 polls x 30 s
    job_validate_s: float = 3600.0  # 120 polls x 30 s
    retire_s: float = 600.0  # delete --wait --timeout=10m, then the pods' wait of 10m
    pvc_bound_s: float = 600.0  # model-cache PVC (Immediate binding) to reach Bound
    # Step 6 waits while pods advance (docs/procedure.md, "Step 6: slow starts, failures, teardown"): it
    # fails after readiness_no_progress_s without progress, and at readiness_s whatever happens (large
    # models pull and load for long).
    readiness_s: float = 10800.0  # hard cap: DGD Ready, every pod ready, the frontend Service present
    readiness_no_progress_s: float = 900.0  # no pod created, scheduled, pulled, started or ready for this long
    # A container running without restarts and not ready (a model loading) is no "no progress":
    # it has this bound of its own (docs/procedure.md, step 6).
    readiness_loading_s: float = 3600.0
    # The operator writes any reconcile error as state `failed` until its next reconcile
    # (docs/operator-generations.md): an unknown error is a verdict once it persists this long.
    reconcile_error_grace_s: float = 30.0
    smoke_reach_attempts: int = 30  # gate 1: 30 x 2 s for the port-forward to answer
    smoke_reach_interval_s: float = 2.0
    smoke_models_attempts: int = 30  # gate 2: 30 x 10 s for the served model to be listed
    smoke_models_interval_s: float = 10.0
    smoke_request_timeout_s: float = 120.0  # one chat completion (gate 3)
    # Gate 3 asks again while the frontend says the listed model is not routable yet (503 "Model not
    # ready", a 500 or 404 right after registration: docs/operator-generations.md), this long at most.
    smoke_chat_not_ready_s: float = 30.0

    def as_dict(self) -> dict[str, float | int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class SupportInput:
    """A handed-off support manifest: ``type`` is one of SUPPORT_TYPES, ``path`` absolute."""

    type: str
    path: Path


@dataclass(frozen=True)
class Settings:
    """Everything a run needs to know, judged once; steps receive this, never raw options."""

    iteration: int
    exp_root: Path
    workload: Path
    workload_sha256: str
    dgd: Path
    dgd_sha256: str
    provenance: str
    prev_deploy_root: Path | None = None
    support: tuple[SupportInput, ...] = ()
    # The user's own sequence of the support manifests (types), which step 4 follows instead of the
    # procedure's; empty: the procedure's order (docs/procedure.md, step 4).
    support_order: tuple[str, ...] = ()
    storage_class: str | None = None
    smoke_prompt: str = DEFAULT_SMOKE_PROMPT
    served_model: str | None = None
    kubeconfig: Path | None = None
    # A caller's Kubernetes-only fix of the run-scoped copies (docs/procedure.md, "Compatibility patches").
    compat_patch: Path | None = None
    # Why an unchanged candidate may be tried again after a failed attempt (a fix made on the cluster).
    retry_reason: str | None = None
    keep_on_failure: bool = False
    review_id: str | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)

    @property
    def deploy_id(self) -> str:
        return deploy_id(self.iteration)

    @property
    def deploy_root(self) -> Path:
        return self.exp_root / "artifacts" / self.deploy_id

    def public_record(self) -> dict[str, Any]:
        """What the ledger keeps about how the run was configured (no paths outside EXP_ROOT)."""
        return {
            "storage_class": self.storage_class,
            "smoke_prompt": self.smoke_prompt,
            "keep_on_failure": self.keep_on_failure,
            "support_order": list(self.support_order),
            "kubeconfig_given": self.kubeconfig is not None,
            "retry_reason": self.retry_reason,
            "timeouts": self.timeouts.as_dict(),
        }


def deploy_id(iteration: int) -> str:
    return f"deploy-iter-{iteration:03d}"


RUN, PYTEST = "run", "pytest"  # a Settings field; an option the pytest side alone reads


@dataclass(frozen=True)
class Option:
    """One row of :data:`OPTIONS`: a command-line option, a handoff key, or both.

    ``step`` says what the row fills: ``RUN`` a :class:`Settings` field named ``key``; a step's name a
    :class:`Timeouts` field (handoff ``timeouts.<key>``); ``PYTEST`` nothing here (``key`` is ``None``).
    A row without ``option`` is set in the handoff file only. The types and defaults are the
    dataclasses' own fields (mypy checks them); a unit test proves table and fields agree.
    """

    key: str | None
    option: str | None = None
    metavar: str = ""
    help: str = ""
    step: str = RUN
    action: str = "store"  # the argparse action: "append" (repeatable), "store_const" (a flag, const True)


# The one declaration of the suite's options and handoff keys, in `pytest --help`'s order. No argparse
# `type=`: argparse would refuse "--iter=one" with a usage dump and no fix; build_settings judges the raw
# text and says how to fix it.
OPTIONS: tuple[Option, ...] = (
    Option("iteration", "--iter", "N",
           "zero-based optimization iteration; the run writes <EXP_ROOT>/artifacts/deploy-iter-NNN/"),
    Option(None, "--handoff", "FILE", step=PYTEST),  # help: handoff_help(), which lists the keys below
    Option("exp_root", "--exp-root", "PATH",
           "experiment root runs/<EXP_ID> created by user-interviewer; every input must resolve inside it"),
    Option("workload", "--workload", "PATH", "exact path of <EXP_ROOT>/user_workload.yaml"),
    Option("workload_sha256", "--workload-sha256", "HEX",
           "SHA-256 of user_workload.yaml as handed over (recomputed before it is read)"),
    Option("dgd", "--dgd", "PATH",
           "the assigned DGD manifest (iteration 0: <EXP_ROOT>/inputs/user_provided_dgd.yaml)"),
    Option("dgd_sha256", "--dgd-sha256", "HEX",
           "SHA-256 of the assigned DGD as handed over (recomputed before it is copied)"),
    Option("provenance", "--provenance", "ROLE",
           f"who handed the DGD over: {' (iteration 0) | '.join(PROVENANCES)} (iteration > 0)"),
    Option("prev_deploy_root", "--prev-deploy-root", "PATH",
           "previous deployment root (required when N > 0); its ledger names the DGD to retire"),
    Option("support", "--support", "TYPE=PATH",
           f"handed-off support manifest, repeatable; TYPE is one of {', '.join(SUPPORT_TYPES)}; several "
           "model-download variants may be given (the one matching the DGD's precision is used)", action="append"),
    # Handoff only: the user's deployment instructions when they give a specific sequence (step 4).
    Option("support_order", help="support types in the order step 4 applies them, each handed-off type once "
           f"(default: {', '.join(SUPPORT_TYPES)})"),
    Option("storage_class", "--storage-class", "NAME", "storage class, only when a model-cache PVC needs one"),
    Option("smoke_prompt", "--smoke-prompt", "TEXT",
           f"prompt of the smoke chat completion (default: {DEFAULT_SMOKE_PROMPT!r})"),
    Option("served_model", "--served-model", "NAME",
           "served model name for the smoke test (default: read from the DGD)"),
    Option("kubeconfig", "--kubeconfig", "PATH",
           "kubeconfig file (default: $KUBECONFIG or ~/.kube/config); the context always comes from "
           "user_workload.yaml kubernetes.kube_context, never the current-context"),
    Option("compat_patch", "--compat-patch", "FILE",
           "a Kubernetes-only fix of a run-scoped copy, applied in place and recorded: a YAML file with reason, "
           "file (deploy.yaml, model-cache.yaml, ...) and RFC 6902 operations; refused when it touches performance "
           "settings (engine arguments and environment, GPU counts, replicas, routing, the model, the image tag)"),
    Option("retry_reason", "--retry-reason", "TEXT",
           "after a failed attempt, deploy the unchanged candidate again because of this fix made on the cluster "
           "(without it an identical retry is refused: retry only after a concrete fix)"),
    Option("keep_on_failure", "--keep-on-failure", "",
           "keep everything a failed run created for debugging; by default an attempt that can never succeed is "
           "torn down after its evidence is kept (recorded in the ledger)", action="store_const"),
    Option(None, "--reports-dir", "DIR",
           "where <EXP_ID>/deploy-iter-NNN.html/.xml go unless --html/--junitxml are given (default: reports/ in "
           "the rootdir a pytest configuration file sets, such as the checkout's pyproject.toml; else in the "
           "current directory)", step=PYTEST),
    # Handoff only: the challenger's review id travels with the candidate; `timeouts:` holds the rows below.
    Option("review_id"),
    Option("timeouts"),
    # Timeouts, by the step whose wait they bound; the rows with an option have their own command-line one.
    Option("job_download_s", "--timeout-job-download", "SECONDS", "bound of the job download wait", "support"),
    Option("job_validate_s", "--timeout-job-validate", "SECONDS", "bound of the job validate wait", "support"),
    Option("retire_s", "--timeout-retire", "SECONDS", "bound of the retire wait", "retire"),
    Option("pvc_bound_s", step="readiness"),
    Option("readiness_s", "--timeout-readiness", "SECONDS",
           "hard cap of the readiness wait, however the pods progress", "readiness"),
    Option("readiness_no_progress_s", "--timeout-readiness-no-progress", "SECONDS",
           "the readiness wait fails after this long without progress (no pod created, scheduled, image pulled, "
           "container started or ready) while a pod is stuck with no sign of a legitimate wait (held for GPUs, "
           "image pulling, model loading)", "readiness"),
    Option("readiness_loading_s", "--timeout-readiness-loading", "SECONDS",
           "the readiness wait fails when a container has been running without restarts and not ready (a model "
           "loading) for this long (default 3600)", "readiness"),
    Option("reconcile_error_grace_s", step="readiness"),
    Option("smoke_reach_attempts", step="smoke"),
    Option("smoke_reach_interval_s", step="smoke"),
    Option("smoke_models_attempts", step="smoke"),
    Option("smoke_models_interval_s", step="smoke"),
    Option("smoke_request_timeout_s", step="smoke"),
    Option("smoke_chat_not_ready_s", step="smoke"),
)
# Settings keys (the handoff's top-level keys) -> their option; the timeouts with an option.
OPTION_KEYS: dict[str, str] = {o.option: o.key for o in OPTIONS if o.step == RUN and o.option and o.key}
TIMEOUT_OPTIONS: dict[str, str] = {o.option: o.key for o in OPTIONS
                                   if o.step not in (RUN, PYTEST) and o.option and o.key}
HANDOFF_KEYS: tuple[str, ...] = tuple(o.key for o in OPTIONS if o.step == RUN and o.key)
_KEY_TO_OPTION = {v: k for k, v in OPTION_KEYS.items()}


def handoff_help() -> str:
    """``--handoff``'s help: the handoff keys, from the table."""
    return (f"YAML file holding any of these options (keys: {', '.join(HANDOFF_KEYS)}); command-line values "
            "override it; its relative paths are relative to the file's directory")


def _option_for(key: str) -> str:
    return _KEY_TO_OPTION.get(key, key)


def load_handoff(path: Path) -> dict[str, Any]:
    """Read a handoff file: one YAML mapping whose keys are the option names (dashes or underscores)."""
    name = f"--handoff {path}"
    try:
        if path.stat().st_size > MAX_YAML_BYTES:
            raise InputError(name, f"is larger than {MAX_YAML_BYTES} bytes", "pass the handoff file written for "
                             "this iteration (a few lines of `key: value`)")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(name, "file not found", "pass the handoff file written for this iteration") from None
    except UnicodeDecodeError as exc:
        raise InputError(name, "is not UTF-8 text", "pass the handoff file written for this iteration") from exc
    except OSError as exc:
        raise InputError(name, f"cannot be read ({exc.strerror})", "check the path and permissions") from exc
    docs = load_yaml_text(text, name, "fix the YAML syntax")
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise InputError(name, "must hold exactly one YAML mapping", "keep one `key: value` document")
    data: dict[str, Any] = {}
    known = {*HANDOFF_KEYS, "iter"}  # `iter`: the option's spelling, read as `iteration`
    for raw_key, value in docs[0].items():
        key = str(raw_key).replace("-", "_").lstrip("_")
        if key not in known:
            raise InputError(
                name, f"unknown key {raw_key!r}", f"use only: {', '.join(sorted(known - {'iter'}))}"
            )
        data["iteration" if key == "iter" else key] = value
    return data


def build_settings(
    cli: Mapping[str, Any],
    *,
    invocation_dir: Path,
    handoff_path: Path | None = None,
) -> Settings:
    """Merge command-line values (``None`` = not given) over the handoff file and judge them.

    ``cli`` maps Settings keys (the keys of :data:`OPTIONS`) to raw values; ``support`` is a
    list of ``TYPE=PATH`` strings. Raises InputError naming the option and the fix.
    """
    handoff: dict[str, Any] = {}
    handoff_dir = invocation_dir
    if handoff_path is not None:
        handoff_path = _absolute(handoff_path, invocation_dir)
        handoff = load_handoff(handoff_path)
        handoff_dir = handoff_path.parent

    def pick(key: str) -> tuple[Any, Path, str]:
        """Value, the directory its relative paths are relative to, and where it came from."""
        value = cli.get(key)
        if value is not None:
            return value, invocation_dir, _option_for(key)
        if key in handoff and handoff[key] is not None:
            return handoff[key], handoff_dir, f"{_option_for(key)} (from handoff key {key!r})"
        return None, invocation_dir, _option_for(key)

    iteration = _iteration(*pick("iteration"))
    provenance = _provenance(pick("provenance"), iteration)
    exp_root = _required_path(pick("exp_root"), "the experiment root runs/<EXP_ID> created by user-interviewer")
    workload = _required_path(pick("workload"), "the exact <EXP_ROOT>/user_workload.yaml path")
    dgd = _required_path(pick("dgd"), "the assigned DGD manifest path")
    workload_sha = _sha256(pick("workload_sha256"))
    dgd_sha = _sha256(pick("dgd_sha256"))

    prev_value, prev_base, prev_src = pick("prev_deploy_root")
    prev_root: Path | None = None
    if iteration > 0:
        if prev_value in (None, ""):
            raise InputError(
                "--prev-deploy-root",
                f"missing; iteration {iteration} needs the previous deployment root",
                f"pass --prev-deploy-root <EXP_ROOT>/artifacts/{deploy_id(iteration - 1)}",
            )
        prev_root = _absolute(Path(_text(prev_value, prev_src)), prev_base)
    elif prev_value not in (None, ""):
        raise InputError(
            prev_src, "given at iteration 0, which has no previous deployment", "drop --prev-deploy-root"
        )

    kubeconfig = _optional_file(*pick("kubeconfig"), "pass an existing kubeconfig file")
    compat_patch = _optional_file(*pick("compat_patch"), "pass an existing patch file")

    smoke_value, _, smoke_src = pick("smoke_prompt")
    smoke_prompt = DEFAULT_SMOKE_PROMPT if smoke_value is None else _text(smoke_value, smoke_src)
    if not smoke_prompt.strip():
        raise InputError(smoke_src, "is empty", "omit it to use the default prompt")

    support = _support(cli.get("support"), handoff.get("support"), invocation_dir, handoff_dir)
    return Settings(
        iteration=iteration,
        exp_root=exp_root,
        workload=workload,
        workload_sha256=workload_sha,
        dgd=dgd,
        dgd_sha256=dgd_sha,
        provenance=provenance,
        prev_deploy_root=prev_root,
        support=support,
        support_order=_support_order(handoff.get("support_order"), support),
        storage_class=_optional_text(*pick("storage_class")[::2]),
        smoke_prompt=smoke_prompt,
        served_model=_optional_text(*pick("served_model")[::2]),
        kubeconfig=kubeconfig,
        compat_patch=compat_patch,
        retry_reason=_optional_text(*pick("retry_reason")[::2]),
        keep_on_failure=_flag(*pick("keep_on_failure")[::2]),
        review_id=_optional_text(handoff.get("review_id"), "handoff key 'review_id'"),
        timeouts=_timeouts(cli, handoff.get("timeouts")),
    )


def _optional_file(value: Any, base: Path, source: str, fix: str) -> Path | None:
    """An optional option naming an existing file (relative to ``base``); None when not given."""
    if value in (None, ""):
        return None
    path = _absolute(Path(_text(value, source)), base)
    if not path.is_file():
        raise InputError(source, f"{path} is not a file", fix)
    return path


def _absolute(path: Path, base: Path) -> Path:
    path = path.expanduser()
    return path if path.is_absolute() else base / path


def _text(value: Any, source: str) -> str:
    if isinstance(value, str | Path):
        return str(value)
    raise InputError(source, f"must be a string, got {type(value).__name__}", "quote the value")


def _optional_text(value: Any, source: str) -> str | None:
    if value is None or value == "":
        return None
    return _text(value, source)


def _flag(value: Any, source: str) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    raise InputError(source, f"must be true or false, got {value!r}", "use true or false")


def _iteration(value: Any, _base: Path, source: str) -> int:
    if value is None:
        raise InputError("--iter", "missing", "pass --iter N (zero-based optimization iteration)")
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InputError(source, f"must be an integer, got {value!r}", "pass --iter N with N >= 0")
    try:
        number = int(value)
    except ValueError:
        raise InputError(source, f"must be an integer, got {value!r}", "pass --iter N with N >= 0") from None
    if number < 0:
        raise InputError(source, f"is negative ({number})", "iterations are zero-based: pass --iter 0 or more")
    return number


def _provenance(picked: tuple[Any, Path, str], iteration: int) -> str:
    value, _, source = picked
    expected = PROVENANCES[0] if iteration == 0 else PROVENANCES[1]
    if value is None:
        raise InputError("--provenance", "missing", f"pass --provenance {expected} for iteration {iteration}")
    if value not in PROVENANCES:
        raise InputError(source, f"unknown provenance {value!r}", f"use one of: {', '.join(PROVENANCES)}")
    if value != expected:
        raise InputError(
            source,
            f"{value!r} does not match iteration {iteration} (iteration 0 comes from {PROVENANCES[0]}, "
            f"later iterations from {PROVENANCES[1]})",
            f"pass --provenance {expected} or the iteration this candidate was handed for",
        )
    return str(value)


def _required_path(picked: tuple[Any, Path, str], what: str) -> Path:
    value, base, source = picked
    if value in (None, ""):
        raise InputError(source, "missing", f"pass {source.split(' ')[0]} with {what}")
    return _absolute(Path(_text(value, source)), base)


def _sha256(picked: tuple[Any, Path, str]) -> str:
    value, _, source = picked
    if value in (None, ""):
        raise InputError(source, "missing", f"pass {source.split(' ')[0]} with the 64-hex SHA-256 handed over")
    text = _text(value, source).strip().lower()
    if not _SHA256.fullmatch(text):
        raise InputError(
            source,
            f"{value!r} is not a SHA-256 (64 hex characters, got {len(text)})",
            "pass the hex digest exactly as `sha256sum` prints it",
        )
    return text


def _support(
    cli_value: Any, handoff_value: Any, invocation_dir: Path, handoff_dir: Path
) -> tuple[SupportInput, ...]:
    """``--support`` values replace the handoff's list as a whole (no per-item merge)."""
    if cli_value:
        items, base, source = list(cli_value), invocation_dir, "--support"
    elif handoff_value:
        items, base, source = _handoff_support_items(handoff_value), handoff_dir, "--support (from handoff)"
    else:
        return ()
    result: list[SupportInput] = []
    for item in items:
        if isinstance(item, Mapping):
            kind, path = item.get("type"), item.get("path")
        elif isinstance(item, str) and "=" in item:
            kind, path = item.split("=", 1)
        else:
            raise InputError(source, f"{item!r} is not TYPE=PATH", "write e.g. --support model-cache=inputs/x.yaml")
        if kind not in SUPPORT_TYPES:
            raise InputError(source, f"unknown support type {kind!r}", f"use one of: {', '.join(SUPPORT_TYPES)}")
        if not isinstance(path, str) or not path:
            raise InputError(source, f"{kind} has no path", f"write {kind}=PATH")
        result.append(SupportInput(str(kind), _absolute(Path(path), base)))
    return tuple(result)


def _support_order(value: Any, support: tuple[SupportInput, ...]) -> tuple[str, ...]:
    """The handoff's ``support_order``: every handed-off support type exactly once, nothing else."""
    source = "handoff key 'support_order'"
    handed = list(dict.fromkeys(item.type for item in support))
    fix = f"list each handed-off support type once, in the order to apply them: support_order: [{', '.join(handed)}]"
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(source, f"must be a list of support types, got {value!r}"[:200], fix)
    unknown = [v for v in value if v not in SUPPORT_TYPES]
    if unknown:
        raise InputError(source, f"names {unknown[0]!r}, not a support type ({', '.join(SUPPORT_TYPES)})", fix)
    twice = sorted({v for v in value if value.count(v) > 1})
    if twice:
        raise InputError(source, f"names {twice[0]} twice", fix)
    extra, missing = [v for v in value if v not in handed], [t for t in handed if t not in value]
    if extra or missing:
        problem = (f"names {extra[0]}, which was not handed over (--support)" if extra
                   else f"leaves out {missing[0]}, which was handed over (--support)")
        raise InputError(source, problem, fix)
    return tuple(value)


def _handoff_support_items(value: Any) -> list[Any]:
    """Accept a list (``TYPE=PATH`` strings or ``{type, path}``) or a mapping type -> path | [paths]."""
    if isinstance(value, list):
        return value
    if isinstance(value, Mapping):
        items: list[Any] = []
        for kind, paths in value.items():
            for path in paths if isinstance(paths, list) else [paths]:
                if path is not None:  # a type written null: not handed over (docs/procedure.md, "Unknowns")
                    items.append({"type": kind, "path": path})
        return items
    raise InputError("--support (from handoff)", "must be a list or a mapping", "write support: {model-cache: PATH}")


def _timeouts(cli: Mapping[str, Any], handoff_value: Any) -> Timeouts:
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    known = {f.name: f for f in fields(Timeouts)}
    if handoff_value is not None:
        if not isinstance(handoff_value, Mapping):
            raise InputError("handoff key 'timeouts'", "must be a mapping", "write timeouts: {retire_s: 600}")
        for key, value in handoff_value.items():
            if value is None and key in known:
                continue  # null: unknown, the default bound applies
            if key not in known:
                raise InputError(
                    f"handoff key 'timeouts.{key}'", "unknown timeout", f"use one of: {', '.join(known)}"
                )
            values[key] = value
            sources[key] = f"handoff key 'timeouts.{key}'"
    for option, key in TIMEOUT_OPTIONS.items():
        if cli.get(key) is not None:
            value = cli[key]
            # The command line gives text (no argparse type: see deploy_suite.plugins.options).
            if isinstance(value, str):
                try:
                    value = float(value)
                except ValueError:
                    raise InputError(option, f"must be a positive number, got {value!r}",
                                     "give seconds (or attempts) > 0") from None
            values[key] = value
            sources[key] = option
    for key, value in values.items():
        source = sources[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise InputError(source, f"must be a positive number, got {value!r}", "give seconds (or attempts) > 0")
        if known[key].type in ("int", int) and not float(value).is_integer():
            raise InputError(source, f"must be a whole number, got {value!r}", "give a count of attempts")
        values[key] = int(value) if known[key].type in ("int", int) else float(value)
    return Timeouts(**values)
