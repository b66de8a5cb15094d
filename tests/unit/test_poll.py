"""The one poll primitive (deploy_suite.clock.Poll) of the HTTP gates, on a FakeClock."""

from __future__ import annotations

from deploy_suite import clock


def attempts_at(poll: clock.Poll, start: float) -> list[float]:
    return [round(clock.monotonic() - start, 3) for _ in poll]


def test_a_poll_backs_off_to_its_cap_and_ends_at_its_deadline(fake_clock: clock.FakeClock) -> None:
    start = clock.monotonic()
    # Pauses 0.05, 0.1, 0.2, then the cap 0.25 until the second is spent; the last pause is cut short.
    assert attempts_at(clock.Poll(1.0), start) == [0.0, 0.05, 0.15, 0.35, 0.6, 0.85]
    assert round(clock.monotonic() - start, 3) == 1.0


def test_a_spent_poll_makes_no_attempt_unless_at_least_once(fake_clock: clock.FakeClock) -> None:
    assert list(clock.Poll(0.0)) == []
    assert list(clock.Poll(0.0, at_least_once=True)) == [0]


def test_an_at_least_once_poll_checks_its_deadline_after_each_attempt(fake_clock: clock.FakeClock) -> None:
    start = clock.monotonic()
    poll = clock.Poll(2.0, first=0.25, cap=4.0, at_least_once=True)
    seen = []
    for attempt in poll:
        seen.append((attempt, round(clock.monotonic() - start, 3), round(poll.remaining(), 3)))
        fake_clock.advance(0.5)  # each attempt takes half a second
    assert seen == [(0, 0.0, 2.0), (1, 0.75, 1.25), (2, 1.75, 0.25)]
    assert poll.expired()
