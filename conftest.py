"""Root conftest: makes ``pytest --iter=N`` from the checkout root run the deployment suite.

It only loads the suite's plugins and fixtures; all behaviour lives in ``plugins/`` (options,
ledger, report) and ``fixtures/run.py`` (the ``run``, ``settings``, ``kube``, ``namespace`` and
``manifests`` fixtures), so the same modules can be loaded with ``-p`` elsewhere. Being the root
conftest also puts the checkout on ``sys.path``, so ``deploy_suite`` imports without installing.
"""

pytest_plugins = ["plugins.options", "plugins.ledger", "plugins.report", "fixtures.run"]
