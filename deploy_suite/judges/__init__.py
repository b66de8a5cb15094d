"""Verdicts from observed objects: wait conditions, pending-pod and container triage, every
speaker's wording, the statuses below the DGD, GPU capacity and placement, the GPU SKU, the
operator's status on each generation, ownership; claims, failed support Jobs by their pods' words,
probes, evictions and node conditions, and a finding in the troubleshooting shape.

Judges decide; they do not fetch. The steps and the wait loop bring them what the cluster shows.
"""
