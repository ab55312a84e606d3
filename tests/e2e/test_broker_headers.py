"""The broker's own headers are the broker's: a SEND cannot claim another user's identity
(``user-id``, ``JMSXUserID``) nor the broker's facts (dead-lettering, a shovel's mark, delivery
counts), on a real broker over real sockets; a relay (a shovel, its user tagged ``impersonator``)
keeps them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from stompmq.broker.config import BrokerConfig
from stompmq.broker.errors import ClientError
from stompmq.broker.send_headers import BROKER_FACTS, sender_headers
from stompmq.server import ServerSettings
from stompmq.server.auth import Permission, User, Users, hash_password

from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client

FACTS = {"original-destination": "/queue/payroll", "dead-letter-reason": "expired", "shovel-redelivered": "true",
         "x-delivery-count": "7"}
#: A header each delivery gets from the broker itself (as redelivery-count), whoever the sender is.
DELIVERY_COUNT = {"JMSXDeliveryCount": "7"}


def _users(tmp_path: Path) -> str:
    users = Users({name: User(name, hash_password("pw-" + name), tags, {"/": Permission()})
                   for name, tags in (("alice", []), ("mallory", []), ("relay", ["impersonator"]))})
    users.save(tmp_path / "users.toml")
    return str(tmp_path / "users.toml")


@pytest.mark.parametrize("headers, login, relay, stamp, expected", [
    ({"a": "1"}, "alice", False, False, {"a": "1"}),
    ({"user-id": "alice", "a": "1"}, "alice", False, False, {"user-id": "alice", "a": "1"}),
    ({**FACTS, "a": "1"}, "alice", False, False, {"a": "1"}),
    ({**FACTS, "user-id": "bob"}, "relay", True, False, {**FACTS, "user-id": "bob"}),
    ({"a": "1"}, "alice", False, True, {"a": "1", "user-id": "alice", "JMSXUserID": "alice"}),
    ({"user-id": "alice"}, None, False, True, None),  # ERROR: no login to claim
    ({"JMSXUserID": "bob"}, "alice", False, True, None),
    ({"a": "1", "JMSXUserID": "x"}, None, True, True, {"a": "1"}),  # stamped: nobody, so none
])
def test_what_a_sender_may_say(headers: dict[str, str], login: str | None, relay: bool, stamp: bool,
                               expected: dict[str, str] | None) -> None:
    if expected is None:
        with pytest.raises(ClientError, match="is not the login of this connection"):
            sender_headers(headers, login, relay, stamp)
    else:
        assert sender_headers(headers, login, relay, stamp) == expected
    assert set(FACTS) <= BROKER_FACTS


def test_a_spoofed_identity_is_refused_and_the_brokers_facts_are_dropped(
        make_memory_broker: Callable[..., BrokerThread], tmp_path: Path) -> None:
    broker = make_memory_broker(settings=ServerSettings(port=0, users_file=_users(tmp_path)))
    with Client(broker.port, login="alice", passcode="pw-alice") as alice, \
            Client(broker.port, login="mallory", passcode="pw-mallory") as mallory:
        alice.subscribe("/queue/inbox")
        for name in ("user-id", "JMSXUserID"):
            with Client(broker.port, login="mallory", passcode="pw-mallory") as spoofer:
                spoofer.frame("SEND", {"destination": "/queue/inbox", name: "alice", "receipt": "r1"}, b"forged")
                error = spoofer.expect_error()
                assert error.headers["receipt-id"] == "r1"
                assert f"{name} 'alice' is not the login of this connection ('mallory')" in error.headers["message"]
        with Client(broker.port, login="mallory", passcode="pw-mallory") as spoofer:  # inside a transaction too
            spoofer.frame("BEGIN", {"transaction": "t"})
            spoofer.frame("SEND", {"destination": "/queue/inbox", "transaction": "t", "user-id": "alice"}, b"x")
            assert "is not the login" in spoofer.expect_error().headers["message"]
        mallory.send_to("/queue/inbox", "facts", headers={**FACTS, **DELIVERY_COUNT, "user-id": "mallory", "kept": "yes"})
        message = alice.message()
        assert message.body == b"facts" and message.headers["user-id"] == "mallory"
        assert message.headers["kept"] == "yes" and not set(FACTS) & set(message.headers), message.headers
        assert "JMSXDeliveryCount" not in message.headers  # a first delivery: the broker writes none
        alice.expect_nothing()  # nothing forged arrived


def test_a_relay_keeps_them_and_stamping_sets_the_login(
        make_memory_broker: Callable[..., BrokerThread], tmp_path: Path) -> None:
    broker = make_memory_broker(settings=ServerSettings(port=0, users_file=_users(tmp_path)),
                                config=BrokerConfig(stamp_user_id=True))
    with Client(broker.port, login="alice", passcode="pw-alice") as alice, \
            Client(broker.port, login="relay", passcode="pw-relay", relay="true") as relay, \
            Client(broker.port, login="mallory", passcode="pw-mallory", relay="true") as mallory:
        alice.subscribe("/queue/inbox")
        relay.send_to("/queue/inbox", "relayed", headers={**FACTS, **DELIVERY_COUNT, "user-id": "bob"})
        message = alice.message()
        assert {k: message.headers[k] for k in FACTS} == FACTS and message.headers["user-id"] == "bob"
        assert "JMSXDeliveryCount" not in message.headers  # this broker's count, even from a relay
        assert message.headers["JMSXUserID"] == "relay"  # stamped where the relay said nothing
        mallory.send_to("/queue/inbox", "plain", headers=FACTS)  # no impersonator tag: no relay
        message = alice.message()
        assert message.headers["user-id"] == message.headers["JMSXUserID"] == "mallory"
        assert not set(FACTS) & set(message.headers)
