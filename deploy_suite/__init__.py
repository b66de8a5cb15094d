"""dynamo-deploy-suite: deploy one Dynamo DynamoGraphDeployment per optimization iteration.

Library modules in this package are plain, typed Python and never import pytest; the ordered
step tests in ``deploy_suite/steps`` are thin wrappers that call one library function each.
Only ``deploy_suite.access.kube`` imports the Kubernetes client library.
"""

__version__ = "0.1.0"
