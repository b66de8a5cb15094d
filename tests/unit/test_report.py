"""The HTML report rendered from a ledger (deploy_suite.reports.iteration).

``data/ledger_ready.json`` is a trimmed copy of a real ledger from the offline cluster (iteration 1
of the sample experiment) whose ``capacity`` section was produced by ``CapacityResult.to_dict()``
for a busier cluster: other tenants' pods on three nodes, a tainted node and a cordoned node.
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from deploy_suite.judges.capacity import check_capacity
from deploy_suite.model.dgd import PodDemand
from deploy_suite.model.scheduling import Scheduling
from deploy_suite.record import ledger as ledger_mod
from deploy_suite.reports import gpu_slots
from deploy_suite.reports import iteration as report

DATA = Path(__file__).parent / "data"
HOSTILE = '<script>alert("x")</script>'


@pytest.fixture
def ready() -> dict[str, Any]:
    return json.loads((DATA / "ledger_ready.json").read_text())


@pytest.fixture
def blocked(ready: dict[str, Any]) -> dict[str, Any]:
    led = copy.deepcopy(ready)
    led["status"] = "blocked"
    led["current_step"] = "step2_validate"
    led["blockers"] = [{"step": "step2_validate", "class": "secret", "message": "secret hf-token-secret is missing",
                        "fix": "kubectl create secret generic hf-token-secret -n dynamo-demo --from-file=..."}]
    led["failed_attempts"] = [{"at": "2026-11-30T08:36:43Z", "step": "step6_readiness", "category": "failed-deploy",
                               "evidence": ["0/4 nodes are available"], "diagnosis": "pods never scheduled"}]
    for step in led["steps"][1:]:
        step.update(outcome="not_run", started_at=None, ended_at=None, duration_s=None, evidence={})
    led["steps"][1].update(outcome="blocked", reason="secret hf-token-secret is missing")
    return led


class _Svg(HTMLParser):
    """Rows (``g.dsr-node``) of the capacity picture and the kinds of their GPU slots."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, Counter[str]] = {}
        self._node: str | None = None
        self.svgs = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "svg" and "dsr-capacity-grid" in classes:
            self.svgs += 1
        if tag == "g" and "dsr-node" in classes:
            self._node = a["data-node"]
            assert self._node not in self.rows, "one row per node"
            self.rows[self._node] = Counter()
        if tag == "rect" and "dsr-slot" in classes:
            assert self._node is not None
            kind = next(c.removeprefix("dsr-slot-") for c in classes if c.startswith("dsr-slot-"))
            self.rows[self._node][kind] += 1


def _svg(page: str) -> _Svg:
    parser = _Svg()
    parser.feed(page)
    return parser


def test_fixture_is_a_valid_ledger(ready: dict[str, Any]) -> None:
    ledger_mod.validate(ready)


def test_capacity_picture_has_one_row_per_node_and_the_right_cells(ready: dict[str, Any]) -> None:
    svg = _svg(report.render(ready))
    assert svg.svgs == 1
    table = ready["capacity"]["table"]
    assert list(svg.rows) == [r["node"] for r in table]  # the GPU nodes, in table order; cpu-0 has no GPU
    for row in table:
        cells = svg.rows[row["node"]]
        assert cells["other"] == row["held"]
        assert cells["planned"] == row["planned"]
        assert cells["free"] == row["free_after"]
        assert sum(cells.values()) == row["total"]
    total = sum((svg.rows[n] for n in svg.rows), Counter())
    assert total == Counter({"other": 12, "planned": 8, "free": 12})
    assert svg.rows["h200-1"] == Counter({"other": 2, "planned": 6})  # full after the plan


