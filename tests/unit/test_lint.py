"""`make lint` keeps CONTRIBUTING.md's size and repetition rules: the module size cap
(scripts/check_module_size.py) and pylint's duplicate-code check, configured in pyproject.toml.

Each check runs on a small tree made here, once with the rule broken and once kept, exactly as the
Makefile runs it on the real one; the last tests prove the Makefile's lint target runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SIZE_SCRIPT = REPO / "scripts" / "check_module_size.py"
PYPROJECT = REPO / "pyproject.toml"
OVER_CAP = "over the 600-line module cap (CONTRIBUTING.md, Rules)"


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def module_of(lines: int) -> str:
    return "".join(f"X{i} = {i}\n" for i in range(lines))


def check_size(cwd: Path, *roots: str) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, str(SIZE_SCRIPT), *roots], cwd)


def test_a_module_over_600_lines_fails_the_size_check_naming_it(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "fits.py").write_text(module_of(600))
    (tmp_path / "pkg" / "sub" / "big.py").write_text(module_of(601))
    result = check_size(tmp_path, "pkg")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [f"pkg/sub/big.py: 601 lines, {OVER_CAP}"]


def test_modules_at_the_cap_pass_the_size_check(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "fits.py").write_text(module_of(600))
    (tmp_path / "pkg" / "data.txt").write_text(module_of(700))  # only Python modules count
    result = check_size(tmp_path, "pkg")
    assert (result.returncode, result.stdout) == (0, "")


def test_a_linked_folder_is_checked_once_and_named_where_it_is(tmp_path: Path) -> None:
    # The layout of the package: deploy_suite/plugins -> ../plugins, both roots passed by `make lint`.
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "big.py").write_text(module_of(650))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "plugins").symlink_to("../plugins")
    result = check_size(tmp_path, "pkg", "plugins")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [f"plugins/big.py: 650 lines, {OVER_CAP}"]


def test_a_missing_root_is_an_error_not_a_pass(tmp_path: Path) -> None:
    result = check_size(tmp_path, "no_such_package")
    assert result.returncode == 2
    assert "no such path: no_such_package" in result.stderr


def test_the_real_tree_keeps_the_cap() -> None:
    result = check_size(REPO, "deploy_suite", "plugins", "fixtures")
    assert (result.returncode, result.stdout) == (0, "")


def function(name: str, body: list[str]) -> str:
    # The signature and the return line differ from one function to the other: only the body repeats.
    lines = [f"def {name}(a: int, b: int) -> int:", *(f"    {line}" for line in body), f"    return a - len({name!r})"]
    return "\n".join(lines) + "\n"


def block(lines: int, comment: str) -> list[str]:
    return [f"a = a * {i} + b  # {comment}" for i in range(lines)]


def check_duplicates(tmp_path: Path, one: str, two: str) -> subprocess.CompletedProcess[str]:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "one.py").write_text('"""One."""\n\n\n' + one)
    (pkg / "two.py").write_text('"""Two."""\n\n\n' + two)
    # The project's settings (pyproject.toml), the command line of the Makefile's lint target.
    return run([sys.executable, "-m", "pylint", f"--rcfile={PYPROJECT}", "--disable=all",
                "--enable=duplicate-code", "pkg"], tmp_path)


def test_a_block_of_six_lines_repeated_fails_the_duplicate_check(tmp_path: Path) -> None:
    # The comments differ: the check ignores them, so this is still the same block.
    result = check_duplicates(tmp_path, function("first", block(6, "x")), function("second", block(6, "y")))
    assert result.returncode != 0
    assert "R0801" in result.stdout
    assert "Similar lines in 2 files" in result.stdout
    assert "==pkg.one:[4:10]" in result.stdout
    assert "==pkg.two:[4:10]" in result.stdout


def test_five_repeated_lines_pass_the_duplicate_check(tmp_path: Path) -> None:
    # Six is the rule (pylint's default would already report five).
    result = check_duplicates(tmp_path, function("first", block(5, "x")), function("second", block(5, "x")))
    assert result.returncode == 0, result.stdout
    assert "R0801" not in result.stdout


@pytest.fixture(scope="module")
def lint_recipe() -> list[str]:
    # `make -n` prints the recipe without running it (nor the venv prerequisite's commands).
    result = run(["make", "--no-print-directory", "-n", "lint", "VENV=.venv-absent"], REPO)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_make_lint_runs_the_size_check_over_the_package_and_its_top_level_folders(lint_recipe: list[str]) -> None:
    assert (".venv-absent/bin/python scripts/check_module_size.py deploy_suite plugins fixtures "
            "offline/deploy_suite_offline") in lint_recipe


def test_make_lint_runs_the_duplicate_check_over_the_package_and_its_top_level_folders(
        lint_recipe: list[str]) -> None:
    assert (".venv-absent/bin/pylint --disable=all --enable=duplicate-code deploy_suite plugins fixtures "
            "offline/deploy_suite_offline") in lint_recipe
