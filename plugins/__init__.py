"""pytest plugins of the suite (options, ledger, report), loaded by the root ``conftest.py``.

Not installed with the package: they are the pytest side of the harness and only make sense in a
checkout. Each one is inert unless the run deploys (``--iter`` or ``--handoff`` given), so the
project's own ``pytest tests`` runs are unaffected.
"""
