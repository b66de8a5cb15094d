"""deploy_suite.yamlio: what real manifests write is accepted (merge keys that override a key, a file
ending with ``---``, empty documents anywhere), the bounds stay (duplicate keys, alias bombs, depth)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy_suite.errors import InputError
from deploy_suite.model.manifests import check_support_documents
from deploy_suite.yamlio import load_yaml_text

DATA = Path(__file__).parent / "data" / "recipes" / "llama-3-70b"

# The prefill/decode workers of NVIDIA's llama-3-70b vllm disagg-single-node recipe
# (ai-dynamo/dynamo recipes/llama-3-70b/vllm/disagg-single-node/deploy.yaml), their shared
# mainContainer written here once with an anchor, each worker's own args overriding it.
WORKERS = """\
apiVersion: nvidia.com/v1alpha1
kind: DynamoGraphDeployment
metadata: {name: llama3-70b-disagg-sn}
spec:
  services:
    prefill:
      componentType: worker
      subComponentType: prefill
      extraPodSpec:
        mainContainer: &main
          image: nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.0
          workingDir: /workspace/examples/backends/vllm
          command: [/bin/sh, -c]
          args: ["python3 -m dynamo.vllm --model $MODEL_PATH --is-prefill-worker"]
    decode:
      componentType: worker
      subComponentType: decode
      extraPodSpec:
        mainContainer:
          <<: *main
          args: ["python3 -m dynamo.vllm --model $MODEL_PATH"]
"""


def test_a_merge_key_whose_mapping_overrides_a_merged_key_is_accepted() -> None:
    (doc,) = load_yaml_text(WORKERS, "deploy.yaml", "fix")
    decode = doc["spec"]["services"]["decode"]["extraPodSpec"]["mainContainer"]
    assert decode["args"] == ["python3 -m dynamo.vllm --model $MODEL_PATH"]  # the override wins
    assert decode["image"] == "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.0"  # the rest is merged
    prefill = doc["spec"]["services"]["prefill"]["extraPodSpec"]["mainContainer"]
    assert prefill["args"] == ["python3 -m dynamo.vllm --model $MODEL_PATH --is-prefill-worker"]


def test_a_key_written_twice_next_to_a_merge_key_is_still_refused() -> None:
    text = WORKERS + '          args: ["again"]\n'
    with pytest.raises(InputError, match="duplicate key 'args'"):
        load_yaml_text(text, "deploy.yaml", "fix")


def test_a_file_ending_with_a_document_marker_has_no_empty_last_document() -> None:
    # `kubectl get -o yaml` output concatenated with `---` lines, the last one trailing.
    assert len(load_yaml_text(WORKERS + "---\n", "deploy.yaml", "fix")) == 1
    assert len(load_yaml_text(WORKERS + "---", "deploy.yaml", "fix")) == 1  # no newline after it
    assert len(load_yaml_text("---\n" + WORKERS + "---\n" + WORKERS + "---\n", "deploy.yaml", "fix")) == 2
    assert load_yaml_text("---\n", "empty.yaml", "fix") == []  # only markers: no document at all


@pytest.mark.parametrize("text", [
    "---\n---\n{body}",  # a leading empty document (two markers before the first object)
    "{body}---\n---\n",  # two trailing markers
    "{body}...\n---\n",  # an explicit document end, then a marker
    "{body}---\n# nothing but a comment\n",  # a last document holding only a comment
    "---\n{body}---\n\n---\n",  # an empty document between markers
])
def test_empty_documents_anywhere_are_not_documents(text: str) -> None:
    cache = (DATA / "model-cache.yaml").read_text()  # a real recipe file: no newline at its end
    assert load_yaml_text(text.format(body=cache + "\n"), "model-cache.yaml", "fix") == [
        load_yaml_text(cache, "model-cache.yaml", "fix")[0]]


def test_a_concatenated_recipe_ending_with_a_marker_passes_step_1s_support_checks() -> None:
    # The llama-3-70b model-cache folder's two files as one `kubectl apply -f` stream, `---` after each.
    text = "".join(f"---\n{(DATA / name).read_text()}\n---\n" for name in ("model-cache.yaml", "model-download.yaml"))
    documents = load_yaml_text(text, "--support model-download", "fix")
    assert [d["kind"] for d in documents] == ["PersistentVolumeClaim", "Job"]
    check_support_documents(documents, "--support model-download")  # kind and metadata.name in each
    # One document expected (user_workload.yaml, the handoff): surrounding markers add none.
    (workload,) = load_yaml_text("---\n---\nkubernetes: {namespace: ns}\n---\n", "user_workload.yaml", "fix")
    assert workload == {"kubernetes": {"namespace": "ns"}}


def test_an_alias_bomb_through_merge_keys_is_still_refused() -> None:
    lines = ["a0: &a0 {x: 1, y: 2}"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 12)]
    lines += ["m: {<<: *a0, z: *a11}"]
    with pytest.raises(InputError, match="alias bomb"):
        load_yaml_text("\n".join(lines) + "\n", "bomb.yaml", "fix")
