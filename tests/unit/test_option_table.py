"""The option table (``procedure.settings.OPTIONS``) is the one declaration of the suite's options:
the pytest options, the handoff keys, the ``--handoff`` help and the settings fields all follow it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from deploy_suite.errors import InputError
from deploy_suite.plugins import options as plugin
from deploy_suite.procedure.settings import (
    HANDOFF_KEYS,
    OPTIONS,
    PYTEST,
    RUN,
    Settings,
    Timeouts,
    load_handoff,
)


def test_run_rows_are_the_settings_fields_and_the_handoff_keys_in_order():
    run_keys = [row.key for row in OPTIONS if row.step == RUN]
    assert run_keys == [f.name for f in fields(Settings)]
    assert list(HANDOFF_KEYS) == run_keys


def test_timeout_rows_are_the_timeouts_fields_each_with_its_step():
    rows = [row for row in OPTIONS if row.step not in (RUN, PYTEST)]
    assert [row.key for row in rows] == [f.name for f in fields(Timeouts)]
    assert {row.step for row in rows} == {"support", "retire", "readiness", "smoke"}
    assert all(row.key.startswith("smoke_") for row in rows if row.step == "smoke")


def test_pytest_rows_fill_no_field_and_every_row_has_a_unique_spelling():
    assert [row.option for row in OPTIONS if row.step == PYTEST] == ["--handoff", "--reports-dir"]
    assert all(row.key is None for row in OPTIONS if row.step == PYTEST)
    spelled = [row.option for row in OPTIONS if row.option]
    assert len(spelled) == len(set(spelled))
    assert all(row.option == "--iter" or row.key is None or row.step != RUN
               or row.option == "--" + row.key.replace("_", "-") for row in OPTIONS if row.option)


def test_a_handoff_file_takes_every_run_key_and_names_exactly_them_when_one_is_unknown(tmp_path: Path):
    handoff = tmp_path / "handoff.yaml"
    handoff.write_text("".join(f"{key}: null\n" for key in HANDOFF_KEYS), encoding="utf-8")
    assert set(load_handoff(handoff)) == set(HANDOFF_KEYS)
    handoff.write_text("bogus: 1\n", encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_handoff(handoff)
    assert str(caught.value).endswith("use only: " + ", ".join(sorted(HANDOFF_KEYS)))


def _help_group() -> str:
    env = {**os.environ, "PYTEST_ADDOPTS": ""}
    out = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"], capture_output=True,
                         text=True, check=True, env=env, cwd=Path(__file__).parent).stdout
    start = out.index("dynamo-deploy-suite:")
    return out[start:out.index("\n\n", start)]


def test_pytest_help_lists_exactly_the_table_and_the_handoff_keys():
    group = _help_group()
    assert re.findall(r"^  (--[\w-]+)", group, re.M) == [row.option for row in OPTIONS if row.option]
    flat = " ".join(group.split())
    keys = re.search(r"\(keys: ([^)]*)\)", flat)
    assert keys is not None and keys.group(1).split(", ") == list(HANDOFF_KEYS)
    # Timeouts with an option show the dataclass default.
    assert f"(default: {Timeouts().readiness_s:.0f})" in flat


def test_the_plugin_hands_every_keyed_option_to_build_settings():
    given = {plugin._dest(row.option): f"value of {row.key}" for row in OPTIONS if row.option}

    class Config:
        def getoption(self, dest: str) -> object:
            return given[dest]

    values = plugin._cli_values(Config())  # type: ignore[arg-type]
    assert values == {row.key: f"value of {row.key}" for row in OPTIONS if row.option and row.key}
