"""Unit tests of the scheduling primitives (deploy_suite.model.scheduling): Kubernetes matching and GPU counting."""

from __future__ import annotations

import pytest

from deploy_suite.errors import InputError
from deploy_suite.model.scheduling import FieldReader, Requirement, Taint, Toleration, parse_scheduling, pod_gpus


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        (Toleration("", "Exists"), Taint("anything", "v", "NoExecute"), True),
        (Toleration("k", "Exists"), Taint("k", "v", "NoSchedule"), True),
        (Toleration("k", "Equal", "v"), Taint("k", "v", "NoSchedule"), True),
        (Toleration("k", "Equal", "v"), Taint("k", "other", "NoSchedule"), False),
        (Toleration("k", "Equal", "v", "NoExecute"), Taint("k", "v", "NoSchedule"), False),
        (Toleration("k", "Exists", "", "NoSchedule"), Taint("k", "", "NoSchedule"), True),
        (Toleration("other", "Exists"), Taint("k", "", "NoSchedule"), False),
        (Toleration("k", "Equal", ""), Taint("k", "", "NoSchedule"), True),
    ],
)
def test_tolerations_match_taints_like_kubernetes(toleration, taint, tolerated):
    assert toleration.tolerates(taint) is tolerated


@pytest.mark.parametrize(
    ("req", "labels", "matches"),
    [
        (Requirement("a", "In", ("1", "2")), {"a": "2"}, True),
        (Requirement("a", "In", ("1",)), {}, False),
        (Requirement("a", "NotIn", ("1",)), {}, True),
        (Requirement("a", "NotIn", ("1",)), {"a": "1"}, False),
        (Requirement("a", "Exists"), {"a": ""}, True),
        (Requirement("a", "DoesNotExist"), {"a": "x"}, False),
        (Requirement("a", "Gt", ("4",)), {"a": "8"}, True),
        (Requirement("a", "Gt", ("4",)), {"a": "4"}, False),
        (Requirement("a", "Lt", ("4",)), {"a": "3"}, True),
        (Requirement("a", "Gt", ("4",)), {"a": "eight"}, False),
        (Requirement("a", "Lt", ("4",)), {}, False),
    ],
)
def test_match_expressions_follow_kubernetes_operators(req, labels, matches):
    assert req.matches(labels) is matches


def test_pod_gpus_counts_request_and_limit_once_and_follows_the_init_container_rule():
    def c(gpus, **extra):
        return {"resources": {"requests": {"nvidia.com/gpu": gpus}, "limits": {"nvidia.com/gpu": gpus}}, **extra}

    spec = {"containers": [c(2), c(1)], "initContainers": [c(4), c(1, restartPolicy="Always")]}
    # Regular 3 + sidecar 1 = 4; the one-shot init container ran alone with 4 before the sidecar.
    assert pod_gpus(spec, "nvidia.com/gpu") == 4
    assert pod_gpus({"containers": [c("two")]}, "nvidia.com/gpu") is None


def test_parse_scheduling_reads_required_terms_and_ignores_preferred_ones():
    problems: list[str] = []
    spec = {
        "nodeSelector": {"zone": "a"},
        "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]},
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}]}},
        "tolerations": [{"key": "k", "operator": "Sometimes"}],
    }
    sched = parse_scheduling(FieldReader("pod"), spec, "spec", problems)
    assert sched.node_selector == (("zone", "a"),)
    assert sched.node_affinity is not None and str(sched.node_affinity[0]) == "gpu Exists"
    assert problems == ["spec.tolerations[0]: toleration operator 'Sometimes' is not Equal or Exists"]
    with pytest.raises(InputError, match=r"spec\.nodeSelector: expected a mapping"):
        parse_scheduling(FieldReader("pod"), {"nodeSelector": ["zone"]}, "spec", [])