def test_capacity_picture_matches_the_engine_grid() -> None:
    """The picture is rebuilt from to_dict()'s table exactly like CapacityResult.grid() builds it."""
    def node(name: str, gpus: int, cordoned: bool = False) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"unschedulable": cordoned},
                "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}

    pods = [{"metadata": {"name": "p", "namespace": "o"}, "spec": {"nodeName": "a", "containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "3"}}}]}, "status": {"phase": "Running"}}]
    demands = [PodDemand(f"W-{i}", "W", "worker", i, 0, 2, "nvidia.com/gpu", Scheduling((), None, (), (), ()),
                         {}, "ns") for i in range(3)]
    result = check_capacity(demands, [node("a", 4), node("b", 4), node("c", 2, cordoned=True)], pods)
    mine = gpu_slots.capacity_grid(result.to_dict()["table"])
    assert [[s["kind"] for s in g["slots"]] for g in mine] == [[s["kind"] for s in g["slots"]] for g in result.grid()]
    assert mine[2]["cordoned"] is True


def test_cordoned_and_tainted_nodes_are_marked_with_a_legend(ready: dict[str, Any]) -> None:
    page = report.render(ready)
    assert 'class="dsr-legend"' in page
    for label in ("held by other pods", "this DGD (planned)", "free on a cordoned / tainted node"):
        assert label in page
    assert "cordoned</text>" in page
    assert "taint example.com/reserved-for=tenant-b:NoSchedule</text>" in page
    # Free slots on the cordoned and the tainted node are hatched, not plain free.
    hatched = re.findall(r'<rect class="dsr-slot dsr-slot-free"[^>]*fill="url\(#dsr-hatch\)"', page)
    assert len(hatched) == 4 + 7


def test_capacity_table_and_outcome(ready: dict[str, Any]) -> None:
    page = report.render(ready)
    table = page[page.index('class="dsr-capacity-table"'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr>") == 1 + len(ready["capacity"]["table"])
    assert "held (other pods)" in table and "planned (this DGD)" in table
    assert ">sufficient<" in page
    assert "VllmDecodeWorker-0 \u2192 <code>h200-1</code>" in page


def test_capacity_outcome_key_of_the_forbidden_fallback(ready: dict[str, Any]) -> None:
    ready["capacity"] = {"outcome": "unknown", "reasons": ["node list forbidden"]}
    page = report.render(ready)
    assert ">unknown<" in page and "node list forbidden" in page and "no per-node table recorded" in page
    assert _svg(page).svgs == 0


def test_summary_shows_status_and_next_action(ready: dict[str, Any]) -> None:
    top = report.summary_html(ready, "artifacts/deploy-iter-001/deployment_ledger.json")
    assert 'class="dsr-pill" style="background:#1a7f37">ready<' in top
    for text in ("demo-agg", "offline-demo", "dynamo-demo", "service svc/demo-agg-frontend:8000",
                 "Qwen/Qwen3-0.6B", "hand off to perf-analyzer", "step7_smoke"):
        assert text in top
    assert "blockers</b>none" in top


def test_summary_shows_blockers_with_fix_and_failed_attempts(blocked: dict[str, Any]) -> None:
    top = report.summary_html(blocked)
    assert 'style="background:#cf222e">blocked<' in top
    assert "secret hf-token-secret is missing" in top and "<i>fix:</i> kubectl create secret generic" in top
    assert "failed attempts (1)" in top and "pods never scheduled" in top
    assert "fix the blocker, then rerun" in top
    assert ">not_run<" in top and ">blocked<" in top


def test_a_failed_attempts_troubleshooting_shape_shows_its_signal_next_command_and_patch(
        blocked: dict[str, Any]) -> None:
    led = copy.deepcopy(blocked)
    led["failed_attempts"][0]["troubleshooting"] = {
        "problem_class": "failed-deploy", "evidence_checked": ["pod events"],
        "strongest_signal": "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector",
        "likely_cause": "no node has the pool label", "ruled_out": [], "safe_to_continue": True,
        "next_step": {"command": "kubectl -n ns describe pod w-0", "patch": "retarget the nodeSelector <pool>"}}
    top = report.summary_html(led)
    assert "<i>strongest signal:</i> 0/4 nodes are available: 4 node(s) didn&#x27;t match" in top
    assert "<i>next:</i> <code>kubectl -n ns describe pod w-0</code>" in top
    assert "<i>patch:</i> retarget the nodeSelector &lt;pool&gt;" in top  # escaped like every value
    # An attempt recorded before the shape existed shows its diagnosis alone.
    assert "strongest signal" not in report.summary_html(blocked)


def test_summary_shows_the_budget_state_and_a_spent_budget_stops_the_loop(ready: dict[str, Any]) -> None:
    top = report.summary_html(ready)
    assert "failed deploys 0 of 3 \u00b7 GPU-hours 0.50 of 8.00 \u00b7 wall-clock hours 0.08 of unlimited" in top
    spent = copy.deepcopy(ready)
    spent["budget"]["max_failed_deploys"].update(used=3, remaining=0, spent=True)
    spent["status"] = "blocked"
    spent["blockers"] = [{"step": "step2_validate", "class": "budget", "message": "failed-deploy budget spent",
                          "fix": "ask the user"}]
    top = report.summary_html(spent)
    assert '<b style="color:#cf222e">failed deploys 3 of 3 (spent)</b>' in top
    assert "budget is spent: stop the experiment" in top and "fix the blocker" not in top
    del spent["budget"]
    assert "not judged: step2_validate did not run" in report.summary_html(spent)


def test_summary_shows_the_teardown_policy_and_what_was_done(blocked: dict[str, Any]) -> None:
    failed = {**blocked, "teardown": {"policy": "teardown-final-failures", "action": "deleted",
                                      "at": "2026-01-01T00:00:00Z", "reason": "crash: the attempt can never succeed",
                                      "dgd": "demo",
                                      "evidence_file": "artifacts/deploy-iter-000/logs/readiness-demo.log"}}
    ledger_mod.validate(failed)
    top = report.summary_html(failed)
    assert "<i>teardown (teardown-final-failures):</i> deleted at 2026-01-01T00:00:00Z: crash: the attempt" in top


def test_step_evidence_is_readable_key_values(ready: dict[str, Any]) -> None:
    page = report.render(ready)
    section = page[page.index("<h2>Step evidence</h2>"):page.index("<h2>Capacity</h2>")]
    assert "<th>pods_gone_at</th><td>2026-11-30T08:36:43Z</td>" in section
    assert "<th>existed</th><td>yes</td>" in section
    assert '"deploy_root"' not in section  # not a JSON dump


def test_readiness_smoke_patches_commands_cleanup(ready: dict[str, Any]) -> None:
    page = report.render(ready)
    order = ["<h2>Step evidence</h2>", "<h2>Capacity</h2>", "<h2>Readiness</h2>", "<h2>Smoke</h2>",
             "<h2>Patches (1)</h2>", "<h2>Limitations</h2>", "<h2>Commands</h2>", "<h2>Cleanup</h2>"]
    assert [page.index(h) for h in order] == sorted(page.index(h) for h in order)
    assert "2/2" in page and "demo-agg-vllmprefillworker-5d9c6b7f4-9wmtd" in page
    assert "<code>/v1/models</code> 200" in page
    assert "<details><summary>6 Kubernetes request(s)" in page
    assert "kubectl --context offline-demo delete dynamographdeployment demo-agg -n dynamo-demo" in page
    assert "<script" not in page.lower() and "http://" not in page.replace("http://www.w3.org/2000/svg", "")


def test_hostile_strings_are_escaped(ready: dict[str, Any]) -> None:
    ready["dgd_name"] = HOSTILE
    ready["blockers"] = [{"step": "step2_validate", "class": "x", "message": HOSTILE, "fix": HOSTILE}]
    ready["capacity"]["table"][0]["node"] = HOSTILE
    ready["capacity"]["table"][0]["holders"][0]["pod"] = HOSTILE
    ready["steps"][0]["evidence"]["directory"] = HOSTILE
    ready["smoke"]["bodies"] = ["javascript:alert(1)"]
    links = report.Links("../")
    page = report.render(ready, HOSTILE, links)
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert 'href="javascript' not in page and 'href="../javascript%3Aalert' in page  # a path, never a scheme
    assert len(_svg(page).rows) == len(ready["capacity"]["table"])


def test_links_are_relative_to_the_page(tmp_path: Path, ready: dict[str, Any]) -> None:
    deploy = tmp_path / "exp" / "artifacts" / "deploy-iter-001"
    deploy.mkdir(parents=True)
    (deploy / "deployment_ledger.json").write_text(json.dumps(ready))
    links = report.links_for(deploy / "deployment_ledger.json", tmp_path / "reports")
    assert links.prefix == "../exp/"
    page = report.render(ready, None, links)
    assert '<a href="../exp/artifacts/deploy-iter-001/smoke/models_body.json">' in page
    assert report.links_for(DATA / "ledger_ready.json", tmp_path).prefix is None  # not in a deployment dir


def test_cli_writes_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out" / "OUT.html"
    assert report.main([str(DATA / "ledger_ready.json"), "-o", str(out)]) == 0
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "deploy-iter-001" in page and "next action" in page and "dsr-capacity-grid" in page
    assert capsys.readouterr().out.strip() == str(out)


def test_cli_refuses_a_missing_ledger(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report.main([str(tmp_path / "nope.json"), "-o", str(tmp_path / "x.html")]) == 2
    assert "deploy-suite report: error:" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()


def test_old_or_partial_ledger_still_renders(ready: dict[str, Any]) -> None:
    for key in ("capacity", "readiness", "smoke", "endpoint", "source_dgd"):
        ready[key] = None
    ready["steps"] = []
    page = report.render(ready)
    assert "no capacity evidence recorded" in page and "not known yet" in page


def test_summary_shows_the_allocation_intervals_and_gpu_hours(ready: dict[str, Any]) -> None:
    # An older ledger (allocated_at only), still holding its GPUs at its last write (8 GPUs x 1 s).
    top = report.summary_html(ready)
    assert "1 interval(s) from 2026-11-30T08:36:43Z, 0.002222 GPU-hours" in top and "still held at" in top
    # Torn down, re-applied, torn down again: the intervals add up (1 GPU x (1 h + 0.5 h)).
    reran = {**ready, "gpus_requested": 1, "allocated_at": "2026-06-01T10:00:00Z",
             "torn_down_at": "2026-06-01T12:30:00Z",
             "allocations": [{"allocated_at": "2026-06-01T10:00:00Z", "released_at": "2026-06-01T11:00:00Z"},
                             {"allocated_at": "2026-06-01T12:00:00Z", "released_at": None}]}
    top = report.summary_html(reran)
    assert "2 interval(s) from 2026-06-01T10:00:00Z, 1.5 GPU-hours; torn down at 2026-06-01T12:30:00Z" in top
    assert "no GPU pod bound yet" in report.summary_html({**ready, "allocated_at": None})


def test_summary_says_whose_the_dgd_is(ready: dict[str, Any]) -> None:
    led = copy.deepcopy(ready)
    led["applied_dgd"] = {"name": "demo", "namespace": "ns", "kube_context": "c", "uid": "u-1",
                          "applied_at": "2026-01-01T00:00:00Z", "field_manager": "deploy-suite/0123456789ab"}
    ledger_mod.validate(led)
    top = report.summary_html(led)
    assert "applied with field manager <code>deploy-suite/0123456789ab</code>, uid <code>u-1</code>" in top
    led["applied_dgd"] = None
    assert "not applied by this run" in report.summary_html(led)


def test_a_multinode_components_leader_and_workers_are_shown(ready: dict[str, Any]) -> None:
    comps = ready["readiness"]["components"]
    name = next(iter(comps))
    comps[name]["layout"] = [{"pod": "demo-agg-w-0", "role": "leader", "node": "h200-0"},
                             {"pod": "demo-agg-w-1", "role": "worker", "node": "h200-1"}]
    page = report.render(ready)
    section = page[page.index("<h2>Readiness</h2>"):page.index("<h2>Smoke</h2>")]
    assert "<th>leader/workers</th>" in section
    assert "leader: demo-agg-w-0 on h200-0<br>worker: demo-agg-w-1 on h200-1" in section


def test_single_node_components_have_no_layout_column(ready: dict[str, Any]) -> None:
    assert "leader/workers" not in report.render(ready)
