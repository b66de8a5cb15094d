"""Every vector of tests/unit/data/triage/*.yaml, through the library and through `deploy-suite triage`
(--json and text, a file and stdin): real messages, this project's verdicts (docs/triage.md)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from deploy_suite import cli, yamlio
from deploy_suite.judges import objects as triage_objects
from deploy_suite.vocab import Action, TriageCategory

DATA = Path(__file__).parent / "data" / "triage"
PATHS = sorted(DATA.glob("*.yaml"))
FILES = [yamlio.load_one(path) for path in PATHS]
VECTORS = {section: [v for f in FILES for v in f.get(section) or []]
           for section in ("events", "composed", "groups", "pods", "objects")}
# Each vector's saved container logs, by pod name then container (deploy-suite triage --logs).
LOGS: dict[str, dict[str, list[str]]] = {}
# A Job vector's pods (`<job>-<i>`, labelled as the Job controller labels them; its `logs` are its
# first pod's): context for the Job's verdict, their own findings not compared.
CONTEXT: set[str] = set()


def event(name: str, kind: str, reason: str, message: str, at: int = 0, count: int = 1) -> dict[str, Any]:
    return {"kind": "Event", "metadata": {"name": f"{name}.{at}", "namespace": "ns"}, "reason": reason,
            "message": message, "lastTimestamp": f"2026-01-01T00:00:{at:02d}Z", "count": count,
            "involvedObject": {"kind": kind, "name": name, "namespace": "ns"}}


def job_pods(name: str, vector: dict[str, Any]) -> list[dict[str, Any]]:
    """A Job vector's pods, named and labelled for the Job ``name``; its logs go to the first."""
    pods = []
    for j, pod in enumerate(vector.get("pods") or []):
        meta = {**pod.get("metadata", {}), "name": f"{name}-{j}", "namespace": "ns", "labels": {"job-name": name}}
        pods.append({**pod, "metadata": meta})
    if vector.get("logs"):
        LOGS[f"{name}-0"] = {c: str(text).splitlines() for c, text in vector["logs"].items()}
    CONTEXT.update(f"Pod/{name}-{j}" for j in range(max(len(pods), 1)))
    return pods


def cases() -> list[tuple[str, list[dict[str, Any]], list[dict[str, Any]], str, dict[str, str] | None]]:
    """(id, events, objects, object, expected) for every vector; each object gets its own name."""
    out = []
    for i, v in enumerate(VECTORS["events"]):
        name = f"e{i}"
        out.append((f"events[{i}] {v['source'][:40]}",
                    [event(name, v["kind"], v["reason"], v["message"], count=v.get("count", 1))], [],
                    f"{v['kind']}/{name}", v["expect"]))
    for i, v in enumerate(VECTORS["composed"]):
        name = f"c{i}"
        out.append((f"composed[{i}] {v['why'][:40]}", [event(name, v["kind"], v["reason"], v["message"])], [],
                    f"{v['kind']}/{name}", v["expect"]))
    for i, g in enumerate(VECTORS["groups"]):
        name = f"g{i}"
        events = [event(name, g["kind"], e["reason"], e["message"], at) for at, e in enumerate(g["events"])]
        out.append((f"groups[{i}] {g['name'][:40]}", events, [], f"{g['kind']}/{name}", g["expect"]))
    for section in ("pods", "objects"):
        for i, v in enumerate(VECTORS[section]):
            obj = dict(v.get("pod") or v["object"])
            name = f"{section[0]}{i}"
            obj["metadata"] = {**obj["metadata"], "name": name, "namespace": "ns"}
            events = [event(name, obj["kind"], e["reason"], e["message"], at, e.get("count", 1))
                      for at, e in enumerate(v.get("events", []))]
            context = job_pods(name, v) if obj["kind"] == "Job" else []
            if v.get("logs") and obj["kind"] != "Job":
                LOGS[name] = {c: str(text).splitlines() for c, text in v["logs"].items()}
            out.append((f"{section}[{i}] {v['why'][:40]}", events, [obj, *context], f"{obj['kind']}/{name}",
                        v["expect"]))
    return out


CASES = cases()


