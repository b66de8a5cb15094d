"""Shared setup of the project's own tests (not of the deployment suite).

The cluster fixtures (``offline_clusters``, ``offline_cluster``, ``cluster_kube``,
``scratch_namespace``, ``deployer_identity``) are loaded once here for every suite under
``tests/``; a cluster starts only when a test asks for one. What the suites that run the harness
as a user does share lives in ``tests/support/``.
"""

pytest_plugins = ["pytester", "deploy_suite_offline.fixtures.cluster", "deploy_suite_offline.fixtures.identities",
                  "deploy_suite_offline.fixtures.kind"]
