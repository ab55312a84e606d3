"""Policies at work in virtual time (broker/policy_apply.py): live TTLs, idle queue expiry, caps."""

from __future__ import annotations

from typing import Any

import pytest

from stompmq.broker import Broker, BrokerConfig
from stompmq.broker.policy_match import Policy
from stompmq.broker.queue_settings import QueueFull
from stompmq.protocol import Frame
from stompmq.storage.base import Recovery

from .fakes import DictStore, FakeOutbox
from .test_lifecycle import T0, at, bodies, run, send, started, subscribe


def policy(name: str, pattern: str, operator: bool = False, priority: int = 0, **definition: Any) -> Policy:
    return Policy.parse(name, {"pattern": pattern, "priority": priority,
                               "definition": {k.replace("_", "-"): v for k, v in definition.items()}}, operator)


def run_until(broker: Broker, end: float, start: float, step: float = 0.05) -> None:
    """Every deadline between ``start`` and ``end``, in steps, as the runtime would run them."""
    t = start
    while t < end:
        t = min(end, t + step)
        run(broker, t)


def stored(store: DictStore, queue: str) -> int:
    return sum(1 for m, _, _ in store.rows.values() if m.queue == queue)


def test_a_ttl_policy_expires_the_messages_already_waiting_within_two_seconds() -> None:
    broker, store = started()
    for i in range(999):
        send(broker, "orders", str(i))
    run(broker, T0 + 4.5)
    send(broker, "orders", "younger")  # 0.5 s old when the policy comes
    run(broker, T0 + 5.0)
    assert stored(store, "orders") == 1000
    broker.set_policies([policy("ttl", "^orders$", message_ttl=1000)])
    run_until(broker, T0 + 7.0, T0 + 5.0)
    assert stored(store, "orders") == 0
    assert broker.queue_stats["orders"].expired == 1000
    broker.set_policies([])  # removed: new messages do not expire
    send(broker, "orders", "kept")
    run_until(broker, T0 + 20.0, T0 + 7.0, step=0.5)
    assert stored(store, "orders") == 1


def test_a_ttl_policy_expires_messages_a_subscriber_has_not_taken_yet() -> None:
    broker, _ = started()
    for i in range(3):
        send(broker, "q", str(i))
    run(broker, T0 + 3.0)
    broker.set_policies([policy("ttl", "q", message_ttl=1000)])
    run_until(broker, T0 + 5.0, T0 + 3.0)
    out = subscribe(broker, "q")
    send(broker, "q", "fresh")
    run(broker, T0 + 5.1)
    assert bodies(out) == ["fresh"]


def abandoned(broker: Broker, queue: str, at: float) -> None:
    """A consumer of ``queue`` subscribes and leaves at ``at``."""
    session = broker.open_session("c-" + queue, "1.2", FakeOutbox())
    broker.handle(session, Frame("SUBSCRIBE", {"id": "1", "destination": "/queue/" + queue}))
    run(broker, at)
    broker.close_session(session)


def test_an_abandoned_queue_is_deleted_after_expires() -> None:
    broker, store = started()
    broker.set_policies([policy("idle", "^relay\\.", expires=5000)])
    abandoned(broker, "relay.1", T0 + 1.0)
    send(broker, "relay.1", "left behind")
    run_until(broker, T0 + 5.9, T0 + 1.0)
    assert broker.knows_queue("relay.1")
    run_until(broker, T0 + 6.1, T0 + 5.9)
    assert not broker.knows_queue("relay.1") and stored(store, "relay.1") == 0


def test_a_queue_used_again_before_it_expires_stays() -> None:
    broker, _ = started()
    broker.set_policies([policy("idle", "^relay\\.", expires=5000)])
    abandoned(broker, "relay.2", T0 + 1.0)
    run(broker, T0 + 4.0)
    subscribe(broker, "relay.2")
    run_until(broker, T0 + 20.0, T0 + 4.0, step=0.5)
    assert broker.knows_queue("relay.2")


