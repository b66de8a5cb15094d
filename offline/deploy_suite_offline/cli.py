"""``deploy-suite cluster up | down | status`` and ``deploy-suite binaries``: the offline clusters'
subcommands, registered in the harness's command line through the entry-point group
``deploy_suite.commands`` (``offline/pyproject.toml``; ``deploy_suite.cli`` reads it).

Each entry point adds its subparser and sets ``run(args) -> exit status``; an error is raised
(``ClusterError``, ``InputError``, ``KubeError``: the one error tree) and printed by the harness's
command line as one line with a non-zero exit. Only ``provider.ClusterProvider`` is used: the
provider is picked by ``--provider`` or by the running cluster's marker (``provider.detect``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from deploy_suite_offline.provider import ClusterSpec, Provider, open_cluster

Subparsers = Any  # argparse's _SubParsersAction, private in typeshed


def _log(message: str) -> None:
    print(message, flush=True)


def add_cluster(sub: Subparsers) -> None:
    cluster: argparse.ArgumentParser = sub.add_parser("cluster", help="manage the offline fake-GPU cluster")
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
    cluster.add_argument("--provider", choices=[p.value for p in Provider], default=None,
                         help="for `up`: kwok (default: kwok as every kubelet, no Docker) or kind (real kubelets in "
                              "Docker containers, context kind-<name>); status and down find it in the "
                              "cluster's marker")
    cluster.add_argument("--node-image", default=None, metavar="IMAGE",
                         help="with --provider kind: a stock node image (kindest/node:...) instead of the one "
                              "built here")
    cluster.add_argument("--json", action="store_true", help="print the cluster's description as JSON")
    cluster.set_defaults(run=run_cluster)


def add_binaries(sub: Subparsers) -> None:
    binaries = sub.add_parser("binaries", help="build (or reuse) the offline cluster's binaries and print their "
                                               "directory")
    binaries.set_defaults(run=run_binaries)


def run_binaries(_args: argparse.Namespace) -> int:
    from deploy_suite_offline.binaries import ensure_binaries  # noqa: PLC0415 (lazy: fast CLI start)

    print(ensure_binaries(_log).directory)
    return 0


def run_cluster(args: argparse.Namespace) -> int:
    spec = ClusterSpec(name=args.name, pools=args.pools, kubeconfig=args.kubeconfig, log=_log, operator=args.operator,
                       orchestrators=None if args.orchestrators is None else tuple(args.orchestrators),
                       apiserver_port=args.apiserver_port, conversion_webhook=args.conversion_webhook,
                       node_image=args.node_image)
    cluster = open_cluster(None if args.provider is None else Provider(args.provider), spec)
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
