"""The pytest side of the suite: options, step lifecycle and ledger, reports, session fixtures.

Registered by the ``pytest11`` entry point of the installed package (``pyproject.toml``), so pytest
knows the suite's options before it reads the command line: ``--exp-root /abs/exp`` and
``--exp-root=/abs/exp`` are the same option, from the checkout root or any other directory. Where
plugin autoloading is switched off (``PYTEST_DISABLE_PLUGIN_AUTOLOAD``), load it by name:
``pytest -p deploy_suite.plugins ...``; the entry point carries the same name, so both ways
register it once.

This subpackage and ``deploy_suite.steps`` are the only parts of the package that import pytest.
Every module here is inert unless the run deploys (``--iter`` or ``--handoff`` given): the project's
own ``pytest tests``, and any other pytest run in the same environment, is unaffected.

=================  ===========================================================================
``options``        the command-line options, ``Settings``, report paths, which steps to collect
``ledger``         orders and judges the steps, writes ``deployment_ledger.json``; refuses pytest-xdist
``lifecycle``      the run's lifecycle the ledger plugin drives; the steps see only its ``StepContext``
``keys``           the stash keys the plugins share
``report``         the HTML report's summary and evidence, the terminal summary
``fixtures``       ``run``, ``settings``, ``kube``, ``namespace``, ``manifests``, ... for the steps
                   (registered by ``ledger`` in deployment runs only)
=================  ===========================================================================
"""

import pytest

# ``fixtures`` is registered by ``ledger`` when the run deploys.
pytest_plugins = [
    "deploy_suite.plugins.options",
    "deploy_suite.plugins.ledger",
    "deploy_suite.plugins.report",
]


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """pytest-kind, a dependency of the offline clusters (offline/pyproject.toml), registers a
    ``--kubeconfig`` of its own that collides with the suite's. Only its ``KindCluster`` class is used
    (``deploy_suite_offline.fixtures.kind``), so where it is installed its plugin is kept out, from any
    directory, not only the checkout."""
    if pluginmanager.get_plugin("pytest-kind") is None:
        pluginmanager.set_blocked("pytest-kind")
