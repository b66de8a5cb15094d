"""The offline clusters reach the command line only through the entry-point group
``deploy_suite.commands`` and are built only through ``provider.open_cluster`` (issue 30)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploy_suite import cli
from deploy_suite_offline import provider
from deploy_suite_offline.cluster import OfflineCluster
from deploy_suite_offline.kind.provider import KindProvider


def test_the_offline_distribution_registers_cluster_and_binaries() -> None:
    registered = cli.commands()
    assert set(registered) >= {"cluster", "binaries"}
    assert registered["cluster"].value == "deploy_suite_offline.cli:add_cluster"
    args = cli.build_parser().parse_args(["cluster", "status", "--name", "x", "--provider", "kind"])
    assert args.provider == "kind" and callable(args.run)


@pytest.mark.parametrize("argv", [["cluster", "up", "--name", "x"], ["binaries"]])
def test_without_the_offline_clusters_cluster_says_in_one_line_how_to_install_them(
        argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli, "commands", lambda: {})  # the harness installed alone
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"`deploy-suite {argv[0]}`" in err and "pip install -e ./offline" in err
    # The harness's own subcommands still parse without them.
    assert cli.build_parser().parse_args(["status", "x"]).command == "status"


def test_open_cluster_picks_the_provider_asked_else_the_one_the_marker_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    spec = provider.ClusterSpec(name="p1", log=lambda _m: None)
    assert isinstance(provider.open_cluster(provider.Provider.KIND, spec), KindProvider)
    assert isinstance(provider.open_cluster(None, spec), OfflineCluster)  # no cluster of that name: kwok
    marker = tmp_path / "deploy-suite" / "kind" / "clusters" / "p1" / "deploy-suite.json"
    marker.parent.mkdir(parents=True)
    marker.write_text(json.dumps({"name": "p1", "provider": "kind"}))
    assert provider.detect("p1") is provider.Provider.KIND
    found = provider.open_cluster(None, spec)
    assert isinstance(found, KindProvider) and found.info().provider == "kind"


def test_a_down_cluster_reads_the_same_through_either_provider(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for kind in provider.Provider:
        cluster = provider.open_cluster(kind, provider.ClusterSpec(name="p2", log=lambda _m: None))
        info = cluster.status()
        assert (info.state, info.provider, cluster.name) == ("down", kind.value, "p2")
        assert cluster.down().state == "down"  # nothing made here: nothing removed, no error
