"""The agent skill (.agents/skills/deploy-dynamo-recipe/SKILL.md) followed as written, on the offline cluster.

Everything an agent would take from the file is taken from it here: the handoff templates (their
``<sha256sum of FILE>`` placeholders filled with the hashes of those files), the commands of
"Run it" (run with bash, from a directory outside the checkout, with ``EXP_ROOT``, ``N``,
``HANDOFF`` and ``KUBECONFIG`` set as the file says) and the outcome table (the action that
``deploy-suite status`` names must be one of its rows). Edit the file and these tests follow it.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from deploy_suite.fixtures.experiments.make_experiment import Experiment, stage_candidate
from deploy_suite_offline.cluster import OfflineCluster
from tests import support
from tests.support import SuiteRun

REPO = Path(__file__).resolve().parents[2]
SKILL = REPO / ".agents" / "skills" / "deploy-dynamo-recipe" / "SKILL.md"
STATUS_SCHEMA = REPO / "docs" / "status.schema.json"
DEPLOY_SUITE = str(Path(sys.executable).with_name("deploy-suite"))


# ------------------------------------------------------------------ reading the skill file


def front_matter(text: str) -> dict[str, Any]:
    match = re.match(r"---\n(.*?)\n---\n", text, re.S)
    assert match, "SKILL.md opens with YAML front matter between --- lines"
    data: dict[str, Any] = yaml.safe_load(match.group(1))
    return data


def section(text: str, heading: str) -> str:
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"SKILL.md has a section '## {heading}'"
    return match.group(1)


def blocks(body: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", body, re.M | re.S)


def handoff_template(first: bool) -> str:
    found = [b for b in blocks(section(SKILL.read_text(), "Write the handoff"), "yaml")
             if b.startswith("# iteration 0" if first else "# iteration N > 0")]
    assert len(found) == 1, "one handoff template per case"
    return found[0]


def run_commands() -> list[str]:
    (block,) = blocks(section(SKILL.read_text(), "Run it"), "bash")
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def fill(template: str, exp_root: Path, review_id: str = "") -> str:
    def digest(match: re.Match[str]) -> str:
        return hashlib.sha256((exp_root / match.group(1)).read_bytes()).hexdigest()

    text = re.sub(r"<sha256sum of ([^>]+)>", digest, template)
    text = re.sub(r"<review id [^>]*>", review_id, text)
    assert "<" not in text, f"a placeholder the test does not know: {text}"
    return text


# ------------------------------------------------------------------ following it


@dataclass
class Followed:
    pytest_rc: int
    status_rc: int
    status: dict[str, Any]
    output: str


def follow(exp: Experiment, n: int, handoff_text: str, kubeconfig: str, workdir: Path) -> Followed:
    """Write the handoff, then run the file's commands in order, as an agent would."""
    handoff = exp.handoff(n)
    handoff.write_text(handoff_text, encoding="utf-8")
    env = SuiteRun(exp.exp_root, n, kubeconfig, workdir / "reports").environment()
    env.update(EXP_ROOT=str(exp.exp_root), N=str(n), HANDOFF=str(handoff), KUBECONFIG=kubeconfig)
    workdir.mkdir(parents=True, exist_ok=True)
    results = []
    for command in run_commands():
        try:
            results.append(subprocess.run(["bash", "-c", command], cwd=workdir, env=env, capture_output=True,
                                          text=True, timeout=300, check=False))
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{command} did not finish:\n{str(exc.output)[-3000:]}") from exc
    (run, status) = results  # "Run it" is the run, then the status
    assert status.stderr == "", status.stderr
    doc: dict[str, Any] = json.loads(status.stdout)
    Draft202012Validator(json.loads(STATUS_SCHEMA.read_text())).validate(doc)
    assert doc["exit_code"] == status.returncode
    assert f"| `{doc['next_action']['action']}` |" in SKILL.read_text(), "the action is a row of the skill's table"
    return Followed(run.returncode, status.returncode, doc, run.stdout + run.stderr)


def test_the_front_matter_is_packaged_like_dynamos_skills() -> None:
    meta = front_matter(SKILL.read_text())
    assert meta["name"] == SKILL.parent.name == "deploy-dynamo-recipe"
    assert set(meta) == {"name", "description", "license", "metadata"}
    assert 50 <= len(meta["description"]) <= 500 and not re.search(r"<[a-z][^>]*>", meta["description"])
    assert meta["license"] == "Apache-2.0" and "dynamo" in meta["metadata"]["tags"]
    assert [c.split()[0] for c in run_commands()] == ["pytest", "deploy-suite"]


@pytest.fixture
def target(offline_cluster: OfflineCluster, tmp_path: Path) -> Iterator[support.Target]:
    with support.admin_target(offline_cluster, tmp_path, "skill", support.Target) as found:
        yield found


@pytest.mark.cluster
def test_iteration_0_then_1_ready_as_the_skill_says(target: support.Target, tmp_path: Path) -> None:
    exp = target.experiment()
    first = follow(exp, 0, fill(handoff_template(True), exp.exp_root), target.kubeconfig, tmp_path / "agent")
    assert (first.pytest_rc, first.status_rc) == (0, 0), first.output[-3000:]
    it0 = first.status["iterations"][0]
    assert (it0["status"], it0["smoke"]["result"], first.status["next_action"]["action"]) == (
        "ready", "passed", "hand-off-endpoint")
    assert it0["endpoint"]["namespace"] == target.namespace and it0["endpoint"]["kube_context"] == target.context
    # The outputs the skill promises, where status says they are.
    artifact = json.loads((exp.exp_root / it0["smoke_artifact"]).read_text())
    assert artifact["success"] == 1 and set(artifact) >= {"api_request", "api_response"}
    assert (exp.exp_root / it0["deploy_root"] / "applied_manifests" / "deploy.yaml").is_file()

    stage_candidate(exp.exp_root, 1)  # the challenger's candidate in next-candidate/
    second = follow(exp, 1, fill(handoff_template(False), exp.exp_root, "deploy-iter-000-review"),
                    target.kubeconfig, tmp_path / "agent")
    assert (second.pytest_rc, second.status_rc) == (0, 0), second.output[-3000:]
    its = second.status["iterations"]
    assert [(i["deploy_id"], i["status"]) for i in its] == [("deploy-iter-000", "ready"), ("deploy-iter-001", "ready")]
    assert its[0]["torn_down_at"] is not None, "iteration 1 retired iteration 0"
    assert second.status["next_action"] == {**second.status["next_action"], "deploy_id": "deploy-iter-001",
                                            "action": "hand-off-endpoint"}


@pytest.mark.cluster
def test_a_blocked_iteration_says_stop_and_names_the_fix(target: support.Target, tmp_path: Path) -> None:
    missing = f"absent-{uuid.uuid4().hex[:8]}"  # the admin never created it
    exp = support.write_experiment(tmp_path / "scratch", context=target.context, namespace=missing)
    followed = follow(exp, 0, fill(handoff_template(True), exp.exp_root), target.kubeconfig, tmp_path / "agent")
    assert followed.pytest_rc != 0 and followed.status_rc == 1
    it0 = followed.status["iterations"][0]
    assert (it0["status"], it0["blocker_class"]) == ("blocked", "namespace")
    action = followed.status["next_action"]
    assert action["action"] == "stop-report-fix" and missing in action["message"] and "fix:" in action["message"]
    text = subprocess.run([DEPLOY_SUITE, "status", str(exp.exp_root)], capture_output=True, text=True, check=False)
    assert text.returncode == 1 and "blocker namespace" in text.stdout and missing in text.stdout
