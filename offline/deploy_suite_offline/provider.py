"""The one interface of an offline cluster, whatever runs its kubelets: ``ClusterProvider``.

Two providers implement it: kwok (``cluster.OfflineCluster``: every kubelet played by kwok, no
Docker) and kind (``kind.provider.KindProvider``: real kubelets in Docker containers). The command
line (``deploy-suite cluster``), the session fixtures and ``make demo`` see only this interface:
they build a cluster with :func:`open_cluster` from one ``ClusterSpec`` and never name either
class, so a third provider is one more branch here (docs/offline-cluster.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from deploy_suite.access.kube import Kube
from deploy_suite_offline.procs import Log

if TYPE_CHECKING:  # the classes below import this module's neighbours; only their types are read here
    from deploy_suite_offline.cluster import ClusterInfo
    from deploy_suite_offline.kind.provider import Creator



class Provider(StrEnum):
    """What plays the kubelets (``deploy-suite cluster up --provider``)."""

    KWOK = "kwok"
    KIND = "kind"


class ClusterProvider(Protocol):
    """A named offline cluster's lifecycle. Each call returns the cluster's description
    (``ClusterInfo``, its ``state`` one of up, down, stale, foreign); errors are ``ClusterError``."""

    name: str
    context: str

    def up(self, wait_timeout: float | None = None) -> ClusterInfo:
        """Create the cluster, or complete one of this name already up; ``wait_timeout`` bounds
        the wait for nodes and CRDs (None: the provider's own default)."""
        ...

    def down(self) -> ClusterInfo:
        """Remove everything this cluster created (processes, containers, state); a cluster it did
        not create is refused, untouched."""
        ...

    def status(self) -> ClusterInfo:
        """Whether it is up, read from its marker, its processes and the API server."""
        ...

    def info(self) -> ClusterInfo:
        """Its description from the marker alone (no process or API read)."""
        ...

    def kube(self) -> Kube:
        """The admin's client, pinned to the cluster's context (the caller closes it)."""
        ...


@dataclass(frozen=True)
class ClusterSpec:
    """What a cluster is asked to be. ``operator`` and ``orchestrators`` None keep what a running
    cluster of this name records (else the defaults); the last four are one provider's knobs,
    ignored by the other."""

    name: str = "dev"
    pools: str | Path = "default"
    kubeconfig: str | Path | None = None
    operator: str | None = None
    orchestrators: tuple[str, ...] | None = None
    log: Log = print
    apiserver_port: int = 0  # kwok: the apiserver's port on 127.0.0.1 (0: a free one)
    conversion_webhook: bool | None = None  # kwok: convert DGD versions through a TLS webhook
    node_image: str | None = None  # kind: a stock node image instead of the one built here
    creator: Creator | None = None  # kind: who runs kind's own `create cluster` (pytest-kind in tests)


def detect(name: str) -> Provider:
    """The provider of the cluster ``name`` already made here: kind when its marker is kind's."""
    from deploy_suite_offline.kind import provider as kind  # noqa: PLC0415 (kind's modules load only when asked)

    return Provider.KIND if kind.exists(name) else Provider.KWOK


def open_cluster(provider: Provider | None, spec: ClusterSpec) -> ClusterProvider:
    """The cluster ``spec`` names, on ``provider`` (None: the one a cluster of this name already
    uses, else kwok). Nothing starts until ``up``."""
    chosen = detect(spec.name) if provider is None else provider
    orchestrators = spec.orchestrators
    if chosen is Provider.KIND:
        from deploy_suite_offline.kind.provider import KindProvider  # noqa: PLC0415

        return KindProvider(spec.name, spec.pools, spec.kubeconfig, log=spec.log, operator=spec.operator,
                            orchestrators=orchestrators, node_image=spec.node_image, creator=spec.creator)
    from deploy_suite_offline.cluster import OfflineCluster  # noqa: PLC0415

    return OfflineCluster(spec.name, spec.pools, spec.kubeconfig, spec.apiserver_port, log=spec.log,
                          operator=spec.operator, orchestrators=orchestrators,
                          conversion_webhook=spec.conversion_webhook)
