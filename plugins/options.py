"""Command-line options of the suite, the one ``Settings`` object built from them, what a run collects.

All options sit in one ``pytest --help`` group, "dynamo-deploy-suite". Every value defaults to
``None`` here so that a value given on the command line can be told apart from one in the
``--handoff`` file; the documented defaults are applied by ``deploy_suite.procedure.settings``. An option
that cannot be right (negative iteration, unknown provenance, malformed hash, ...) is a
``pytest.UsageError``: one ``ERROR:`` line, exit status 4, before any directory exists and
before anything talks to a cluster.

When the run deploys, this plugin also

* collects the step modules of the installed package (``deploy_suite/steps``) unless test paths
  were given, whatever the current directory, rootdir or ``testpaths``;
* loads no ``conftest.py`` and blocks plugins a deployment never needs (dev-only ones, the
  cache), before they do any work;
* points pytest-html and JUnit XML at ``reports/<EXP_ID>/deploy-iter-NNN.{html,xml}`` unless
  ``--html`` / ``--junitxml`` were given (one folder per experiment, so two experiments run from one
  checkout keep both sets of pages).

pytest picks its rootdir before it knows plugin options, from what looks like a path on the command
line: with ``--exp-root /abs/exp`` (a space) the rootdir can be the experiment itself. So a
deployment trusts a rootdir only where a configuration file set it (the checkout's
``pyproject.toml``) and otherwise roots its test ids where the package lives: both spellings of a
path option behave the same.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from deploy_suite import steps as steps_package
from deploy_suite.errors import InputError
from deploy_suite.procedure.registry import step_for_module
from deploy_suite.procedure.settings import (
    OPTIONS,
    PYTEST,
    RUN,
    Timeouts,
    build_settings,
    handoff_help,
)
from deploy_suite.record.experiment import experiment_id

from .keys import REPORT_PATHS_KEY, SETTINGS_KEY, STEP_IDS_KEY

GROUP = "dynamo-deploy-suite"
STEPS_DIR = Path(steps_package.__file__).resolve().parent
# Plugins a deployment run blocks. hypothesis (the `dev` extra) imports itself for its report header:
# seconds without cached bytecode. The cache would write .pytest_cache into the rootdir, which a path
# option written with a space can make EXP_ROOT; stepwise needs the cache (`-p no:cacheprovider`
# blocks it too).
NOT_FOR_DEPLOYMENTS = ("hypothesispytest", "cacheprovider", "stepwise")


def _dest(option: str) -> str:
    # A prefix keeps our dests apart from other plugins' (a Kubernetes plugin may have a --kubeconfig).
    return "ds_" + option.lstrip("-").replace("-", "_")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(GROUP, "dynamo-deploy-suite: deploy one DynamoGraphDeployment per iteration")
    defaults = Timeouts()
    for row in OPTIONS:
        if row.option is None:
            continue  # handoff only
        text = handoff_help() if row.option == "--handoff" else row.help
        if row.step not in (RUN, PYTEST):
            text = f"{text} (default: {getattr(defaults, str(row.key)):.0f})"
        extra: dict[str, object] = {"const": True} if row.action == "store_const" else {}
        group.addoption(row.option, dest=_dest(row.option), metavar=row.metavar or None, default=None, help=text,
                        action=row.action, **extra)


def _deploys(options: argparse.Namespace) -> bool:
    return getattr(options, _dest("--iter"), None) is not None or getattr(options, _dest("--handoff"), None) is not None


def suite_mode(config: pytest.Config) -> bool:
    """The run deploys only when asked to; otherwise every plugin of the suite stays inert."""
    return _deploys(config.option)


def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # The earliest hook that sees the parsed options: before pytest loads any conftest.py and before
    # any plugin's pytest_configure.
    options = early_config.known_args_namespace
    if not _deploys(options):
        return
    # A deployment is the package's steps and this plugin, nothing of the current directory: without
    # configuration pytest loads the conftest.py files of the current directory and its test*
    # subdirectories (the checkout's tests/conftest.py pulls in the offline cluster's fixtures).
    options.noconftest = True
    for name in NOT_FOR_DEPLOYMENTS:
        early_config.pluginmanager.set_blocked(name)


def _cli_values(config: pytest.Config) -> dict[str, object]:
    return {row.key: config.getoption(_dest(row.option)) for row in OPTIONS if row.option and row.key}


@pytest.hookimpl(tryfirst=True)  # before pytest-html and junitxml read their output paths
def pytest_configure(config: pytest.Config) -> None:
    if not suite_mode(config):
        return
    handoff = config.getoption(_dest("--handoff"))
    try:
        settings = build_settings(
            _cli_values(config),
            invocation_dir=config.invocation_params.dir,
            handoff_path=Path(handoff) if handoff else None,
        )
    except InputError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[SETTINGS_KEY] = settings

    reports_dir_opt = config.getoption(_dest("--reports-dir"))
    # A rootdir pytest derived from path arguments (no configuration file) may be EXP_ROOT itself.
    base = config.rootpath if config.inipath is not None else config.invocation_params.dir
    reports_dir = (config.invocation_params.dir / reports_dir_opt) if reports_dir_opt else base / "reports"
    # One folder per experiment: iteration 0 of a second experiment must not replace the first one's page.
    reports_dir = reports_dir / experiment_id(settings.exp_root)
    _collect_installed_steps(config)
    paths: dict[str, Path] = {}
    if hasattr(config.option, "htmlpath"):
        if not config.option.htmlpath:
            config.option.htmlpath = str(reports_dir / f"{settings.deploy_id}.html")
            # One file that can be mailed or attached to a ticket.
            config.option.self_contained_html = True
        paths["html"] = Path(config.option.htmlpath).absolute()
    if not getattr(config.option, "xmlpath", None):
        config.option.xmlpath = str(reports_dir / f"{settings.deploy_id}.xml")
    paths["junit"] = Path(config.option.xmlpath).absolute()
    config.stash[REPORT_PATHS_KEY] = paths


def _collect_installed_steps(config: pytest.Config) -> None:
    """Without test paths on the command line a deployment runs the installed package's steps."""
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        return
    config.args = [str(STEPS_DIR)]
    # Test ids and JUnit class names are rootdir-relative. A rootdir pytest derived from path arguments
    # (no configuration file) is a common ancestor such as /tmp, which would name a step
    # "ci.deploy_suite.steps..."; one that does not hold the steps names a step by its file alone.
    # pytest's rootdir is its own (decided before any plugin loads): the steps' collectors are given
    # ids rooted where the package lives instead, "deploy_suite/steps/test_step1_inputs.py" from
    # every directory.
    config.stash[STEP_IDS_KEY] = config.inipath is None or not STEPS_DIR.is_relative_to(config.rootpath)


def _step_id(config: pytest.Config, path: Path) -> str | None:
    """The package-rooted id of the installed steps' directory or one of its modules, else ``None``."""
    if not config.stash.get(STEP_IDS_KEY, False) or STEPS_DIR not in (path, path.parent):
        return None
    return path.relative_to(STEPS_DIR.parent.parent).as_posix()


@pytest.hookimpl(tryfirst=True)
def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    node_id = _step_id(parent.config, path)
    # ``nodeid`` is a constructor argument of every pytest node (``Node.from_parent``).
    return pytest.Package.from_parent(parent, path=path, nodeid=node_id) if node_id is not None else None


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    node_id = _step_id(parent.config, module_path)
    return pytest.Module.from_parent(parent, path=module_path, nodeid=node_id) if node_id is not None else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if suite_mode(config):
        return
    if any(step_for_module(item.path.name) for item in items):
        raise pytest.UsageError(
            "--iter: missing; fix: the deployment steps need --iter N and the handoff inputs "
            "(--handoff FILE or the options of the dynamo-deploy-suite group in pytest --help)"
        )
