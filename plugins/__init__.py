"""Where the suite's pytest plugins went: ``deploy_suite/pytest_plugin/`` (options, ledger, report,
fixtures), inside the installed package.

pytest loads them through the package's ``pytest11`` entry point, before it reads the command line,
so ``pytest --iter=0 --exp-root /abs/exp ...`` works from any directory. Nothing is left to load
from here: registering the same hooks a second time would run every step hook twice.
"""
