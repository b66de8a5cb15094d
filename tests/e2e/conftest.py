"""End-to-end tests on the real offline cluster use the same session fixtures as the integration tests."""

from fixtures.cluster import cluster_kube, offline_cluster, offline_clusters, scratch_namespace

__all__ = ["cluster_kube", "offline_cluster", "offline_clusters", "scratch_namespace"]
