"""The harness's wheel holds no offline code and works alone (issue 30, item 7).

The harness (``dynamo-deploy-suite``, pyproject.toml) and the offline clusters
(``dynamo-deploy-suite-offline``, offline/pyproject.toml) are two distributions of one checkout.
This builds the harness's wheel from a copy of the checkout (build dependencies from PyPI, as pip
fetches them) and installs it with its dependencies in a fresh virtual environment, outside the
checkout: the wheel must hold no module of ``deploy_suite_offline`` nor any of its package data, and
``deploy_suite``, its pytest plugins and its command line must import and run there, where
``deploy-suite cluster`` says in one line how to install the offline clusters.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_CACHES = shutil.ignore_patterns(".git", ".venv*", "*.egg-info", "__pycache__", ".ruff_cache", ".mypy_cache",
                                 ".import_linter_cache")


def skip(directory: str, names: list[str]) -> set[str]:
    """What a copy of the checkout leaves out: environments and caches anywhere; the reports and
    earlier builds at its top only (``deploy_suite/reports`` is the pages' package)."""
    top = {n for n in names if n in ("reports", "build", "dist")} if Path(directory) == REPO else set()
    return set(_CACHES(directory, names)) | top

pytestmark = pytest.mark.slow


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900, check=False)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    checkout = root / "checkout"
    # symlinks=True: deploy_suite/plugins and deploy_suite/fixtures are links the build follows.
    shutil.copytree(REPO, checkout, symlinks=True, ignore=skip)
    built = run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(root / "dist"), "."], checkout)
    assert built.returncode == 0, built.stderr[-3000:]
    (found,) = (root / "dist").glob("dynamo_deploy_suite-*.whl")
    return found


@pytest.fixture(scope="module")
def clean_venv(wheel: Path) -> Path:
    venv = wheel.parent / "venv"
    made = run([sys.executable, "-m", "venv", str(venv)], wheel.parent)
    assert made.returncode == 0, made.stderr
    installed = run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], wheel.parent)
    assert installed.returncode == 0, installed.stderr[-3000:]
    return venv


def test_the_wheel_holds_the_harness_and_no_offline_module(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names if not n.startswith("dynamo_deploy_suite-")}
    assert top == {"deploy_suite"}, top
    offline = [n for n in names if "offline" in n.lower() or "/kind/" in n or "gomod" in n or "go.mod" in n]
    assert not offline, offline
    # The harness's own package data and the symlinked top-level folders are in.
    for needed in ("deploy_suite/plugins/__init__.py", "deploy_suite/fixtures/steps.py", "deploy_suite/cli.py",
                   "deploy_suite/steps/__init__.py"):
        assert needed in names
    assert any(n.startswith("deploy_suite/record/schemas/") and n.endswith(".json") for n in names)
    # The pages' templates and stylesheets, every one of the checkout's (docs/reports.md).
    folder = "deploy_suite/reports/templates"
    templates = {f"{folder}/{p.name}" for p in (REPO / folder).iterdir()}
    assert templates and templates <= set(names), sorted(templates - set(names))
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "deploy_suite.commands" not in text and "[pytest11]" in text


def test_the_harness_imports_in_a_clean_venv_and_cluster_says_how_to_install(clean_venv: Path) -> None:
    python = str(clean_venv / "bin" / "python")
    # -I: isolated, so neither the checkout nor the user's site-packages is on the path.
    # The pages render there too: their templates are the wheel's package data, Jinja2 its dependency.
    probe = ("import importlib.util, deploy_suite, deploy_suite.plugins, deploy_suite.cli; "
             "from deploy_suite.reports import iteration; "
             "assert importlib.util.find_spec('deploy_suite_offline') is None; "
             "assert '&lt;b&gt;' in iteration.render({'deploy_id': '<b>', 'status': 'ready'}); "
             "print(deploy_suite.__file__)")
    imported = run([python, "-I", "-c", probe], clean_venv)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip().startswith(str(clean_venv))
    cli = str(clean_venv / "bin" / "deploy-suite")
    assert run([cli, "--help"], clean_venv).returncode == 0
    for command in ("cluster", "binaries"):
        asked = run([cli, command, "up"] if command == "cluster" else [cli, command], clean_venv)
        assert asked.returncode == 2
        assert asked.stderr.count("\n") == 1 and "pip install -e ./offline" in asked.stderr, asked.stderr
