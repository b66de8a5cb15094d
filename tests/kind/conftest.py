"""The kind tests share one session cluster (fixtures/kind.py); each test works in its own namespace."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from deploy_suite.access.kube import Kube


@pytest.fixture
def kind_namespace(kind_kube: Kube) -> Iterator[str]:
    name = f"kt-{uuid.uuid4().hex[:8]}"
    kind_kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kind_kube.delete("Namespace", name)
