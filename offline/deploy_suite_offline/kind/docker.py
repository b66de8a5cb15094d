"""The few Docker commands the kind provider needs, run through the ``docker`` CLI.

Every image the provider makes is built here from local files (no registry is reachable), so
this module only imports, runs, copies into, commits, saves and removes. Errors become
``ClusterError`` naming the command and the fix.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from deploy_suite.errors import cut
from deploy_suite_offline.errors import ClusterError

INSTALL_HINT = "run scripts/install-docker (installs Debian's docker.io and starts dockerd)"


def docker_binary() -> str:
    found = shutil.which("docker")
    if found is None:
        raise ClusterError(f"the docker CLI is not on PATH; fix: {INSTALL_HINT}")
    return found


def run(*args: str, input_bytes: bytes | None = None, check: bool = True, timeout: float = 1800.0) -> str:
    cmd = [docker_binary(), *args]
    try:
        done = subprocess.run(cmd, input=input_bytes, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ClusterError(f"`docker {' '.join(args[:3])}` did not finish in {timeout:.0f}s; fix: check dockerd "
                           "(`docker info`)") from exc
    out = done.stdout.decode(errors="replace")
    if check and done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip() or out.strip()
        hint = INSTALL_HINT if "Cannot connect to the Docker daemon" in err else "see the message above"
        raise ClusterError(f"`docker {' '.join(args[:4])}` failed (exit {done.returncode}): {cut(err, 1500)}; "
                           f"fix: {hint}")
    return out


def available() -> str | None:
    """None when dockerd answers, else why not (one line)."""
    if shutil.which("docker") is None:
        return "the docker CLI is not on PATH"
    done = subprocess.run([docker_binary(), "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                          timeout=30, check=False)
    if done.returncode != 0:
        return cut(done.stderr.decode(errors="replace").strip(), 300)
    return None


def image_exists(ref: str) -> bool:
    return bool(run("image", "inspect", "--format", "{{.Id}}", ref, check=False).strip())


def image_size(ref: str) -> int:
    return int(run("image", "inspect", "--format", "{{.Size}}", ref).strip() or 0)


def import_tar(tar: Path, ref: str, changes: list[str]) -> None:
    args = ["import"]
    for change in changes:
        args += ["--change", change]
    run(*args, str(tar), ref)


def start_build_container(image: str, name: str) -> str:
    """A privileged container that sleeps, to exec and copy into, then commit."""
    run("rm", "-f", name, check=False)
    return run("run", "-d", "--privileged", "--name", name, "--entrypoint", "sleep", image, "infinity").strip()


def exec_in(container: str, *cmd: str, input_bytes: bytes | None = None) -> str:
    return run("exec", *(["-i"] if input_bytes is not None else []), container, *cmd, input_bytes=input_bytes)


def copy_in(container: str, src: Path, dest: str) -> None:
    run("cp", str(src), f"{container}:{dest}")


def commit(container: str, ref: str, changes: list[str]) -> None:
    args = ["commit"]
    for change in changes:
        args += ["--change", change]
    run(*args, container, ref)


def remove_container(name: str) -> None:
    run("rm", "-f", "-v", name, check=False)


def save(refs: list[str], dest: Path) -> None:
    run("save", "-o", str(dest), *refs)


def containers(label: str) -> list[dict[str, Any]]:
    out = run("ps", "-a", "--filter", f"label={label}", "--format", "{{json .}}")
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def inspect(ref: str) -> dict[str, Any]:
    data: list[dict[str, Any]] = json.loads(run("inspect", ref))
    return data[0]


def save_into(ref: str, container: str, *cmd: str, timeout: float = 1800.0) -> None:
    """``docker save ref`` streamed into ``cmd`` run in ``container`` (an image import, no file)."""
    save = subprocess.Popen([docker_binary(), "save", ref], stdout=subprocess.PIPE)
    try:
        done = subprocess.run([docker_binary(), "exec", "-i", container, *cmd], stdin=save.stdout,
                              capture_output=True, timeout=timeout, check=False)
    finally:
        if save.stdout is not None:
            save.stdout.close()
        save.wait(timeout=60)
    if done.returncode != 0 or save.returncode != 0:
        raise ClusterError(f"loading {ref} into {container} failed: {cut(done.stderr.decode(errors='replace'), 800)}; "
                           "fix: check the node container is running and has disk space")
