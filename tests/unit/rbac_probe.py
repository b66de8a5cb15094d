"""A pytest plugin (``-p tests.unit.rbac_probe``) that keeps every request the harness's code sends
to the in-memory apiserver (``tests/fakekube.py``) during a test session, and writes them as JSON
lines to ``$RBAC_PROBE_OUT`` at the end (only those made from the procedure's code, with the
function that made them): what ``tests/unit/test_rbac.py`` checks the shipped RBAC
against (the union of the procedure's fake-cluster tests, steps 2 to 7)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import fakekube

SEEN: list[dict[str, Any]] = []


PROCEDURE = f"{os.sep}deploy_suite{os.sep}procedure{os.sep}"


def _caller() -> str | None:
    """The innermost function of the procedure (the steps' logic) on the stack; None for a request a
    test makes itself (setting up or reading back), which is no request of the harness."""
    frame = sys._getframe(2)
    while frame is not None:
        if PROCEDURE in frame.f_code.co_filename:
            return f"{Path(frame.f_code.co_filename).stem}.{frame.f_code.co_name}"
        frame = frame.f_back  # type: ignore[assignment]
    return None


def _keep(method: str, path: str, query: Any, content_type: str = "") -> None:
    caller = _caller()
    if caller is not None:
        SEEN.append({"method": method, "path": path, "query": {k: str(v) for k, v in dict(query or {}).items()},
                     "content_type": content_type, "caller": caller})


def pytest_configure(config: pytest.Config) -> None:
    request, lines = fakekube.FakeApi.request, fakekube.FakeApi.lines

    def kept_request(self: fakekube.FakeApi, method: str, path: str, query: Any, body: Any = None,
                     content_type: str = "application/json", accept: str = "application/json",
                     timeout: float | None = None) -> bytes:
        _keep(method, path, query, content_type)
        return request(self, method, path, query, body, content_type, accept, timeout)

    def kept_lines(self: fakekube.FakeApi, path: str, query: Any, timeout: float) -> Any:
        _keep("WATCH", path, query)
        return lines(self, path, query, timeout)

    fakekube.FakeApi.request = kept_request  # type: ignore[method-assign]
    fakekube.FakeApi.lines = kept_lines  # type: ignore[method-assign]


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get("RBAC_PROBE_OUT")
    if out:
        with open(out, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(r) + "\n" for r in SEEN)
