"""The DGD conversion the offline conversion webhook serves (v1alpha1 <-> v1beta1), on the test DGDs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from deploy_suite_offline.operator_sim import conversion

DATA = Path(__file__).parents[1] / "integration" / "data"


@pytest.mark.parametrize("name", ["dgd-alpha-agg.yaml", "dgd-alpha-disagg.yaml", "dgd-beta-agg.yaml",
                                  "dgd-multinode.yaml", "dgd-gaie-direct.yaml"])
def test_a_dgd_reads_back_exactly_as_written_through_the_other_version(name: str) -> None:
    doc = yaml.safe_load((DATA / name).read_text())
    other = conversion.BETA if doc["apiVersion"] == conversion.ALPHA else conversion.ALPHA
    stored = conversion.convert(doc, other)
    assert stored["apiVersion"] == other
    assert ("services" in stored["spec"]) == (other == conversion.ALPHA)
    back = conversion.convert(stored, doc["apiVersion"])
    assert back["spec"] == doc["spec"]


def test_alpha_fields_land_in_the_beta_pod_template() -> None:
    doc = yaml.safe_load((DATA / "dgd-alpha-disagg.yaml").read_text())
    beta = conversion.convert(doc, conversion.BETA)["spec"]
    prefill = next(c for c in beta["components"] if c["name"] == "prefill")
    assert prefill["type"] == "prefill"  # a v1alpha1 worker with subComponentType prefill
    main = prefill["podTemplate"]["spec"]["containers"][0]
    assert main["name"] == "main" and main["resources"]["limits"]["nvidia.com/gpu"] == "2"
    again = conversion.beta_spec_to_alpha(beta)["services"]["prefill"]
    assert (again["componentType"], again["subComponentType"]) == ("worker", "prefill")


def test_status_maps_follow_the_version_and_unknown_types_fail() -> None:
    obj = {"apiVersion": conversion.BETA, "metadata": {"name": "x"}, "spec": {"components": []},
           "status": {"state": "successful", "components": {"w": {"componentNames": ["x-w"]}}}}
    alpha = conversion.convert(obj, conversion.ALPHA)
    assert alpha["status"]["services"] == {"w": {"componentNames": ["x-w"], "componentName": "x-w"}}
    bad = {"apiVersion": conversion.ALPHA, "metadata": {"name": "x"},
           "spec": {"services": {"M": {"componentType": "main"}}}}
    answer = conversion.review({"uid": "1", "desiredAPIVersion": conversion.BETA, "objects": [bad]})
    assert answer["result"]["status"] == "Failure" and "componentType" in answer["result"]["message"]
