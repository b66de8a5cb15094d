"""Every bad input of ``tests/security/corpus/`` is refused with one clear line (docs/security.md).

Each case runs the real suite as a user does (``python -m pytest --iter=N --handoff=... --kubeconfig=...``
from the checkout root, reports to a temporary directory) against the offline cluster, with a user
agent of its own (``DEPLOY_SUITE_USER_AGENT``). It must end with

* the case's exit status (4: refused while reading options, before any directory; 1: refused by
  step 1) and exactly one distinct error message, on one line, that names the input first and says
  ``fix:`` (the terminal summary repeats that same line as the reason every later step is skipped:
  it stays one message), and no traceback;
* no request at all from its user agent in the apiserver's audit log (so in particular zero
  mutating requests), no deployment directory, and bounded wall time and peak memory (the 50 MB
  file, the alias bomb and the 10,000-deep nesting are refused in seconds, in tens of MB).

Cases run in a few parallel subprocesses (a module fixture runs the selected ones up front); the
parametrized test then judges each case on its own. Adding a case is adding a folder.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from deploy_suite.access.kube import Kube
from deploy_suite_offline.cluster import OfflineCluster
from tests import support
from tests.security import cases

pytestmark = [pytest.mark.cluster]

PARALLEL = 3  # subprocesses at once: a 2-core machine stays responsive
PWNED = Path("/tmp/deploy-suite-pwned")  # what the !!python/object/apply cases would create
# What the terminal summary puts before a repeated error line.
_PREFIXES = (re.compile(r"^ERROR: "), re.compile(r"^blocked: "),
             re.compile(r"^step\d_\w+\s+skipped\s+\S+\s+blocked by step1_inputs: "))


def the_message(output: str) -> list[str]:
    """Distinct error messages among the lines that carry ``fix:``, summary prefixes removed."""
    messages: list[str] = []
    for line in output.splitlines():
        if "fix:" not in line:
            continue
        message = line.strip()
        for prefix in _PREFIXES:
            message = prefix.sub("", message)
        if message not in messages:
            messages.append(message)
    return messages


def _selected(request: pytest.FixtureRequest) -> list[str]:
    names = []
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if getattr(item, "module", None) is request.module and callspec is not None and "name" in callspec.params:
            names.append(str(callspec.params["name"]))
    return names


@pytest.fixture(scope="module")
def corpus_results(request: pytest.FixtureRequest, offline_cluster: OfflineCluster,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, cases.CaseResult]]:
    """Run every selected case once, PARALLEL at a time, against a namespace that exists (with its
    secret): a case that wrongly got past validation would really deploy, and be caught."""
    info = offline_cluster.info()
    admin: Kube = offline_cluster.kube()
    namespace = support.admin_namespace(admin, "corpus", support.new_canary())
    base = tmp_path_factory.mktemp("corpus")

    def one(name: str) -> cases.CaseResult:
        return cases.run_case(cases.Case.load(name), base / name, offline_cluster.context, namespace,
                              info.kubeconfig, info.audit_log)

    try:
        with ThreadPoolExecutor(PARALLEL) as pool:
            results = {r.case.name: r for r in pool.map(one, _selected(request))}
        yield results
    finally:
        admin.delete("Namespace", namespace)
        admin.close()


def test_the_corpus_has_at_least_40_cases_with_files() -> None:
    names = cases.case_names()
    assert len(names) >= 40, names
    for name in names:
        case = cases.Case.load(name)
        for source in (case.spec.get("files") or {}).values():
            assert (case.folder / source).is_file(), f"{name}: {source} missing"
        assert any("fix:" in needle for needle in case.expect), f"{name}: expect must include 'fix:'"


@pytest.mark.parametrize("name", cases.case_names())
def test_bad_input_is_refused_with_one_clear_line_and_no_cluster_request(
        name: str, corpus_results: dict[str, cases.CaseResult]) -> None:
    result = corpus_results[name]
    case, run = result.case, result.run
    output = run.output
    support.record_figure("corpus", case=name, exit=run.returncode, requests=len(result.events),
                          mutations=len(result.mutations), seconds=round(run.seconds, 2),
                          max_rss_mb=round(run.max_rss_mb, 1))
    assert run.returncode == case.exit, output

    messages = the_message(output)
    if case.spec.get("ledger") == "blocked":
        # Several incompatibilities: the summary lists each blocker of the ledger; the step's own line
        # (the last blocker) names the first and counts the others.
        led = support.read_ledger(run.exp_root / "artifacts" / "deploy-iter-000" / "deployment_ledger.json")
        lines = [f"{b['message']}; fix: {b['fix']}" for b in led["blockers"]]
        assert set(messages) == set(lines), "\n".join(messages) + "\n---\n" + output
        messages = [lines[-1]]
    assert len(messages) == 1, "expected one error message:\n" + "\n".join(messages) + "\n---\n" + output
    message = messages[0]
    assert message.startswith(case.expect[0]), f"the line must name the input first: {message}"
    for needle in case.expect:
        assert needle in message, f"{needle!r} not in: {message}"
    assert "; fix: " in message and message.split("; fix: ", 1)[1].strip(), message
    # One line for a person: no traceback, no pytest assertion excerpt, no "file.py:123:" entries.
    assert "Traceback" not in output, output
    assert not [line for line in output.splitlines() if line.startswith("E   ")], output
    assert not re.search(r"\.py:\d+:", output), output

    # No cluster request at all (so certainly no mutation) and nothing created on disk.
    assert result.mutations == [], [support.describe(e) for e in result.mutations]
    assert result.events == [], [support.describe(e) for e in result.events]
    artifacts = run.exp_root / "artifacts"
    made = {p.name for p in artifacts.iterdir()} if artifacts.is_dir() else set()
    if case.spec.get("ledger") == "blocked":
        # A DGD refused for its own reasons after its hashes verified: its directory holds a blocked
        # ledger listing the incompatibilities, and no copy (docs/procedure.md, "A candidate refused
        # for its own reasons").
        assert made - {"experiment.html"} == {"deploy-iter-000"}, made  # and the experiment page of it
        led = support.read_ledger(artifacts / "deploy-iter-000" / "deployment_ledger.json")
        assert led["status"] == "blocked" and {b["class"] for b in led["blockers"]} == {"input"}, led["blockers"]
        assert not any((artifacts / "deploy-iter-000" / "applied_manifests").iterdir())
    else:
        assert made <= ({"deploy-iter-000"} if case.spec.get("stage") else set()), made
    if case.spec.get("stage"):
        assert not (artifacts / "deploy-iter-000" / "applied_manifests").exists()
    assert not PWNED.exists(), "a YAML tag executed code"

    assert run.seconds < case.max_seconds, f"took {run.seconds:.1f}s"
    assert run.max_rss_mb < case.max_rss_mb, f"peak RSS {run.max_rss_mb:.0f} MB"


def test_a_sentinel_request_of_a_case_user_agent_is_found(offline_cluster: OfflineCluster) -> None:
    """The audit query itself works: without it 'no request' would prove nothing."""
    info = offline_cluster.info()
    agent = support.new_user_agent("security-corpus/probe")
    kube = support.sentinel_kube(offline_cluster.context, info.kubeconfig, agent)
    try:
        kube.get_or_none("Namespace", f"probe-{uuid.uuid4().hex[:6]}")
        events = support.audit_events(info.audit_log, kube, agent)
    finally:
        kube.close()
    assert [(e["verb"], e["objectRef"]["resource"]) for e in events] == [("get", "namespaces")]
