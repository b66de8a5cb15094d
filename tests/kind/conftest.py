"""The kind tests share one session cluster (deploy_suite_offline.fixtures.kind); each test has its own namespace."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy_suite.access.kube import Kube
from deploy_suite_offline.kind.provider import KindProvider
from tests.support.targets import Target, admin_target


@pytest.fixture
def kind_namespace(kind_kube: Kube) -> Iterator[str]:
    name = f"kt-{uuid.uuid4().hex[:8]}"
    kind_kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kind_kube.delete("Namespace", name)


@pytest.fixture
def target(kind_cluster_offline: KindProvider, tmp_path: Path) -> Iterator[Target]:
    """The admin's part of a harness run on kind, as on a real cluster: a namespace, ``hf-token-secret``
    and the recipe's ``model-cache`` claim (on the cluster's default class: the recipe's class does
    not exist here)."""
    with admin_target(kind_cluster_offline, tmp_path, "kh", Target) as t:  # type: ignore[arg-type]
        t.kube.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "model-cache"},
                       "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}},
                      t.namespace)
        yield t