def test_expires_when_empty_keeps_a_queue_that_holds_messages() -> None:
    broker, store = started()
    broker.set_policies([policy("idle", "^relay\\.", expires=5000, expires_when_empty=True)])
    abandoned(broker, "relay.full", T0 + 1.0)
    abandoned(broker, "relay.empty", T0 + 1.0)
    send(broker, "relay.full", "still wanted")
    run_until(broker, T0 + 20.0, T0 + 1.0, step=0.25)
    assert broker.knows_queue("relay.full") and stored(store, "relay.full") == 1
    assert not broker.knows_queue("relay.empty")


def test_operator_policies_cap_and_each_setting_says_where_it_came_from() -> None:
    broker, _ = started()
    broker.administer("declare/queue/jobs", {"max-length": "100", "message-ttl": "60000"})
    broker.set_policies([
        policy("low", "^jobs", priority=1, max_length=5, dead_letter=True, message_ttl=1),
        policy("lower", "^jobs", priority=0, max_length_bytes=7),
        policy("cap", ".*", operator=True, max_length=10, delivery_limit=3),
    ])
    assert broker.queue_settings("jobs") == {
        "dead-letter": {"value": True, "source": "policy", "policy": "low"},
        "delivery-limit": {"value": 3, "source": "operator-policy", "policy": "cap"},
        "max-length": {"value": 10, "source": "operator-policy", "policy": "cap"},
        "message-ttl": {"value": 60000, "source": "declaration"},
    }
    answer = broker.administer("settings/queue/jobs")
    assert answer["max-length"] == "10" and answer["max-length-source"] == "operator-policy cap"
    assert broker.dispatcher.bounds.policy("jobs").max_length == 10  # type: ignore[union-attr]


def test_a_policy_bound_applies_to_existing_queues_without_redeclaring() -> None:
    broker, _ = started()
    send(broker, "bounded", "a")
    broker.set_policies([policy("full", "^bounded$", max_length=1, overflow="reject-publish")])
    run(broker, T0 + 1.0)
    with pytest.raises(QueueFull, match="is full"):
        send(broker, "bounded", "b")


def test_a_delivery_limit_policy_dead_letters_past_it() -> None:
    broker, _ = started()
    broker.set_policies([policy("limit", "^work$", delivery_limit=1)])
    send(broker, "work", "poison")
    out = FakeOutbox()
    session = broker.open_session("worker", "1.2", out)
    broker.handle(session, Frame("SUBSCRIBE", {"id": "1", "destination": "/queue/work", "ack": "client"}))
    for attempt in range(2):  # delivered, NACKed and redelivered once; NACKed again: past the limit
        run(broker, T0 + 0.1 * (attempt + 1))
        (message,) = out.take("MESSAGE")
        broker.handle(session, Frame("NACK", {"id": message.headers["ack"]}))
    dlq = subscribe(broker, "DLQ.work")
    run(broker, T0 + 0.5)
    assert bodies(dlq) == ["poison"]


def test_a_declared_expires_starts_when_declared_without_a_consumer_ever() -> None:
    broker, _ = started()
    broker.administer("declare/queue/never-used", {"expires": "2000"})
    run_until(broker, T0 + 1.9, T0)
    assert broker.knows_queue("never-used")
    run_until(broker, T0 + 2.1, T0 + 1.9)
    assert not broker.knows_queue("never-used")


def stream_policy(name: str, pattern: str, operator: bool = False, apply_to: str = "streams",
                  **definition: Any) -> Policy:
    return Policy.parse(name, {"pattern": pattern, "apply-to": apply_to,
                               "definition": {k.replace("_", "-"): v for k, v in definition.items()}}, operator)


def stream_broker() -> Broker:
    """A broker whose streams have segments of two entries, so retention shows after a few."""
    broker = Broker(DictStore(), BrokerConfig(stream_segment=2, stream_max_age=3600))
    at(broker, T0 - 1.0)
    broker.recover(Recovery(0, [], []), [])
    run(broker, T0)
    return broker


