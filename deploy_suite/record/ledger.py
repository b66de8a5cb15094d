"""``deployment_ledger.json``: the one record of what a deployment did, written safely.

The ledger is a plain JSON document (the boundary with other roles of the optimization loop),
wrapped here by a small class that offers one method per kind of record (commands, patches,
blockers, ...). Three guarantees live in this module and nowhere else:

* every write is atomic (temp file in the same directory, fsync, rename, fsync of the directory),
  so a run killed at any instant leaves either the previous or the new ledger, both valid JSON;
* no secret value is ever written: a redaction guard, run on every write, refuses anything that
  looks like a Kubernetes Secret ``data`` blob or a token;
* the ledger is validated against ``schemas/ledger.schema.json`` (schema_version 1) where a step
  ends and at session end (``save(check_schema=True)``), so a change in a step that breaks the shape
  fails in the tests that produce ledgers. Not on every write: a run saves some 25 times, and a
  mutation's save must stay cheap (it happens between two cluster requests).

The pytest side (``deploy_suite.plugins.ledger``) decides *when* to write;
``deploy_suite.plugins.lifecycle`` decides *what* the step outcomes are.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from deploy_suite import __version__, clock
from deploy_suite.errors import LedgerError, SecretLeak
from deploy_suite.vocab import BlockerClass, RunStatus, StepOutcome

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

SCHEMA_VERSION = 1
LEDGER_NAME = "deployment_ledger.json"
COMMAND_KINDS = ("read", "mutate", "dry-run", "watch")


class CommandLike(Protocol):
    """What ``deploy_suite.access.kube.CommandRecord`` provides; any object with these attributes works."""

    @property
    def command(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def at(self) -> str: ...
    @property
    def outcome(self) -> str: ...


@cache
def schema() -> dict[str, Any]:
    text = resources.files("deploy_suite").joinpath("record/schemas/ledger.schema.json").read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@cache
def _validator() -> Validator:
    # Imported at the first check (a step's end): a run refused before it has a directory never needs
    # it. The schema itself is checked against its meta-schema by the unit tests, not on every run.
    from jsonschema.validators import validator_for  # noqa: PLC0415

    validator: Validator = validator_for(schema())(schema())
    return validator


def validate(data: Mapping[str, Any]) -> None:
    """Raise LedgerError naming the first offending field when ``data`` breaks the schema."""
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(top level)"
        raise LedgerError(f"ledger breaks its schema at {where}: {first.message[:300]}")


# --- redaction guard -------------------------------------------------------------------------

# A run of base64 long enough to be key material; hex digests (sha256) are excluded separately.
_B64_RUN = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/]{40,}={0,2}(?![A-Za-z0-9+/=_-])")
_HEX = re.compile(r"[0-9a-fA-F]+")
# Token formats as their issuers document them.
_TOKEN_PATTERNS = (
    re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"),  # Hugging Face user access token
    re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),  # JWT / SA token
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"--from-literal=[^=\s]+=\S+"),  # `kubectl create secret ... --from-literal=K=V`
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key id (IAM identifiers: unique ID prefixes)
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b|\bgithub_pat_[A-Za-z0-9_]{40,}\b"),  # GitHub tokens
    re.compile(r"\bnvapi-[A-Za-z0-9_-]{40,}"),  # NVIDIA (NGC / build.nvidia.com) API key
)
# A key naming a credential: its value is judged as a whole, slashes included.
_SECRET_KEY = re.compile(r"(?i)(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH)")


def _random_blob(run: str) -> bool:
    if _HEX.fullmatch(run.rstrip("=")) or len(run) % 4:
        return False
    try:
        base64.b64decode(run, validate=True)
    except (binascii.Error, ValueError):
        return False
    # Mixed case and digits: a random blob, not a long word or an identifier.
    return any(c.islower() for c in run) and any(c.isupper() for c in run) and any(c.isdigit() for c in run)


def _looks_like_secret_blob(text: str, secret_key: bool = False) -> bool:
    """A token format anywhere; a base64 blob. Outside a credential-named key a run with ``/`` is a
    path (``.../snapshots/<40 hex>``, ``org/Model-8B``) judged segment by segment, so only a blob
    segment of its own length counts."""
    for pattern in _TOKEN_PATTERNS:
        if pattern.search(text):
            return True
    if not secret_key and any(_looks_like_secret_blob(m.group(3), True) for m in _SECRET_ASSIGNMENT.finditer(text)):
        return True  # `AWS_SECRET_ACCESS_KEY=...` in a log line: the value as a credential-named key's
    for match in _B64_RUN.finditer(text):
        run = match.group(0)
        parts = [run] if secret_key or "/" not in run else [p for p in run.split("/") if len(p) >= 40]
        if any(_random_blob(p) for p in parts):
            return True
    return False


REDACTED = "[REDACTED]"
# `KEY=value` / `KEY: value` where the key names a credential (an env dump, a config print).
_SECRET_ASSIGNMENT = re.compile(
    r"(?i)\b([A-Z0-9_.-]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|CREDENTIALS?|AUTHORIZATION))"
    r"(\s*[=:]\s*)((?:Bearer\s+)?(?:\"[^\"]*\"|'[^']*'|\S+))")


def redact(text: str) -> str:
    """``text`` (a container log, an event) with every secret-looking value replaced by ``[REDACTED]``:
    the token shapes and key blobs :func:`find_secret` refuses, and values assigned to credential-named keys."""
    text = _SECRET_ASSIGNMENT.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    for pattern in _TOKEN_PATTERNS:
        text = pattern.sub(REDACTED, text)

    def blob(match: re.Match[str]) -> str:
        return REDACTED if _looks_like_secret_blob(match.group(0)) else match.group(0)

    return _B64_RUN.sub(blob, text)


def find_secret(value: Any, path: str = "") -> str | None:
    """Return the JSON path of the first value that looks secret, else None."""
    if isinstance(value, Mapping):
        kind = value.get("kind")
        if kind == "Secret" and (value.get("data") or value.get("stringData")):
            return path or "(top level)"
        for key, item in value.items():
            found = find_secret(item, f"{path}/{key}")
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = find_secret(item, f"{path}/{index}")
            if found:
                return found
        return None
    key = path.rsplit("/", 1)[-1]
    if isinstance(value, str) and _looks_like_secret_blob(value, bool(_SECRET_KEY.search(key))):
        return path or "(top level)"
    return None


# --- atomic file writes ----------------------------------------------------------------------


def dumps(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that readers only ever see the old or the new content."""
    directory = path.parent
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        # Also on KeyboardInterrupt: never leave a half-written temp file behind.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    _fsync_dir(directory)


