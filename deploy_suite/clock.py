"""All time goes through here, so tests can fake the clock (the idea of pytest's ``timing``)."""

from __future__ import annotations

import datetime as _dt
import time as _time


def monotonic() -> float:
    return _time.monotonic()


def now() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


def iso_now() -> str:
    """UTC timestamp as written into ledgers: second precision, trailing Z."""
    return now().replace(microsecond=0).isoformat().replace("+00:00", "Z")


def parse_iso(value: str) -> _dt.datetime:
    return _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
