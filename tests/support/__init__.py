"""What the project's own tests share when they run the deployment suite as a user does.

Used by ``tests/e2e``, ``tests/security`` and ``tests/reliability`` (and the decoy listener by the
pytester tests); the cluster fixtures themselves (``offline_cluster``, ``cluster_kube``,
``scratch_namespace``, ``deployer_identity``) come from ``fixtures/`` through ``pytest_plugins`` in
``tests/conftest.py``. Import the names from here: ``from tests import support``.

==================  =============================================================================
``runs``            :class:`SuiteRun` (``python -m pytest --iter=N ...`` from the checkout root,
                    output read live, exit status, peak RSS, ledger), :func:`run_suite`,
                    :func:`read_ledger`, :func:`outcomes`, :func:`step`
``targets``         the other roles: :func:`admin_namespace` (cluster admin),
                    :func:`write_experiment` (user-interviewer), :class:`Target` and
                    :func:`admin_target` (a test's namespace, experiments, runs and kwok faults),
                    :func:`cache_of_class`, :func:`slow_stage`
``audit``           the apiserver's audit log: :func:`audit_events`, :func:`mutations`, user agents
``decoy``           :class:`Listener` (a port that counts connections), :func:`decoy_kubeconfig`
``processes``       the harness's ``kubectl port-forward`` processes, seen through ``/proc``
``figures``         measurements handed to ``bench/security_figures.py`` and
                    ``bench/reliability_figures.py``
==================  =============================================================================
"""

from tests.support.audit import audit_events, describe, mutations, new_canary, new_user_agent, sentinel_kube
from tests.support.decoy import Listener, decoy_kubeconfig
from tests.support.figures import FaultRecord, record_faults, record_figure
from tests.support.processes import kill_and_reap, port_forwards, wait_for_port_forward, wait_listening
from tests.support.runs import REPO, SuiteRun, Trigger, outcomes, read_ledger, run_suite, step
from tests.support.targets import (
    SAMPLE_SUPPORT,
    SECRET,
    Target,
    admin_namespace,
    admin_target,
    cache_of_class,
    slow_stage,
    write_experiment,
)

__all__ = [
    "REPO",
    "SAMPLE_SUPPORT",
    "SECRET",
    "FaultRecord",
    "Listener",
    "SuiteRun",
    "Target",
    "Trigger",
    "admin_namespace",
    "admin_target",
    "audit_events",
    "cache_of_class",
    "decoy_kubeconfig",
    "describe",
    "kill_and_reap",
    "mutations",
    "new_canary",
    "new_user_agent",
    "outcomes",
    "port_forwards",
    "read_ledger",
    "record_faults",
    "record_figure",
    "run_suite",
    "sentinel_kube",
    "slow_stage",
    "step",
    "wait_for_port_forward",
    "wait_listening",
    "write_experiment",
]
