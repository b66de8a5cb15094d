"""What a run leaves behind and what later runs read back: the ledger document (schema, atomic
write, secret guard), the experiment's other ledgers and ``manifest.yaml``, the allocation
intervals and whose a live DGD is, the experiment's budgets.

Files only: the reports render an archived experiment from this layer alone.
"""
