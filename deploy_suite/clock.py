"""All time goes through here, so tests can fake the clock: a wait of minutes runs in no time and
the same way every run, and a deadline can be crossed on purpose.

Library code calls the module functions (``now``, ``iso_now``, ``monotonic``, ``sleep``,
``wait_event``); they delegate to the installed :class:`Clock`. Unit tests install a
:class:`FakeClock` (``tests/support/clock.py`` has the fixture) so that waits, deadlines and
durations run instantly and deterministically.
"""

from __future__ import annotations

import datetime as _dt
import threading
import time as _time
from collections.abc import Iterator


class Clock:
    """The real clock."""

    def now(self) -> _dt.datetime:
        return _dt.datetime.now(_dt.UTC)

    def monotonic(self) -> float:
        return _time.monotonic()

    def sleep(self, seconds: float) -> None:
        _time.sleep(max(0.0, seconds))

    def wait_event(self, event: threading.Event, seconds: float) -> bool:
        """Wait up to ``seconds`` for ``event``; True when it was set (an interruptible sleep)."""
        return event.wait(max(0.0, seconds))


class FakeClock(Clock):
    """A clock that only moves when told to: ``sleep`` and timed-out waits advance it at once."""

    def __init__(self, start: _dt.datetime | None = None) -> None:
        self._wall = start or _dt.datetime(2026, 1, 1, tzinfo=_dt.UTC)
        self._mono = 1000.0
        self.slept: list[float] = []

    def advance(self, seconds: float) -> None:
        self._mono += seconds
        self._wall += _dt.timedelta(seconds=seconds)

    def now(self) -> _dt.datetime:
        return self._wall

    def monotonic(self) -> float:
        return self._mono

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(max(0.0, seconds))

    def wait_event(self, event: threading.Event, seconds: float) -> bool:
        if event.is_set():
            return True
        self.sleep(seconds)
        return event.is_set()


_current: Clock = Clock()


def install(clock: Clock) -> Clock:
    """Make ``clock`` the clock of every caller; returns the one it replaces (to restore it)."""
    global _current
    previous, _current = _current, clock
    return previous


def current() -> Clock:
    """The installed clock (a test advances its FakeClock through this)."""
    return _current


def monotonic() -> float:
    return _current.monotonic()


def now() -> _dt.datetime:
    return _current.now()


def sleep(seconds: float) -> None:
    _current.sleep(seconds)


def wait_event(event: threading.Event, seconds: float) -> bool:
    return _current.wait_event(event, seconds)


def iso_now() -> str:
    """UTC timestamp as written into ledgers: second precision, trailing Z."""
    return iso(now())


def iso_now_precise() -> str:
    """UTC timestamp to the microsecond, trailing Z (a verdict's time, compared with audit logs)."""
    return now().astimezone(_dt.UTC).isoformat().replace("+00:00", "Z")


def iso(at: _dt.datetime) -> str:
    """``at`` as written into ledgers: UTC, second precision, trailing Z."""
    return at.astimezone(_dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def parse_iso(value: object) -> _dt.datetime | None:
    """An ISO-8601 timestamp as written in ledgers and manifest.yaml (YAML may have made it a
    datetime already); naive values are UTC; anything else (absent, unreadable) is None."""
    if isinstance(value, _dt.datetime):
        stamp = value
    elif isinstance(value, str) and value.strip():
        try:
            stamp = _dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
    else:
        return None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=_dt.UTC)


class Poll:
    """The one poll primitive, for what cannot be watched (an HTTP endpoint): iterate to make an
    attempt, until ``seconds`` have passed since the first; between attempts pause ``first``
    seconds, doubling up to ``cap``, never past the deadline. ``at_least_once``: the first
    attempt is made even when ``seconds`` is spent, and the deadline is checked after each attempt."""

    def __init__(self, seconds: float, *, first: float = 0.05, cap: float = 0.25, at_least_once: bool = False) -> None:
        self.seconds = seconds
        self.first = first
        self.cap = cap
        self.at_least_once = at_least_once
        self.deadline = monotonic() + seconds

    def remaining(self) -> float:
        return self.deadline - monotonic()

    def expired(self) -> bool:
        return monotonic() >= self.deadline

    def __iter__(self) -> Iterator[int]:
        self.deadline = monotonic() + self.seconds
        delay, attempt = self.first, 0
        while self.at_least_once or not self.expired():
            yield attempt
            attempt += 1
            if self.expired():
                return
            sleep(min(delay, max(0.0, self.remaining())))
            delay = min(delay * 2, self.cap)
