"""Root conftest of the checkout; it registers nothing.

The suite's plugins (options, ledger, report, the ``run``/``kube``/... fixtures) live in
``plugins/`` and are loaded by the installed package's ``pytest11`` entry point,
so ``pytest --iter=N`` finds them from any directory. A deployment run loads no ``conftest.py`` at
all (``deploy_suite.plugins.options``): nothing put here would reach it. The project's own
tests keep their shared set-up in ``tests/conftest.py``.
"""
