"""Names the operator derives from a DGD (deploy_suite.model.names), refused in step 1 when
Kubernetes would refuse them: before any directory, request or mutation."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from deploy_suite.errors import InputError
from deploy_suite.model import names
from deploy_suite.model.dgd import from_documents
from deploy_suite.model.manifests import check_dgd_deployable

DATA = Path(__file__).parent / "data"


def agg(name: str, worker: str = "VllmWorker", frontend: str = "Frontend") -> list[dict[str, object]]:
    """tests/unit/data/dgd_v1alpha1_agg.yaml (Frontend + VllmWorker) renamed."""
    doc = yaml.safe_load((DATA / "dgd_v1alpha1_agg.yaml").read_text())
    doc["metadata"]["name"] = name
    services = doc["spec"]["services"]
    services[frontend] = services.pop("Frontend")
    services[worker] = services.pop("VllmWorker")
    return [doc]


def problems(docs: list[dict[str, object]]) -> list[str]:
    return names.derived_name_problems(from_documents(docs, "deploy.yaml"))


def test_a_70_character_dgd_name_is_refused_naming_the_label_value_limit() -> None:
    name = "qwen3-0-6b-agg-" + "x" * 55
    assert len(name) == 70
    with pytest.raises(InputError) as info:
        check_dgd_deployable(agg(name), "--dgd user_provided_dgd.yaml")
    text = str(info.value)
    assert "\n" not in text and "--dgd user_provided_dgd.yaml" in text
    assert "nvidia.com/dynamo-graph-deployment-name, at most 63 characters" in text
    assert "(70 characters)" in text and "shorten metadata.name" in text


def test_the_worker_dcd_name_counts_the_8_character_worker_hash() -> None:
    # <dgd>-vllmworker-<8 hex>: the longest DGD name that fits is 63 - 11 - 9 = 43 characters.
    fits = "d" * (63 - len("-vllmworker") - 1 - names.WORKER_HASH_LEN)
    assert problems(agg(fits)) == []
    (problem,) = problems(agg(fits + "d"))
    assert "component VllmWorker's DynamoComponentDeployment" in problem and "worker hash" in problem
    assert "64 characters" in problem


def test_a_long_frontend_component_gives_a_service_name_over_the_dns1035_limit() -> None:
    frontend = "Frontend" + "F" * 50  # 58 characters, lowercased in the Service name
    found = problems(agg("qwen-agg", frontend=frontend))
    assert any("DynamoComponentDeployment" in p for p in found)  # 67 characters: the selector label
    (service,) = [p for p in found if "Service" in p]
    assert f"'qwen-agg-{frontend.lower()}'" in service and "DNS-1035 label" in service


def test_a_service_name_must_start_with_a_letter() -> None:
    (service,) = problems(agg("7b-agg"))
    assert "Service '7b-agg-frontend'" in service


def test_the_derivations_follow_the_operator() -> None:
    assert names.service_name("qwen-agg", "Frontend.v2") == "qwen-agg-frontend-v2"
    assert names.dcd_name("qwen-agg", "VllmWorker", worker=True) == "qwen-agg-vllmworker-00000000"
    assert names.dcd_name("qwen-agg", "Frontend", worker=False) == "qwen-agg-frontend"
