"""Dynamo in a real container on kind: the image built here (``dynamo_image.py``), pulled by the
node from the cluster's registry under the name a DGD uses (nothing loaded by hand), runs
``dynamo.frontend`` + ``dynamo.mocker`` (file discovery inside the pod, as the kwok runtime runs
them on this machine), and answers the OpenAI smoke requests through the real kubelet's
port-forward. The DGD path (operator replica -> Deployment -> pods finding each other through
Kubernetes discovery) is tests/kind/test_kind_harness.py."""

from __future__ import annotations

import httpx
import pytest

from deploy_suite import clock
from deploy_suite.access.kube import Kube
from deploy_suite_offline.dynamo_runtime import _BROKER_SCRIPT
from deploy_suite_offline.kind.config import POOL_NODE_LABEL
from deploy_suite_offline.kind.provider import KindProvider
from tests.kind.test_kind_cluster import wait_pod

pytestmark = [pytest.mark.kind, pytest.mark.matrix]

IMAGE_NAME = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"  # as the recipes name it
MODEL = "Qwen/Qwen3-0.6B"
SERVE = f"""set -e
export DYN_DISCOVERY_BACKEND=file DYN_FILE_KV=/tmp/kv DYN_SELF_HOST_METADATA=0
for v in DYN_HTTP_RPC_HOST DYN_TCP_RPC_HOST DYN_TCP_RESPONSE_STREAM_HOST DYN_EVENT_PLANE_HOST DYN_SYSTEM_HOST; do
  export $v=127.0.0.1
done
python3 -c "$BROKER" /tmp/broker.json &
while [ ! -f /tmp/broker.json ]; do sleep 0.2; done
export DYN_ZMQ_BROKER_URL=$(python3 -c 'import json; d = json.load(open("/tmp/broker.json"))
print("xsub=" + d["xsub"] + ",xpub=" + d["xpub"])')
python3 -m dynamo.mocker --model-path /opt/dynamo/tokenizer --model-name {MODEL} --discovery-backend file \
  --speedup-ratio 100 &
exec python3 -m dynamo.frontend --http-host 0.0.0.0 --http-port 8000 --router-mode round-robin --discovery-backend file
"""


def test_a_dynamo_frontend_and_mocker_serve_a_chat_completion_from_a_real_container(
        kind_cluster_offline: KindProvider, kind_kube: Kube, kind_namespace: str) -> None:
    items, _ = kind_kube.list_items("Node", label_selector=f"{POOL_NODE_LABEL}=cpu-0")
    node = items[0]["metadata"]["name"]
    kind_kube.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dynamo"},
                      "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1, "containers": [{
                          "name": "main", "image": IMAGE_NAME, "imagePullPolicy": "IfNotPresent",
                          "command": ["sh", "-c", SERVE], "env": [{"name": "BROKER", "value": _BROKER_SCRIPT}],
                          "ports": [{"containerPort": 8000}],
                          "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}, "periodSeconds": 2}}]}},
                     kind_namespace)
    wait_pod(kind_kube, kind_namespace, "dynamo", "ready", timeout=300.0)
    with kind_kube.port_forward("pod/dynamo", kind_namespace, 8000) as forward:
        base = f"http://127.0.0.1:{forward.wait_ready(30.0)}"
        deadline = clock.monotonic() + 120
        listed: list[str] = []
        while clock.monotonic() < deadline and MODEL not in listed:
            listed = [m["id"] for m in httpx.get(f"{base}/v1/models", timeout=10).json().get("data", [])]
            clock.sleep(1.0)
        assert MODEL in listed
        reply = httpx.post(f"{base}/v1/chat/completions", timeout=60, json={
            "model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8})
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["role"] == "assistant"
    assert "dynamo" in kind_kube.pod_log("dynamo", kind_namespace, tail=200).lower()
