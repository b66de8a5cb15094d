"""Handed-off files: where they are and what their SHA-256 is.

The workload, the assigned DGD, the previous deployment and this run's directory are the
experiment's own files and must resolve inside EXP_ROOT (:func:`inside_exp_root`). A support
manifest is only "explicitly handed off": it may come from the recipe's own checkout, outside
EXP_ROOT, and is then recorded by its absolute path and SHA-256 (:func:`existing_file` with
``anywhere``, :func:`shown_path`; docs/procedure.md, "Support manifests from outside EXP_ROOT").

Shared by step 1's input checks (``deploy_suite.procedure.inputs``), the manifest checks
(``deploy_suite.model.manifests``) and the deployment directory (``deploy_suite.procedure.workspace``). Local
file work only; every refusal is an ``InputError`` naming the input and the fix.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from deploy_suite.errors import InputError


@dataclass(frozen=True)
class FileRef:
    """A handed-off file: its resolved path, its EXP_ROOT-relative path (absolute for a support
    manifest from outside EXP_ROOT) and the SHA-256 seen."""

    path: Path
    rel: str
    sha256: str

    def record(self) -> dict[str, str]:
        return {"path": self.rel, "sha256": self.sha256}


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def rel(path: Path, exp_root: Path) -> str:
    """EXP_ROOT-relative POSIX path (callers have already checked ``path`` is inside)."""
    return Path(os.path.relpath(os.path.realpath(path), os.path.realpath(exp_root))).as_posix()


def is_inside(real: Path, exp_root: Path) -> bool:
    real_root = Path(os.path.realpath(exp_root))
    return real == real_root or real.is_relative_to(real_root)


def shown_path(real: Path, exp_root: Path) -> str:
    """How the ledger names a handed-off file: EXP_ROOT-relative inside it, else its absolute path."""
    return rel(real, exp_root) if is_inside(real, exp_root) else real.as_posix()


def display(path: Path, base: Path) -> str:
    """``path`` as the user would write it from ``base`` (as given when it is not below ``base``)."""
    try:
        return Path(os.path.abspath(path)).relative_to(os.path.abspath(base)).as_posix()
    except ValueError:
        return str(path)


def inside_exp_root(path: Path, exp_root: Path, input_name: str) -> Path:
    """Resolve every symlink; refuse anything that lands outside EXP_ROOT."""
    real_root = Path(os.path.realpath(exp_root))
    real = Path(os.path.realpath(path))
    if real == real_root or real.is_relative_to(real_root):
        return real
    lexical = Path(os.path.normpath(os.path.abspath(path)))
    if lexical.is_relative_to(Path(os.path.normpath(os.path.abspath(exp_root)))) or lexical != real:
        problem = f"{path} is a symlink (or goes through one) to {real}, outside EXP_ROOT {real_root}"
    else:
        problem = f"{path} is outside EXP_ROOT {real_root}"
    raise InputError(input_name, problem,
                     "copy the file into the experiment root: handed-off inputs live inside EXP_ROOT")


def existing_file(path: Path, exp_root: Path, input_name: str, fix: str, *, anywhere: bool = False) -> Path:
    """The resolved path of a regular file inside EXP_ROOT (``anywhere``: wherever it is, for a
    support manifest handed over explicitly), or a refusal."""
    real = Path(os.path.realpath(path)) if anywhere else inside_exp_root(path, exp_root, input_name)
    if not real.exists():
        raise InputError(input_name, f"{display(path, exp_root)}: file not found", fix)
    if not real.is_file():
        raise InputError(input_name, f"{display(path, exp_root)} is not a regular file", fix)
    return real


def hash_of(real: Path, input_name: str) -> str:
    """The file's SHA-256; an unreadable file is a refused input, not a traceback."""
    try:
        return sha256_file(real)
    except OSError as exc:
        raise InputError(input_name, f"cannot be read ({exc.strerror})", "check the file permissions") from exc


def check_sha(real: Path, expected: str, input_name: str, fix: str) -> str:
    """The file's SHA-256, refused unless it is the one handed over."""
    actual = hash_of(real, input_name)
    if actual != expected:
        raise InputError(input_name, f"SHA-256 is {actual}, the handoff says {expected}", fix)
    return actual
