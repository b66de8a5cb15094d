"""The ordered deployment steps run by ``pytest --iter=N``: one test module per step of the procedure.

Modules are named after the registry in ``deploy_suite.procedure.registry.STEPS``
(``test_step1_inputs.py`` ... ``test_step7_smoke.py``). Each is thin: it asks for fixtures
(``run``, ``kube``, ``namespace``, ``manifests``) and calls one library function. A step whose
module is missing is recorded as ``not_run`` and every later step is skipped.
"""
