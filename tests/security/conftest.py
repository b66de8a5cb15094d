"""Security tests run the real suite against the offline cluster (session-scoped, see fixtures/cluster.py)."""

from fixtures.cluster import cluster_kube, offline_cluster, offline_clusters, scratch_namespace
from fixtures.identities import deployer_identity

__all__ = ["cluster_kube", "deployer_identity", "offline_cluster", "offline_clusters", "scratch_namespace"]
