"""The seven steps' logic, one module per step or stage, each returning a typed result kept on the
step context (``context.StepContext``); the step registry (``registry``); the settings they run with.
The run's lifecycle (which step runs, how a stopped one ends) is the pytest plugin's
(``deploy_suite.plugins.lifecycle``).

Each pytest step module in ``deploy_suite/steps`` calls one function here. This layer composes the
ones below it (model, access, judges, record) and is the only one that mutates a cluster.
"""