def _fsync_dir(directory: Path) -> None:
    # The rename is durable only once the directory entry is on disk.
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_json(path: Path, data: Mapping[str, Any], *, check_schema: bool = True) -> None:
    """Guard, validate (unless ``check_schema`` is false) and atomically write a ledger document."""
    leak = find_secret(data)
    if leak:
        raise SecretLeak(f"refused to write {path.name}: the value at {leak} looks like secret material")
    if check_schema:
        validate(data)
    atomic_write_text(path, dumps(data))


def read(path: Path) -> dict[str, Any]:
    """Load a ledger; LedgerError if it is not a JSON object (schema not checked: old versions)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LedgerError(f"{path.name} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise LedgerError(f"{path.name} is not a JSON object")
    return data


def write_torn_down_at(previous_ledger_path: Path, at: str) -> None:
    """Set ``torn_down_at`` in a retired iteration's ledger: the only change allowed there.

    Written once, when the GPUs were freed: an existing value is never overwritten (a rerun would
    otherwise move it later and inflate the GPU-hours), LedgerError instead. Every other key is
    kept as it is; the file is rewritten atomically. The schema is not enforced on the old ledger
    (it may be older than this suite), only the redaction guard.
    """
    data = read(previous_ledger_path)
    if data.get("torn_down_at"):
        raise LedgerError(f"{previous_ledger_path.name} already records torn_down_at {data['torn_down_at']}; "
                          "it is written once and never overwritten")
    data["torn_down_at"] = at
    leak = find_secret(data)
    if leak:
        raise SecretLeak(f"refused to rewrite {previous_ledger_path.name}: {leak} looks like secret material")
    atomic_write_text(previous_ledger_path, dumps(data))


# --- the document ----------------------------------------------------------------------------


def new_document(
    *,
    deploy_id: str,
    iteration: int,
    provenance: str,
    step_names: Sequence[str],
    review_id: str | None = None,
    settings: Mapping[str, Any] | None = None,
    now: str | None = None,
) -> dict[str, Any]:
    """A fresh schema-valid ledger with every section present (null / empty until filled)."""
    at = now or clock.iso_now()
    return {
        "schema_version": SCHEMA_VERSION,
        "suite_version": __version__,
        "deploy_id": deploy_id,
        "status": RunStatus.IN_PROGRESS,
        "iteration": iteration,
        "provenance": provenance,
        "review_id": review_id,
        "created_at": at,
        "updated_at": at,
        "session": {"started_at": at, "finished_at": None, "exit_status": None},
        "current_step": step_names[0] if step_names else None,
        "kube_context": None,
        "namespace": None,
        "dgd_name": None,
        "frontend_service": None,
        "served_model": None,
        "endpoint": None,
        "user_workload": None,
        "source_dgd": None,
        "applied_manifests": [],
        "previous_deployment": None,
        "settings": dict(settings or {}),
        "steps": [new_step(name) for name in step_names],
        "commands": [],
        "patches": [],
        "reapplies": [],
        "limitations": [],
        "blockers": [],
        "diagnostics": [],
        "cleanup_commands": [],
        "retired_previous": None,
        "preflight": None,
        "capacity": None,
        "budget": None,
        "readiness": None,
        "smoke": None,
        "config_engagement": [],
        "hold_decisions": [],
        "resumes": [],
        "gpus_requested": None,
        "allocated_at": None,
        "torn_down_at": None,
        "failed_attempts": [],
        "applied_dgd": None,
        "allocations": [],
    }


def new_step(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "outcome": StepOutcome.NOT_RUN,
        "started_at": None,
        "ended_at": None,
        "duration_s": None,
        "evidence": {},
        "reason": None,
    }


# Sections a later step may set as a whole with Ledger.set_section.
SECTIONS = (
    "endpoint", "retired_previous", "preflight", "capacity", "budget", "readiness", "smoke",
    "gpus_requested", "allocated_at", "torn_down_at", "frontend_service", "served_model", "dgd_name",
    "applied_dgd", "allocations", "teardown",
    # step 1's record of its inputs
    "kube_context", "namespace", "user_workload", "source_dgd", "applied_manifests", "previous_deployment",
)


class Ledger:
    """The in-memory ledger of this run plus where it goes on disk (``path`` None = not yet)."""

    def __init__(self, data: dict[str, Any], path: Path | None = None) -> None:
        self.data = data
        self.path = path

    # -- records appended by steps --
    def record_command(self, record: CommandLike) -> None:
        if record.kind not in COMMAND_KINDS:
            raise LedgerError(f"command kind {record.kind!r} is not one of {COMMAND_KINDS}")
        self.data["commands"].append(
            {"command": record.command, "kind": record.kind, "at": record.at, "outcome": record.outcome}
        )

    def add_patch(self, entry: Mapping[str, Any]) -> None:
        """A compatibility patch (``file`` EXP_ROOT-relative: the run-scoped copy changed in place;
        ``change``, ``reason``, ``at``, and its JSON-pointer ``changes``, ``evidence`` and ``source``)."""
        self.data["patches"].append(dict(entry))

    def add_blocker(self, step: str, category: BlockerClass, message: str, fix: str) -> None:
        """Idempotent: a result that records its blockers and the plugin that records the blocker
        a step raised may both add the same one."""
        entry = {"step": step, "class": category, "message": message, "fix": fix}
        if entry not in self.data["blockers"]:
            self.data["blockers"].append(entry)

    def add_limitation(self, limitation: str | Mapping[str, Any]) -> None:
        self.data["limitations"].append(limitation if isinstance(limitation, str) else dict(limitation))

    def add_diagnostic(self, diagnostic: str | Mapping[str, Any]) -> None:
        self.data["diagnostics"].append(diagnostic if isinstance(diagnostic, str) else dict(diagnostic))

    def add_cleanup_command(self, command: str) -> None:
        if command not in self.data["cleanup_commands"]:
            self.data["cleanup_commands"].append(command)

    def add_hold_decision(self, decision: Mapping[str, Any]) -> None:
        """A decision to keep waiting instead of failing (capacity contention), with its evidence."""
        if dict(decision) not in self.data["hold_decisions"]:
            self.data["hold_decisions"].append(dict(decision))

    def add_config_engagement(self, evidence: str | Mapping[str, Any]) -> None:
        self.data["config_engagement"].append(evidence if isinstance(evidence, str) else dict(evidence))

    def add_failed_attempt(self, step: str, category: str, evidence: Any, diagnosis: str,
                           troubleshooting: Mapping[str, Any] | None = None) -> None:
        """Append-only: counts against the failed-deploy budget even if a retry succeeds. Step 6's
        carry the diagnosis in the troubleshooting shape (docs/triage.md) beside its fields."""
        # The copies it ran with: a rerun of the same copies after the same diagnosis is refused in step 2.
        copies = {m["type"]: m["sha256"] for m in self.data.get("applied_manifests") or []
                  if isinstance(m, Mapping) and "type" in m and "sha256" in m}
        self.data["failed_attempts"].append(
            {"at": clock.iso_now(), "step": step, "category": category, "evidence": evidence, "diagnosis": diagnosis,
             "manifests": copies, **({"troubleshooting": dict(troubleshooting)} if troubleshooting else {})}
        )

    def add_reapply(self, entry: Mapping[str, Any]) -> None:
        self.data["reapplies"].append(dict(entry))

    def note_resume(self, **items: Any) -> None:
        """Add to the ``resumes`` entry of this run (a no-op when the run is not a resume)."""
        if self.data["resumes"]:
            self.data["resumes"][-1].update(items)

    def set_copy_sha256(self, by_type: Mapping[str, str]) -> None:
        """The run-scoped copies' SHA-256 after step 2's compatibility patches (step 1 hashed them before)."""
        for entry in self.data.get("applied_manifests") or []:
            entry["sha256"] = by_type.get(entry["type"], entry["sha256"])

    def set_section(self, name: str, value: Any) -> None:
        if name not in SECTIONS:
            raise LedgerError(f"{name!r} is not a settable section; use one of {SECTIONS}")
        self.data[name] = value

    def add_evidence(self, step: str, items: Mapping[str, Any]) -> None:
        """Items added to a step's evidence card (a step's record of what it saw, never read back by a step)."""
        self.step(step)["evidence"].update(items)

    # -- queries --
    def evidence_of(self, step: str) -> dict[str, Any]:
        """A copy of a step's evidence card as recorded so far."""
        return dict(self.step(step)["evidence"])

    def step(self, name: str) -> dict[str, Any]:
        for entry in self.data["steps"]:
            if entry["name"] == name:
                live: dict[str, Any] = entry  # the live dict: callers edit it in place
                return live
        raise KeyError(name)

    # -- persistence --
    def save(self, *, check_schema: bool = False) -> bool:
        """Write now if the deployment directory exists; returns whether a file was written.

        ``check_schema``: validate first (where a step ends and at session end, see above).
        """
        if self.path is None:
            return False
        self.data["updated_at"] = clock.iso_now()
        write_json(self.path, self.data, check_schema=check_schema)
        return True
