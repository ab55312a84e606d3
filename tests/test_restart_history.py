"""The restart contract's checks (tests/support/restart_history.py) on made-up histories: for each
promise, a history that breaks it (the check names it) and the closest one that keeps it (no check
complains), so a check that cannot fail, or that fires on a good history, fails here."""

from __future__ import annotations

from typing import Any

import pytest

from .support.restart_history import Event, violations

Row = tuple[float, str, str, str, dict[str, Any]]  # (t, kind, sub, body, info)


def send(t: float, body: str, dest: str = "/queue/q", **info: Any) -> list[Row]:
    """A SEND at ``t`` and its RECEIPT just after."""
    label = info.pop("label", "plain")
    return [(t, "send", "p", body, {"label": label, "dest": dest, "receipt": True, **info}),
            (t + 0.01, "receipted", "p", body, {})]


def sub(t: float, name: str, dest: str = "/queue/q", ack: str = "auto", prefetch: int = 10,
        exclusive: bool = False) -> list[Row]:
    return [(t, "subscribe", name, "", {"dest": dest, "ack": ack, "prefetch": prefetch, "exclusive": exclusive}),
            (t + 0.01, "subscribed", name, "", {})]


def got(t: float, name: str, body: str, redelivered: str = "false", **info: Any) -> Row:
    return (t, "delivered", name, body, {"redelivered": redelivered, **info})


def acked(t: float, name: str, body: str) -> list[Row]:
    return [(t, "ack-sent", name, body, {}), (t + 0.01, "acked", name, body, {})]


def closed(t: float, name: str) -> Row:
    return (t, "closed", name, "", {"why": "disconnect"})


PRIO = "/queue/prio"
PRIO_STORY = [*sub(0.5, "c", PRIO, "client-individual", prefetch=1), *send(0.6, "m0", PRIO, priority=4),
              got(0.7, "c", "m0"), *send(1.0, "m1", PRIO, priority=1), *send(1.1, "m9", PRIO, priority=9),
              *acked(1.2, "c", "m0")]
GROUPS = [*sub(0.5, "a"), *sub(0.6, "b"), *send(0.9, "g1", group="g"), *send(1.9, "g2", group="g"), got(1.0, "a", "g1")]

