"""What the handed-off files say, read without a cluster: the workload, the DGD (both API
versions), its pods' scheduling constraints, env and args, the pinned knobs, the manifests' checks.

The lowest layer above the leaves: everything else reads a DGD through it, and it reads nothing
but files and dictionaries.
"""
