"""The ``deploy-suite`` console script.

``deploy-suite report LEDGER`` re-renders an HTML report from a ledger, ``deploy-suite report EXP_ROOT``
writes the experiment's page (every iteration on one page); ``deploy-suite triage EVENTS`` triages
events as step 6 does (docs/triage.md); ``deploy-suite status EXP_ROOT [--json]`` says where an
experiment stands and what to do next (docs/status.md); ``deploy-suite rbac --namespace NS`` prints
the least-privilege Role (and with ``--cluster-reads`` the optional read-only ClusterRole) an admin
applies (docs/security.md). Other distributions add subcommands
through the entry-point group ``deploy_suite.commands``: the offline clusters' (``offline/``)
add ``cluster up | down | status`` and ``binaries`` (docs/offline-cluster.md); without them
installed, asking for either says in one line how to install them. Errors are one line on
stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from deploy_suite.errors import InputError, KubeError, SuiteError

# Each entry point is named after its subcommand and loads ``add(subparsers)``, which adds that
# subcommand's parser with a ``run(args) -> exit status`` default (offline/deploy_suite_offline/cli.py).
COMMANDS = "deploy_suite.commands"
# The subcommands of the offline clusters' distribution, and how to get them when they are missing.
OFFLINE_COMMANDS = ("cluster", "binaries")
OFFLINE_INSTALL = ("the offline clusters are not installed; fix: pip install -e ./offline from the repository's "
                   "checkout (`make venv` installs both)")


def _err(message: str) -> None:
    print(f"deploy-suite: error: {message}", file=sys.stderr, flush=True)


def commands() -> dict[str, EntryPoint]:
    """The subcommands other installed distributions register, by name."""
    return {ep.name: ep for ep in sorted(entry_points(group=COMMANDS), key=lambda ep: ep.name)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="deploy-suite", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for command in commands().values():  # the installed distributions' subcommands (cluster, binaries)
        command.load()(sub)
    report = sub.add_parser("report", help="render an HTML report from a deployment_ledger.json, or the "
                                                 "experiment page from an experiment root directory",
                            description="deploy-suite report LEDGER [-o OUT]: the page of one deployment_ledger.json "
                                        "(default reports/<deploy_id>.html); deploy-suite report EXP_ROOT [-o OUT]: "
                                        "the experiment page (default <EXP_ROOT>/artifacts/experiment.html)")
    report.add_argument("args", nargs=argparse.REMAINDER)
    triage = sub.add_parser("triage", help="triage events (kubectl get events -o json) as step 6 does",
                            add_help=False)
    triage.add_argument("args", nargs=argparse.REMAINDER)
    status = sub.add_parser("status", help="each iteration's outcome, the budgets and the next action of an "
                                           "experiment root (docs/status.md)", add_help=False)
    status.add_argument("args", nargs=argparse.REMAINDER)
    rbac = sub.add_parser("rbac", help="print the least-privilege RBAC an admin applies (docs/security.md)",
                          description="deploy-suite rbac --namespace NS [--service-account NAME | --user NAME] "
                                      "[--cluster-reads] | kubectl apply -f -")
    rbac.add_argument("--namespace", required=True, help="the workload's kubernetes.namespace")
    who = rbac.add_mutually_exclusive_group()
    who.add_argument("--service-account", default="deploy-suite",
                     help="the ServiceAccount the harness runs as, created too (default: deploy-suite)")
    who.add_argument("--user", default=None, help="bind a user the cluster authenticates instead")
    rbac.add_argument("--cluster-reads", action="store_true",
                      help="also the optional read-only ClusterRole (nodes, storage classes, the DGD CRD, ...)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["triage"]:  # its own parser: options may come first (argparse's REMAINDER stops at them)
        from deploy_suite import triage_cli  # noqa: PLC0415

        return triage_cli.main(argv[1:])
    if argv[:1] == ["status"]:
        from deploy_suite import status  # noqa: PLC0415

        return status.main(argv[1:])
    if argv[:1] and argv[0] in OFFLINE_COMMANDS and argv[0] not in commands():
        _err(f"`deploy-suite {argv[0]}`: {OFFLINE_INSTALL}")
        return 2
    args = build_parser().parse_args(argv)
    try:
        if args.command == "rbac":
            from deploy_suite import rbac  # noqa: PLC0415

            print(rbac.render(args.namespace, args.user or args.service_account, user=args.user is not None,
                              cluster=args.cluster_reads), end="")
            return 0
        if args.command == "report":
            # A directory is an experiment root (one page for every iteration); a file is one ledger.
            if any(not a.startswith("-") and Path(a).is_dir() for a in args.args[:1]):
                from deploy_suite.reports import experiment_page  # noqa: PLC0415

                return int(experiment_page.main(args.args))
            from deploy_suite.reports import iteration as report  # noqa: PLC0415

            return int(report.main(args.args))
        try:
            return int(args.run(args))
        except SuiteError as exc:  # a registered subcommand's errors (ClusterError included) are the one tree's
            _err(str(exc))
            return 2
    except (InputError, KubeError) as exc:
        _err(str(exc))
        return 2
    except KeyboardInterrupt:
        _err("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
