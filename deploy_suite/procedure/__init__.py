"""The seven steps' logic, one module per step or stage, each returning a typed result kept on
``runstate.RunState``; the settings they run with.

Each pytest step module in ``deploy_suite/steps`` calls one function here. This layer composes the
ones below it (model, access, judges, record) and is the only one that mutates a cluster.
"""