#: check -> (a history that breaks it, the nearest history that keeps it)
CASES: dict[str, tuple[list[Row], list[Row]]] = {
    "lost": ([*sub(0, "c", ack="client-individual"), *send(1, "m"), got(2, "c", "m")],
             [*sub(0, "c", ack="client-individual"), *send(1, "m"), got(2, "c", "m"), (3, "ack-sent", "c", "m", {})]),
    "refused-delivered": ([*sub(0, "c"), (1, "send", "p", "m", {"dest": "/queue/q"}), (1.1, "refused", "p", "m", {}),
                           got(2, "c", "m")],
                          [*sub(0, "c"), (1, "send", "p", "m", {"dest": "/queue/q"}), (1.1, "refused", "p", "m", {})]),
    "after-ack": ([*sub(0, "c", ack="client-individual"), *send(1, "m"), got(2, "c", "m"), *acked(3, "c", "m"),
                   got(4, "c", "m", "true")],
                  [*sub(0, "c", ack="client-individual"), *send(1, "m"), got(2, "c", "m"), got(2.5, "c", "m", "true"),
                   *acked(3, "c", "m")]),
    "unmarked": ([*sub(0, "c"), *send(1, "m"), got(2, "c", "m"), got(3, "c", "m")],
                 [*sub(0, "c"), *send(1, "m"), got(2, "c", "m"), got(3, "c", "m", "true")]),
    "early": ([*sub(0, "c"), *send(1, "m", delay=1000), got(1.5, "c", "m")],
              [*sub(0, "c"), *send(1, "m", delay=1000), got(2.05, "c", "m")]),
    "late": ([*sub(0.5, "c"), *send(1, "m", delay=500), got(8, "c", "m"), closed(10, "c")],
             [*sub(0.5, "c"), *send(1, "m", delay=500), got(3, "c", "m"), closed(10, "c")]),
    "expired": ([*send(1, "m", ttl=150), *sub(2, "c"), got(2.1, "c", "m")],
                [*sub(0.5, "c"), *send(1, "m", ttl=150), got(1.05, "c", "m")]),
    "priority": ([*PRIO_STORY, got(1.3, "c", "m1"), *acked(1.4, "c", "m1"), got(1.5, "c", "m9"), *acked(1.6, "c", "m9")],
                 [*PRIO_STORY, got(1.3, "c", "m9"), *acked(1.4, "c", "m9"), got(1.5, "c", "m1"), *acked(1.6, "c", "m1")]),
    "group": ([*GROUPS, got(2.0, "b", "g2")],
              [*GROUPS, closed(1.5, "a"), got(2.0, "b", "g2")]),
    "exclusive": ([*sub(1, "a", exclusive=True), *sub(2, "b", exclusive=True), *send(2.9, "m"), got(3, "b", "m")],
                  [*sub(1, "a", exclusive=True), *sub(2, "b", exclusive=True), closed(2.5, "a"), *send(2.9, "m"),
                   got(3, "b", "m")]),
    "transaction": ([*sub(0, "c"), (1, "send", "p", "a", {"dest": "/queue/q", "tx": "t"}),
                     (1, "send", "p", "b", {"dest": "/queue/q", "tx": "t"}), got(2, "c", "a")],
                    [*sub(0, "c"), (1, "send", "p", "a", {"dest": "/queue/q", "tx": "t"}),
                     (1, "send", "p", "b", {"dest": "/queue/q", "tx": "t"}), got(2, "c", "a"), got(2, "c", "b")]),
    "bound": ([*sub(0, "c", ack="client-individual"), *send(1, "m1", max_length=1), *send(2, "m2", max_length=1),
               got(3, "c", "m1"), got(3, "c", "m2"), (4, "ack-sent", "c", "m1", {}), (4, "ack-sent", "c", "m2", {})],
              [*sub(0, "c", ack="client-individual"), *send(1, "m1", max_length=1), got(1.5, "c", "m1"),
               (1.6, "ack-sent", "c", "m1", {}), *send(2, "m2", max_length=1), got(3, "c", "m2"),
               (4, "ack-sent", "c", "m2", {})]),
    "offset": ([*sub(0, "c", "/stream/s"), *send(1, "m", "/stream/s", label="stream"), got(2, "c", "m", offset=3),
                got(3, "c", "m", offset=4)],
               [*sub(0, "c", "/stream/s"), *send(1, "m", "/stream/s", label="stream"), got(2, "c", "m", offset=3),
                got(3, "c", "m", offset=3)]),
    "exit": ([(1, "stop", "", "", {"how": "term"}), (2, "stopped", "", "", {"how": "term", "rc": 1})],
             [(1, "stop", "", "", {"how": "kill"}), (2, "stopped", "", "", {"how": "kill", "rc": -9})]),
    "harness": ([(1, "broker-gone", "", "", {"rc": 1})], [(1, "ready", "", "", {})]),
}


def history(rows: list[Row]) -> list[Event]:
    ordered = sorted(rows, key=lambda r: r[0])
    return [Event(i, t, kind, s, body, info) for i, (t, kind, s, body, info) in enumerate(ordered)]


@pytest.mark.parametrize("check", sorted(CASES))
def test_a_broken_promise_is_named(check: str) -> None:
    found = violations(history(CASES[check][0]))
    assert [v.check for v in found] == [check], found


@pytest.mark.parametrize("check", sorted(CASES))
def test_the_kept_promise_passes(check: str) -> None:
    assert violations(history(CASES[check][1])) == []


def test_a_stop_ends_every_subscription() -> None:
    """After a stop the group may go anywhere: the broker that held it is gone."""
    rows = [*GROUPS, (1.5, "stop", "", "", {"how": "kill"}), (1.6, "ready", "", "", {}), got(2.0, "b", "g2")]
    assert violations(history(rows)) == []


def test_an_unmarked_delivery_lost_to_a_kill_right_after_it_is_allowed() -> None:
    """The mark of a delivery just before a ``kill -9`` may not be on disk; long before, it is."""
    story = [*sub(0, "c", ack="client-individual"), *send(1, "m"), got(2, "c", "m"),
             (2.1, "stop", "", "", {"how": "kill"}), (2.2, "ready", "", "", {}), *sub(3, "d", ack="client-individual"),
             got(3.1, "d", "m"), *acked(3.2, "d", "m")]
    assert violations(history(story)) == []
    late = [(t + 1.0 if kind == "stop" else t, kind, s, b, i) for t, kind, s, b, i in story]
    assert [v.check for v in violations(history(late))] == ["unmarked"]


def test_the_order_deliveries_were_written_down_in_does_not_matter() -> None:
    """The marked delivery may be written down before the unmarked first one (two threads)."""
    story = [*sub(0, "a", ack="client-individual"), *sub(0, "b"), *send(1, "m"), got(2, "b", "m", "true"),
             got(2.01, "a", "m")]
    assert violations(history(story)) == []
