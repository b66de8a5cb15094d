"""Command-line options of the suite, and the one ``Settings`` object built from them.

All options sit in one ``pytest --help`` group, "dynamo-deploy-suite". Every value defaults to
``None`` here so that a value given on the command line can be told apart from one in the
``--handoff`` file; the documented defaults are applied by ``deploy_suite.settings``. An option
that cannot be right (negative iteration, unknown provenance, malformed hash, ...) is a
``pytest.UsageError``: one ``ERROR:`` line, exit status 4, before any directory exists and
before anything talks to a cluster.

When the run deploys, this plugin also points pytest-html and JUnit XML at
``reports/deploy-iter-NNN.{html,xml}`` unless ``--html`` / ``--junitxml`` were given.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy_suite.errors import InputError
from deploy_suite.runstate import step_for_module
from deploy_suite.settings import (
    DEFAULT_SMOKE_PROMPT,
    OPTION_KEYS,
    PROVENANCES,
    SUPPORT_TYPES,
    TIMEOUT_OPTIONS,
    Settings,
    Timeouts,
    build_settings,
)

GROUP = "dynamo-deploy-suite"
SETTINGS_KEY = pytest.StashKey[Settings]()
REPORT_PATHS_KEY = pytest.StashKey[dict[str, Path]]()


def _dest(option: str) -> str:
    # A prefix keeps our dests apart from other plugins' (pytest-kind has its own cluster options).
    return "ds_" + option.lstrip("-").replace("-", "_")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(GROUP, "dynamo-deploy-suite: deploy one DynamoGraphDeployment per iteration")
    add = group.addoption
    # No argparse `type=`: argparse would refuse "--iter=one" with a usage dump and no fix;
    # deploy_suite.settings judges the raw text and says how to fix it.
    add("--iter", dest=_dest("--iter"), metavar="N", default=None,
        help="zero-based optimization iteration; the run writes <EXP_ROOT>/artifacts/deploy-iter-NNN/")
    add("--handoff", dest=_dest("--handoff"), metavar="FILE", default=None,
        help="YAML file holding any of these options (keys: iteration, exp_root, workload, workload_sha256, "
             "dgd, dgd_sha256, provenance, prev_deploy_root, support, storage_class, smoke_prompt, "
             "served_model, kubeconfig, keep_on_failure, review_id, timeouts); command-line values override "
             "it; its relative paths are relative to the file's directory. Write path options as --opt=PATH: "
             "pytest picks its rootdir from bare paths on the command line before it knows these options")
    add("--exp-root", dest=_dest("--exp-root"), metavar="PATH", default=None,
        help="experiment root runs/<EXP_ID> created by user-interviewer; every input must resolve inside it")
    add("--workload", dest=_dest("--workload"), metavar="PATH", default=None,
        help="exact path of <EXP_ROOT>/user_workload.yaml")
    add("--workload-sha256", dest=_dest("--workload-sha256"), metavar="HEX", default=None,
        help="SHA-256 of user_workload.yaml as handed over (recomputed before it is read)")
    add("--dgd", dest=_dest("--dgd"), metavar="PATH", default=None,
        help="the assigned DGD manifest (iteration 0: <EXP_ROOT>/inputs/user_provided_dgd.yaml)")
    add("--dgd-sha256", dest=_dest("--dgd-sha256"), metavar="HEX", default=None,
        help="SHA-256 of the assigned DGD as handed over (recomputed before it is copied)")
    add("--provenance", dest=_dest("--provenance"), metavar="ROLE", default=None,
        help=f"who handed the DGD over: {' (iteration 0) | '.join(PROVENANCES)} (iteration > 0)")
    add("--prev-deploy-root", dest=_dest("--prev-deploy-root"), metavar="PATH", default=None,
        help="previous deployment root (required when N > 0); its ledger names the DGD to retire")
    add("--support", dest=_dest("--support"), metavar="TYPE=PATH", action="append", default=None,
        help=f"handed-off support manifest, repeatable; TYPE is one of {', '.join(SUPPORT_TYPES)}; several "
             "model-download variants may be given (the one matching the DGD's precision is used)")
    add("--storage-class", dest=_dest("--storage-class"), metavar="NAME", default=None,
        help="storage class, only when a model-cache PVC needs one")
    add("--smoke-prompt", dest=_dest("--smoke-prompt"), metavar="TEXT", default=None,
        help=f"prompt of the smoke chat completion (default: {DEFAULT_SMOKE_PROMPT!r})")
    add("--served-model", dest=_dest("--served-model"), metavar="NAME", default=None,
        help="served model name for the smoke test (default: read from the DGD)")
    add("--kubeconfig", dest=_dest("--kubeconfig"), metavar="PATH", default=None,
        help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config); the context always comes from "
             "user_workload.yaml kubernetes.kube_context, never the current-context")
    add("--keep-on-failure", dest=_dest("--keep-on-failure"), action="store_const", const=True, default=None,
        help="leave what a failed run created in place for debugging (recorded in the ledger)")
    add("--reports-dir", dest=_dest("--reports-dir"), metavar="DIR", default=None,
        help="where deploy-iter-NNN.html/.xml go unless --html/--junitxml are given (default: <rootdir>/reports)")
    defaults = Timeouts()
    for option, key in TIMEOUT_OPTIONS.items():
        what = key.removesuffix("_s").replace("_", " ")
        add(option, dest=_dest(option), metavar="SECONDS", default=None,
            help=f"bound of the {what} wait (default: {getattr(defaults, key):.0f})")


def suite_mode(config: pytest.Config) -> bool:
    """The run deploys only when asked to; otherwise every plugin of the suite stays inert."""
    return config.getoption(_dest("--iter")) is not None or config.getoption(_dest("--handoff")) is not None


def _cli_values(config: pytest.Config) -> dict[str, object]:
    values: dict[str, object] = {key: config.getoption(_dest(opt)) for opt, key in OPTION_KEYS.items()}
    values.update({key: config.getoption(_dest(opt)) for opt, key in TIMEOUT_OPTIONS.items()})
    return values


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
    reports_dir = (config.invocation_params.dir / reports_dir_opt) if reports_dir_opt else config.rootpath / "reports"
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if suite_mode(config):
        return
    if any(step_for_module(item.path.name) for item in items):
        raise pytest.UsageError(
            "--iter: missing; fix: the deployment steps need --iter N and the handoff inputs "
            "(--handoff FILE or the options of the dynamo-deploy-suite group in pytest --help)"
        )
