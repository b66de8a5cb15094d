"""The parsers of bench/bench_e2e.py: audit-log reaction latencies, request counts, Dynamo log times."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_e2e.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_e2e", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_e2e"] = module
    spec.loader.exec_module(module)
    return module


def line(received, stage, ua, verb, resource, name="", sub="", uri="/x", ns="ns"):
    ref = {"resource": resource, "namespace": ns, **({"name": name} if name else {}),
           **({"subresource": sub} if sub else {})}
    return json.dumps({"kind": "Event", "stage": "ResponseComplete", "verb": verb, "userAgent": ua,
                       "objectRef": ref, "requestURI": uri,
                       "requestReceivedTimestamp": f"2026-11-30T08:45:{received}Z",
                       "stageTimestamp": f"2026-11-30T08:45:{stage}Z"})


KCM = "kube-controller-manager/v1.36.1 (linux/amd64) kubernetes/$Format/job-controller"
SIM = "deploy-suite-operator-sim"
KWOK = "kwok-controller/v0.8.0 (linux/amd64)"


def entries(bench, *lines):
    parsed = [bench.parse_audit_line(x) for x in lines]
    return sorted((e for e in parsed if e is not None), key=lambda e: e.received)


def test_parse_audit_line_keeps_microseconds_and_skips_garbage(bench):
    e = bench.parse_audit_line(line("36.967672", "37.900591", "deploy-suite", "watch", "jobs", "model-download"))
    assert e.received.microsecond == 967672 and e.stage.second == 37 and e.name == "model-download"
    started = json.loads(line("36.967672", "36.967900", "deploy-suite", "watch", "jobs", "model-download"))
    assert bench.parse_audit_line(json.dumps({**started, "stage": "ResponseStarted"})) is None
    assert bench.parse_audit_line("not json") is None
    assert bench.parse_audit_line(json.dumps({"kind": "Event"})) is None


def test_job_reaction_from_the_last_status_write_before_the_harness_moves_on(bench):
    es = entries(
        bench,
        line("36.837000", "36.841000", "deploy-suite", "patch", "jobs", "model-download"),
        line("36.852000", "36.862000", KCM, "update", "jobs", "model-download", "status"),
        line("36.961000", "36.965000", "deploy-suite", "list", "jobs", "model-download"),
        line("36.967000", "37.900000", "deploy-suite", "watch", "jobs", "model-download"),
        line("36.968000", "36.969000", "deploy-suite", "list", "pods"),  # the same wait: the Job's pods
        line("36.970000", "37.900000", "deploy-suite", "watch", "pods"),
        line("37.852000", "37.857000", KCM, "update", "jobs", "model-download", "status"),
        line("37.864000", "37.880000", KCM, "update", "jobs", "model-download", "status"),
        line("37.910000", "37.917000", "deploy-suite", "list", "persistentvolumeclaims", "model-cache"),
        line("37.990000", "37.995000", KCM, "update", "jobs", "model-download", "status"),  # after: ignored
    )
    r = bench.job_reaction(es, "model-download")
    assert r is not None and r.latency_s == pytest.approx(0.030)
    assert "jobs/status" in r.event and "persistentvolumeclaims" in r.action


def test_dgd_ready_reaction_takes_the_later_of_dgd_and_pod_status(bench):
    es = entries(
        bench,
        line("38.767000", "38.934000", "deploy-suite", "list", "dynamographdeployments", "demo"),
        line("38.966000", "45.811000", "deploy-suite", "watch", "dynamographdeployments", "demo"),
        line("38.997000", "45.811000", "deploy-suite", "watch", "pods"),
        line("39.136000", "39.166000", SIM, "patch", "dynamographdeployments", "demo", "status"),
        line("40.100000", "40.110000", KWOK, "patch", "pods", "demo-frontend-abc", "status"),
        line("40.505000", "40.515000", SIM, "patch", "dynamographdeployments", "demo", "status"),
        line("40.541000", "40.545000", "deploy-suite", "get", "services", "demo-frontend"),
    )
    r = bench.dgd_ready_reaction(es, "demo")
    assert r is not None and r.latency_s == pytest.approx(0.026)
    assert "deploy-suite-operator-sim" in r.event and "services" in r.action


def test_retire_reaction_from_the_last_pod_delete(bench):
    es = entries(
        bench,
        line("10.000000", "10.010000", "deploy-suite", "delete", "dynamographdeployments", "demo"),
        line("10.020000", "10.030000", "deploy-suite", "list", "dynamographdeployments", "demo"),
        line("10.040000", "10.050000", "deploy-suite", "list", "pods"),
        line("10.060000", "11.000000", "deploy-suite", "watch", "pods"),
        line("10.500000", "10.600000", KWOK, "delete", "pods", "demo-frontend-abc"),
        line("10.700000", "10.800000", KWOK, "delete", "pods", "demo-worker-abc"),
        line("10.900000", "10.910000", "deploy-suite", "patch", "persistentvolumeclaims", "model-cache"),
    )
    r = bench.retire_reaction(es, "demo")
    assert r is not None and r.latency_s == pytest.approx(0.100)


def test_no_reaction_without_the_wait(bench):
    assert bench.job_reaction([], "x") is None
    assert bench.dgd_ready_reaction([], "x") is None
    assert bench.retire_reaction([], "x") is None


def test_count_verbs_by_user_agent(bench):
    es = entries(
        bench,
        line("01.000000", "01.100000", "deploy-suite", "get", "namespaces", "ns"),
        line("02.000000", "02.100000", "deploy-suite", "watch", "jobs", "j"),
        line("03.000000", "03.100000", "kubectl/v1.37.1 (linux/amd64) kubernetes/f78e722", "get", "jobs", "j"),
        line("04.000000", "04.100000", "deploy-suite-controllers", "get", "pods", "p"),
    )
    assert bench.count_verbs(es, bench.is_harness) == {"get": 1, "watch": 1}
    assert bench.count_verbs(es, bench.is_kubectl) == {"get": 1}


def test_model_listed_times_from_the_serving_logs(bench, tmp_path):
    esc = "\x1b[2m"
    mocker = tmp_path / "mocker.log"
    mocker.write_text(
        f"{esc}2026-11-30T08:43:51.177758Z\x1b[0m INFO Registered endpoint 'dynamo.backend.generate' with shared\n"
        f"2026-11-30T08:43:51.270643Z INFO Registered endpoint 'dynamo.backend.worker_kv_query_source_9' with\n"
        f"2026-11-30T08:43:59.000000Z INFO Registered endpoint 'late' with\n")
    frontend = tmp_path / "frontend.log"
    frontend.write_text(
        "2026-11-30T08:43:51.246431Z INFO http response sent status=200 latency_ms=0\n"
        "2026-11-30T08:43:51.296290Z INFO Adding worker set to model model=Qwen/Qwen3-0.6B namespace=[]\n"
        "2026-11-30T08:43:51.305693Z INFO http response sent status=200 latency_ms=0\n"
        "2026-11-30T08:43:51.751822Z INFO http response sent status=200 latency_ms=0\n"
        "2026-11-30T08:43:51.754092Z INFO http response sent status=200 latency_ms=0\n"
        "2026-11-30T08:43:51.755982Z INFO http-request: request received endpoint=chat_completions x\n"
        "2026-11-30T08:43:51.766986Z INFO http response sent status=200 latency_ms=11 method=POST "
        "uri=/v1/chat/completions version=HTTP/1.1\n")
    t = bench.model_listed_times(mocker, frontend, "Qwen/Qwen3-0.6B")
    assert t is not None
    assert t.registered.microsecond == 270643
    assert t.harness_listed.microsecond == 754092
    assert (t.harness_listed - t.registered).total_seconds() == pytest.approx(0.483449)
    assert t.chat_done.microsecond == 766986
    assert bench.model_listed_times(mocker, frontend, "other/model") is None
