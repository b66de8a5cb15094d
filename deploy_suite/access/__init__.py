"""The one way to a cluster: ``kube.Kube`` (pinned to the workload's context, a kubectl-equivalent
record of every call, one error translation), the one wait loop (``watch``), API resource names and
the owned ``kubectl port-forward``.

Only this subpackage imports the Kubernetes client (``.importlinter``), so a unit test swaps one
seam (``kube.Transport``) for an in-memory apiserver.
"""
