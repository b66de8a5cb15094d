"""Names the real operator, the GPU stack and Kubernetes put on objects, in one place.

Sources: ``CONTRIBUTING.md`` (where each rule lives) and docs/operator-generations.md. A
leaf module: imports nothing of the project.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# A Kubernetes object as the API serves it (JSON decoded): every layer passes these.
Obj = dict[str, Any]
# The same object where it is only read (the judges' verdicts take any mapping, never change it).
ObjView = Mapping[str, Any]

# The DynamoGraphDeployment API.
DGD_GROUP = "nvidia.com"
DGD_KIND = "DynamoGraphDeployment"
DGD_PLURAL = "dynamographdeployments"
V1ALPHA1 = "nvidia.com/v1alpha1"
V1BETA1 = "nvidia.com/v1beta1"
SUPPORTED_API_VERSIONS = (V1ALPHA1, V1BETA1)

# The GPU extended resource of NVIDIA's device plugin, and the taint key GPU node pools carry.
GPU_RESOURCE = "nvidia.com/gpu"
GPU_TAINT_KEY = "nvidia.com/gpu"
# GPU Feature Discovery's node label naming the GPU model (e.g. NVIDIA-H100-80GB-HBM3).
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB (GPU Feature Discovery)

# Labels the operator puts on every pod it creates.
LABEL_DGD_NAME = "nvidia.com/dynamo-graph-deployment-name"
LABEL_COMPONENT = "nvidia.com/dynamo-component"
LABEL_COMPONENT_TYPE = "nvidia.com/dynamo-component-type"
LABEL_SUB_COMPONENT_TYPE = "nvidia.com/dynamo-sub-component-type"
LABEL_DYNAMO_NAMESPACE = "nvidia.com/dynamo-namespace"
LABEL_SELECTOR = "nvidia.com/selector"

# The label the job controller puts on a Job's pods.
LABEL_JOB_NAME = "job-name"

# How long the wait loop retries a platform fault (an unreachable webhook of the operator) before it
# blocks the run (docs/operator-generations.md, "Platform faults").
PLATFORM_GRACE_S = 30.0

# The API server's words when it cannot call a webhook (the operator's admission or conversion
# webhook): a platform fault, not a judgement on the manifest (docs/operator-generations.md).
WEBHOOK_UNREACHABLE = r"conversion webhook for .{1,200}? failed|failed calling webhook|failed to call webhook"