def append(broker: Broker, stream: str, count: int, size: int = 10) -> None:
    session = broker.sessions.get("producer") or broker.open_session("producer", "1.2", FakeOutbox())
    for _ in range(count):
        broker.handle(session, Frame("SEND", {"destination": "/stream/" + stream}, b"x" * size))


def test_a_stream_policy_trims_existing_streams_at_once_and_says_where_retention_came_from() -> None:
    broker = stream_broker()
    append(broker, "events.a", 10)
    append(broker, "other", 10)
    assert broker.streams_by_name["events.a"].first == 0
    assert broker.stream_settings("events.a") == {"max-age": {"value": 3600, "source": "default"}}
    broker.set_policies([stream_policy("keep", "^events", max_length_bytes=40, max_age=60)])
    assert broker.streams_by_name["events.a"].first == 6  # two segments of 20 bytes kept: the newest ones
    assert broker.streams_by_name["other"].first == 0
    assert broker.stream_settings("events.a") == {
        "max-age": {"value": 60, "source": "policy", "policy": "keep"},
        "max-length-bytes": {"value": 40, "source": "policy", "policy": "keep"},
    }
    answer = broker.administer("settings/stream/events.a")
    assert answer["max-length-bytes"] == "40" and answer["max-length-bytes-source"] == "policy keep"
    broker.set_policies([])  # cleared: nothing more is trimmed
    append(broker, "events.a", 10)
    assert broker.streams_by_name["events.a"].first == 6
    assert broker.stream_settings("events.a") == {"max-age": {"value": 3600, "source": "default"}}


def test_a_stream_declaration_wins_over_a_policy_and_an_operator_policy_caps_both() -> None:
    broker = stream_broker()
    broker.administer("declare/stream/logs", {"max-bytes": "0"})  # keep everything, declared
    append(broker, "logs", 10)
    broker.set_policies([stream_policy("small", ".*", max_length_bytes=20)])
    assert broker.streams_by_name["logs"].first == 0
    assert broker.stream_settings("logs")["max-length-bytes"] == {"value": 0, "source": "declaration"}
    broker.set_policies([stream_policy("small", ".*", max_length_bytes=20),
                         stream_policy("cap", ".*", operator=True, max_length_bytes=60, max_age=7200)])
    assert broker.streams_by_name["logs"].first == 4  # 60 bytes: three segments kept
    assert broker.stream_settings("logs") == {
        "max-age": {"value": 3600, "source": "default"},  # the flag is stricter than the cap
        "max-length-bytes": {"value": 60, "source": "operator-policy", "policy": "cap"},
    }


def test_a_policy_for_all_gives_queues_and_streams_each_their_own_keys() -> None:
    broker = stream_broker()
    append(broker, "both", 10)
    broker.set_policies([stream_policy("all", "^both$", apply_to="all", max_length_bytes=40, message_ttl=5000)])
    assert broker.queue_settings("both") == {
        "max-length-bytes": {"value": 40, "source": "policy", "policy": "all"},
        "message-ttl": {"value": 5000, "source": "policy", "policy": "all"},
    }
    assert broker.stream_settings("both")["max-length-bytes"] == {"value": 40, "source": "policy", "policy": "all"}
    assert "message-ttl" not in broker.stream_settings("both")
    assert broker.streams_by_name["both"].first == 6


def test_a_stream_max_age_policy_drops_old_segments_when_they_age_out() -> None:
    broker = stream_broker()
    append(broker, "aged", 4)
    run(broker, T0 + 30.0)
    append(broker, "aged", 2)
    broker.set_policies([stream_policy("age", "^aged$", max_age=20)])
    run(broker, T0 + 31.0)
    assert broker.streams_by_name["aged"].first == 2  # the first segment; the next ends 30 s later
    run(broker, T0 + 49.5)
    assert broker.streams_by_name["aged"].first == 2
    run(broker, T0 + 50.5)  # its retention timer: the second one's last entry is 20 s old
    assert broker.streams_by_name["aged"].first == 4
