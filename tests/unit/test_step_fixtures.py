"""The steps' session ``kube`` fixture (fixtures/steps.py) closes its client when the session ends:
the Kubernetes client's connection pool is released by the run, not by the garbage collector."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

CONFTEST = """
import json
from pathlib import Path
from types import SimpleNamespace

from deploy_suite.access.kube import Kube
from deploy_suite.plugins.keys import RUN_KEY

pytest_plugins = ["deploy_suite.fixtures.steps"]
EVENTS = Path({events!r})


def pytest_configure(config):
    # Only what the fixture reads of the lifecycle's step context after step 1.
    config.stash[RUN_KEY] = SimpleNamespace(context=SimpleNamespace(
        prepared=object(), kube_context="offline-demo", settings=SimpleNamespace(kubeconfig={kubeconfig!r}),
        recorder=SimpleNamespace(command=lambda record: None), exp_root=Path({exp_root!r})))
    real_close = Kube.close

    def close(self):
        with EVENTS.open("a") as f:
            f.write("closed\\n")
        real_close(self)

    Kube.close = close
"""

TESTS = """
from pathlib import Path

EVENTS = Path({events!r})


def used(kube):
    with EVENTS.open("a") as f:
        f.write(f"used {{kube.context}}\\n")


def test_first(kube):
    used(kube)


def test_second(kube):
    used(kube)
"""


def test_the_session_kube_is_closed_once_after_its_last_test(pytester: pytest.Pytester, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig.yaml"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "offline-demo",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "not-a-real-token"}}],
        "contexts": [{"name": "offline-demo", "context": {"cluster": "c", "user": "u"}}],
    }))
    exp_root = tmp_path / "runs" / "exp-1"
    exp_root.mkdir(parents=True)
    events = tmp_path / "events.txt"
    names = {"events": str(events), "kubeconfig": str(kubeconfig), "exp_root": str(exp_root)}
    pytester.makeconftest(CONFTEST.format(**names))
    pytester.makepyfile(test_uses_kube=TESTS.format(**names))
    # Only the steps' fixtures: the suite's own plugins (pytest11) would want a whole Lifecycle.
    result = pytester.runpytest_subprocess("-p", "no:deploy_suite.plugins", "-p", "no:cacheprovider", "-W", "error")
    result.assert_outcomes(passed=2)
    assert events.read_text().splitlines() == ["used offline-demo", "used offline-demo", "closed"]
