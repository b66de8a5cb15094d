"""The stand-ins of the kind provider's Dynamo image that run without ai-dynamo: the EPP's argument
parsing (Go's flag syntax) and the ``aisimulate_core.sdk`` names that fail only when used."""

from __future__ import annotations

import pytest

from deploy_suite_offline.kind.dynamo_files import aisimulate_core_standin as ais
from deploy_suite_offline.kind.dynamo_files import dynamo_offline_epp as epp


def test_the_operators_epp_arguments_are_read_in_gos_flag_syntax() -> None:
    flags = epp.parse(["-pool-name", "g-pool", "-pool-namespace", "ns", "-v", "4", "--zap-encoder", "json",
                       "-grpc-port", "9002", "-grpc-health-port=9013", "-secure-serving", "-config-file", "/etc/epp/x"])
    assert flags["pool-name"] == "g-pool" and flags["zap-encoder"] == "json" and flags["v"] == "4"
    assert flags["grpc-health-port"] == "9013" and flags["secure-serving"] == "true"
    assert flags["config-file"] == "/etc/epp/x"


def test_ports_default_as_the_real_epps_and_a_bad_port_or_a_positional_is_refused() -> None:
    assert epp.parse([]) == {"grpc-port": "9002", "grpc-health-port": "9003"}
    with pytest.raises(SystemExit, match="invalid value"):
        epp.main(["-grpc-port", "x"])
    with pytest.raises(SystemExit, match="flags only"):
        epp.parse(["serve"])


def test_any_aisimulate_name_imports_and_fails_only_when_used() -> None:
    config = ais.ForwardPassPerfModelConfig  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match="not installed in this offline image"):
        config(model="m")
    with pytest.raises(AttributeError):
        ais.__wrapped__  # noqa: B018  # dunder names stay missing (copy, pickle and inspect probe them)
