"""Verdicts from observed objects: wait conditions, pending-pod and container triage, every
speaker's wording, the statuses below the DGD, GPU capacity and placement, the GPU SKU, the
operator's status on each generation, ownership.

Judges decide; they do not fetch. The steps and the wait loop bring them what the cluster shows.
"""
