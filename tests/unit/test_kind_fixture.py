"""The kind fixture's session plumbing (deploy_suite_offline.fixtures.kind): kind tests run last, and where Docker is
required a missing engine fails them instead of skipping them. No Docker is touched: PATH holds no
docker CLI in these inner sessions."""

from __future__ import annotations

import pytest

TESTS = """
import pytest

@pytest.mark.kind
def test_a_kind(kind_cluster_offline):
    pass

def test_b_plain():
    pass

@pytest.mark.kind
def test_c_kind_without_cluster():
    pass

def test_d_plain():
    pass
"""

INI = """
[pytest]
markers =
    kind: needs a kind cluster
"""


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, require: str) -> pytest.RunResult:
    pytester.makeini(INI)
    pytester.makepyfile(test_order=TESTS)
    monkeypatch.setenv("PATH", str(pytester.path))  # no docker CLI: docker.available() says why
    monkeypatch.setenv("DEPLOY_SUITE_REQUIRE_KIND", require)
    return pytester.runpytest_subprocess("-p", "deploy_suite_offline.fixtures.kind", "-p", "no:deploy_suite.plugins",
                                         "-p", "no:cacheprovider", "-p", "no:pytest-kind", "-v")


def _order(result: pytest.RunResult) -> list[str]:
    return [line.split("::")[1].split()[0] for line in result.outlines if "test_order.py::" in line]


def test_kind_tests_run_after_the_others_in_their_collected_order(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _run(pytester, monkeypatch, "0")
    assert _order(result) == ["test_b_plain", "test_d_plain", "test_a_kind", "test_c_kind_without_cluster"]
    result.assert_outcomes(passed=3, skipped=1)


def test_a_missing_docker_engine_fails_kind_tests_where_kind_is_required(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _run(pytester, monkeypatch, "1")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*no Docker engine (the docker CLI is not on PATH); fix: run scripts/install-docker*"])