@pytest.mark.parametrize(("events", "objects", "obj", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_library_gives_each_vector_its_verdict(events, objects, obj, expected):
    found = {f.object: f for f in triage_objects.triage_all(events, objects, logs=LOGS)}
    got = found.get(obj)
    assert ({"action": got.verdict.action, "category": got.verdict.category} if got else None) == expected
    if got is not None and events:
        # The evidence quotes the cluster's own words, never a summary of them.
        assert any(e["message"] in " ".join(got.verdict.evidence) for e in events)


def all_in_one() -> tuple[dict[str, Any], dict[str, Any], dict[str, dict[str, str] | None]]:
    events = [e for c in CASES for e in c[1]]
    objects = [o for c in CASES for o in c[2]]
    return listed(events), listed(objects), {c[3]: c[4] for c in CASES}


def listed(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": items}


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str], stdin: str | None = None,
            monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[int, str, str]:
    if stdin is not None and monkeypatch is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = cli.main(["triage", *args])
    out, err = capsys.readouterr()
    return code, out, err


def parse(out: str, as_json: bool) -> dict[str, dict[str, str]]:
    if as_json:
        rows = json.loads(out)
        assert all(set(r) >= {"object", "namespace", "action", "category", "diagnosis", "evidence"} for r in rows)
        assert all(isinstance(r["evidence"], list) and all(isinstance(e, str) for e in r["evidence"]) for r in rows)
        return {r["object"]: {"action": r["action"], "category": r["category"]} for r in rows}
    fields = [line.split("\t") for line in out.splitlines()]
    assert all(len(f) == 5 and f[4].startswith("evidence: ") for f in fields)  # one line per object
    return {f[0]: {"action": f[1], "category": f[2]} for f in fields}


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
@pytest.mark.parametrize("from_stdin", [False, True], ids=["file", "stdin"])
def test_the_cli_gives_every_vector_its_verdict(tmp_path, capsys, monkeypatch, as_json, from_stdin):
    events, objects, expected = all_in_one()
    (tmp_path / "events.json").write_text(json.dumps(events, default=str))
    (tmp_path / "pods.json").write_text(json.dumps(objects, default=str))
    source = "-" if from_stdin else str(tmp_path / "events.json")
    logs = []
    for pod, containers in LOGS.items():
        for container, lines in containers.items():
            (tmp_path / f"{pod}_{container}.log").write_text("\n".join(lines) + "\n")
            logs += ["--logs", str(tmp_path / f"{pod}_{container}.log")]
    args = [source, "--pods", str(tmp_path / "pods.json"), *logs, *(["--json"] if as_json else [])]
    stdin = json.dumps(events, default=str) if from_stdin else None
    code, out, err = run_cli(args, capsys, stdin, monkeypatch)
    found = {k: v for k, v in parse(out, as_json).items() if k not in CONTEXT}
    assert found == {k: v for k, v in expected.items() if v is not None} and err == ""
    assert code == 1  # some vectors need action


# The files written since every vector had to cite a URL (scheduling-events.yaml keeps its older form);
# the speakers' files name each vector's speaker too (docs/triage.md counts them).
CITED = [yamlio.load_one(path) for path in PATHS if path.name != "scheduling-events.yaml"]
TAGGED = [yamlio.load_one(path) for path in PATHS if path.name in {"speakers.yaml", "held-out.yaml"}]
SPEAKERS = {"kai", "grove", "lws", "kueue", "operator", "kubelet", "kube-scheduler"}


@pytest.mark.parametrize("section", ["events", "pods", "objects"])
def test_every_new_vector_cites_a_public_source_and_its_speaker(section):
    vectors = [v for f in CITED for v in f.get(section) or []]
    assert vectors
    assert all("https://" in str(v.get("source")) for v in vectors), [v.get("why") for v in vectors
                                                                       if "https://" not in str(v.get("source"))]
    assert all(v.get("speaker") in SPEAKERS for f in TAGGED for v in f.get(section) or [])


def test_held_out_and_negative_vectors_never_claim_a_guessed_action():
    held = [v for f in CITED for s in ("events", "pods", "objects") for v in f.get(s) or [] if v.get("held_out")]
    negative = [v for f in CITED for s in ("events", "pods", "objects") for v in f.get(s) or [] if v.get("negative")]
    assert len(held) >= 30 and len(negative) >= 8
    # A negative vector is words no rule may read: unknown (shown) or no verdict at all.
    assert all(v["expect"] in (None, {"action": "unknown", "category": "unknown"}) for v in negative)


SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "triage.schema.json"


def test_the_json_output_of_every_vector_follows_the_published_schema(tmp_path, capsys):
    # docs/triage.schema.json is what an agent loop reads: every finding, the troubleshooting shape included.
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    events, objects, _ = all_in_one()
    (tmp_path / "events.json").write_text(json.dumps(events, default=str))
    (tmp_path / "pods.json").write_text(json.dumps(objects, default=str))
    code, out, _ = run_cli([str(tmp_path / "events.json"), "--pods", str(tmp_path / "pods.json"), "--json"], capsys)
    rows = json.loads(out)
    assert code == 1 and rows
    jsonschema.Draft202012Validator(schema).validate(rows)
    # The schema's vocabularies are the code's (vocab.py).
    assert set(schema["$defs"]["category"]["enum"]) == {c.value for c in TriageCategory} - {"cleared"}
    assert set(schema["$defs"]["action"]["enum"]) == {a.value for a in Action}
    assert all(r["problem_class"] == r["category"] and r["safe_to_continue"] == (r["action"] in {"wait",
               "failed-attempt"}) for r in rows)
