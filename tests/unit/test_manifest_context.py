"""``<EXP_ROOT>/manifest.yaml``'s context updated in place (deploy_suite.record.experiment.update_manifest_context):
user-interviewer's file keeps its other keys, comments, quoting and order; only ``cluster_context`` and
``cluster_context_history`` change; a file that is not one mapping is refused, never overwritten."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from deploy_suite import clock, yamlio
from deploy_suite.errors import InputError
from deploy_suite.record.experiment import update_manifest_context

# The session metadata contracts.md lists (exp_id, session start, repo commit, cluster context, agent
# versions, the context history), written as a person or an agent writes it: comments, both quotings,
# an unquoted timestamp, a nested mapping, a history that already has an entry.
MANIFEST = """\
# Session metadata (user-interviewer). Key names are ours: contracts.md section 3.
exp_id: "20260601T120000Z-llama3-70b"
created_at: 2026-06-01T12:00:00Z   # unquoted: a YAML timestamp
session_started_at: '2026-06-01T12:00:00Z'  # the wall-clock budget's origin
repo_commit: 3f2c1ab
cluster_context: lab-a100  # where the interview happened

agent_versions:
  user-interviewer: 0.4.1   # pinned by the operator of the loop
  recipe-deployer: null
cluster_context_history:
  - from: null
    to: lab-a100
    changed_at: "2026-06-01T12:00:00Z"
    changed_by: user-interviewer
# trailing note: keep this file small
"""


@pytest.fixture(autouse=True)
def fixed_now(fake_clock: clock.FakeClock) -> None:
    """changed_at is the run's clock (a FakeClock here)."""


def test_only_the_context_and_its_history_change_the_rest_stays_as_written(tmp_path: Path) -> None:
    path = tmp_path / "manifest.yaml"
    path.write_text(MANIFEST)
    change = update_manifest_context(tmp_path, "prod-h200")
    assert change is not None and (change["from"], change["to"]) == ("lab-a100", "prod-h200")

    text = path.read_text()
    before = MANIFEST.splitlines()
    # Every line but the context's is still there, in order, comments and quoting included.
    kept = [line for line in before if not line.startswith("cluster_context:")]
    assert [line for line in text.splitlines() if line in kept] == kept
    [line] = [line for line in text.splitlines() if line.startswith("cluster_context:")]
    assert line.startswith('cluster_context: "prod-h200"') and line.endswith("# where the interview happened")
    # The new history entry goes after the last one, above the file's closing comment, indented alike.
    assert text.endswith('  - from: "lab-a100"\n    to: "prod-h200"\n'
                         f'    changed_at: "{change["changed_at"]}"\n    changed_by: "recipe-deployer"\n'
                         "# trailing note: keep this file small\n")
    # What the file now says, read as every other reader does (the bounded reader, PyYAML).
    data = yamlio.load_one(path)
    assert data["cluster_context"] == "prod-h200"
    assert data["cluster_context_history"][-1] == {"from": "lab-a100", "to": "prod-h200",
                                                   "changed_at": change["changed_at"], "changed_by": "recipe-deployer"}
    assert len(data["cluster_context_history"]) == 2
    assert data["agent_versions"] == {"user-interviewer": "0.4.1", "recipe-deployer": None}
    # Unchanged keys are written back as they were (YAML-typed, not re-quoted).
    assert "created_at: 2026-06-01T12:00:00Z   # unquoted: a YAML timestamp" in text


def test_the_same_context_leaves_the_file_untouched(tmp_path: Path) -> None:
    path = tmp_path / "manifest.yaml"
    path.write_text(MANIFEST)
    mtime = path.stat().st_mtime_ns
    assert update_manifest_context(tmp_path, "lab-a100") is None
    assert path.read_text() == MANIFEST and path.stat().st_mtime_ns == mtime


@pytest.mark.parametrize("context", ["yes", "on", "null", "1.10", "2026-06-01"])
def test_a_context_a_yaml_1_1_reader_would_retype_stays_a_string(tmp_path: Path, context: str) -> None:
    (tmp_path / "manifest.yaml").write_text("exp_id: x\ncluster_context_history: []\n")
    update_manifest_context(tmp_path, context)
    data = yaml.safe_load((tmp_path / "manifest.yaml").read_text())  # PyYAML reads YAML 1.1
    assert data["cluster_context"] == context and data["cluster_context_history"][0]["to"] == context


def test_a_missing_or_comment_only_manifest_gets_the_two_keys(tmp_path: Path) -> None:
    path = tmp_path / "manifest.yaml"
    update_manifest_context(tmp_path, "ctx")
    assert yamlio.load_one(path)["cluster_context"] == "ctx"
    path.write_text("# written by user-interviewer, filled later\n")
    update_manifest_context(tmp_path, "ctx")
    assert path.read_text().startswith("# written by user-interviewer, filled later\n")
    assert yamlio.load_one(path)["cluster_context_history"][0]["to"] == "ctx"


@pytest.mark.parametrize(("text", "needle"), [
    ("- exp_id: x\n", "is a YAML list, a mapping is expected"),
    ("exp_id: x\n---\nexp_id: y\n", "holds 2 YAML documents"),
    ("exp_id: x\nexp_id: y\n", "duplicate key 'exp_id'"),  # the bounded reader's rules hold for it too
])
def test_a_manifest_that_is_not_one_mapping_is_refused_and_left_as_it_is(tmp_path: Path, text: str,
                                                                          needle: str) -> None:
    path = tmp_path / "manifest.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        update_manifest_context(tmp_path, "ctx")
    assert str(caught.value).startswith("<EXP_ROOT>/manifest.yaml: ") and needle in str(caught.value)
    assert "; fix: " in str(caught.value)
    assert path.read_text() == text
