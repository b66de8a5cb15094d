"""The ``deploy-suite`` console script.

``deploy-suite cluster up | down | status`` manages the offline fake-GPU cluster (the same code
the session fixture uses; ``--provider kind`` for real kubelets in Docker); ``deploy-suite binaries``
builds or reuses the control-plane binaries;
``deploy-suite report LEDGER`` re-renders an HTML report from a ledger, ``deploy-suite report EXP_ROOT``
writes the experiment's page (every iteration on one page); ``deploy-suite triage EVENTS`` triages
events as step 6 does (docs/triage.md); ``deploy-suite status EXP_ROOT [--json]`` says where an
experiment stands and what to do next (docs/status.md). Errors are one line on
stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from deploy_suite.errors import InputError, KubeError
from deploy_suite.offline.errors import ClusterError


def _err(message: str) -> None:
    print(f"deploy-suite: error: {message}", file=sys.stderr, flush=True)


def _log(message: str) -> None:
    print(message, flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="deploy-suite", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cluster = sub.add_parser("cluster", help="manage the offline fake-GPU cluster")
    cluster.add_argument("action", choices=["up", "down", "status"])
    cluster.add_argument("--name", default="dev",
                         help="cluster name; its context is offline-<name> (kind: kind-<name>; default: dev)")
    cluster.add_argument("--pools", default="default",
                         help="node pool layout: a bundled name (default, gpu-taint, multinode, scale-500) "
                              "or a path to a pools YAML file")
    cluster.add_argument("--kubeconfig", type=Path, default=None,
                         help="file the cluster's kubeconfig is written to "
                              "(default: ~/.cache/deploy-suite/kubeconfigs/offline-<name>.yaml)")
    cluster.add_argument("--apiserver-port", type=int, default=0, help="kube-apiserver port on 127.0.0.1 "
                                                                       "(default: a free one)")
    cluster.add_argument("--operator", default=None, metavar="PROFILE",
                         help="operator replica profile for `up`: 0.9, 1.x or latest (default: latest, or what "
                              "the running cluster of this name already uses)")
    cluster.add_argument("--with", dest="orchestrators", action="append", default=None, metavar="API",
                         help="for `up`: install a multinode orchestrator's API, lws or grove (repeatable)")
    cluster.add_argument("--conversion-webhook", action="store_true", default=None,
                         help="for `up` with --operator latest: convert DGDs between v1alpha1 and v1beta1 through "
                              "a TLS conversion webhook")
    cluster.add_argument("--provider", choices=["kwok", "kind"], default=None,
                         help="for `up`: kwok (default: kwok as every kubelet, no Docker) or kind (real kubelets in "
                              "Docker containers, context kind-<name>); status and down find it in the "
                              "cluster's marker")
    cluster.add_argument("--node-image", default=None, metavar="IMAGE",
                         help="with --provider kind: a stock node image (kindest/node:...) instead of the one "
                              "built here")
    cluster.add_argument("--json", action="store_true", help="print the cluster's description as JSON")
    sub.add_parser("binaries", help="build (or reuse) the offline cluster's binaries and print their directory")
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
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["triage"]:  # its own parser: options may come first (argparse's REMAINDER stops at them)
        from deploy_suite import triage_cli  # noqa: PLC0415

        return triage_cli.main(argv[1:])
    if argv[:1] == ["status"]:
        from deploy_suite import status  # noqa: PLC0415

        return status.main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        if args.command == "binaries":
            from deploy_suite.offline.binaries import ensure_binaries  # noqa: PLC0415 (lazy: fast CLI start)

            print(ensure_binaries(_log).directory)
            return 0
        if args.command == "report":
            # A directory is an experiment root (one page for every iteration); a file is one ledger.
            if any(not a.startswith("-") and Path(a).is_dir() for a in args.args[:1]):
                from deploy_suite.reports import experiment as report_experiment  # noqa: PLC0415

                return int(report_experiment.main(args.args))
            from deploy_suite.reports import iteration as report  # noqa: PLC0415

            return int(report.main(args.args))
        from deploy_suite.offline.cluster import OfflineCluster  # noqa: PLC0415
        from deploy_suite.offline.kind import provider  # noqa: PLC0415

        if args.provider == "kind" or (args.provider is None and provider.exists(args.name)):
            cluster: OfflineCluster | provider.KindProvider = provider.KindProvider(
                args.name, args.pools, args.kubeconfig, log=_log, operator=args.operator,
                orchestrators=args.orchestrators, node_image=args.node_image)
        else:
            cluster = OfflineCluster(args.name, args.pools, args.kubeconfig, args.apiserver_port, log=_log,
                                     operator=args.operator, orchestrators=args.orchestrators,
                                     conversion_webhook=args.conversion_webhook)
        if args.action == "up":
            info = cluster.up()
        elif args.action == "down":
            info = cluster.down()
        else:
            info = cluster.status()
            if not args.json:
                print(f"cluster {info.name}: {info.state}" + (
                    f" ({len(info.nodes)} nodes Ready, context {info.context}, kubeconfig {info.kubeconfig})"
                    if info.state == "up" else ""))
            if args.json:
                print(json.dumps(info.as_dict(), indent=2))
            return 0 if info.state == "up" else 3
        if args.json:
            print(json.dumps(info.as_dict(), indent=2))
        return 0
    except (ClusterError, InputError, KubeError) as exc:
        _err(str(exc))
        return 2
    except KeyboardInterrupt:
        _err("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
