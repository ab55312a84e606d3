"""The selector vectors run against stompmq and ActiveMQ side by side, over STOMP.

Every vector of tests/broker/test_selectors.py becomes one subscription (a connection each, since
ActiveMQ answers a selector it cannot parse with an ERROR) on a topic of its own, and the vectors'
message headers are sent once to each topic; each broker's answer is "match", "no", "error" (the
SUBSCRIBE refused) or "send-error" (the broker failed the SEND over the selector). Where they
differ must be exactly ``DIFFERENCES``, grouped by the rows of docs/selectors.md that explain
them, so a change on either side shows up. ActiveMQ Classic with a STOMP listener is expected on
loopback (``STOMPMQ_ACTIVEMQ_PORT``, 61616 by default); elsewhere the test is skipped, saying so.
The vectors' answers on stompmq alone are checked by the engine tests.

The MESSAGE's broker facts differ from the engine vectors' (a fresh message: not redelivered,
the brokers' own message id and timestamp), so some vectors answer otherwise here on both
brokers alike; only differences between the brokers count.
"""

from __future__ import annotations

import os
import select
import time
from pathlib import Path

import pytest

from stompmq.protocol import escape

from ..broker.test_selectors import GROUPS, HEADERS
from ..support.broker_process import BrokerProcess, port_open
from ..support.stompclient import Client

ACTIVEMQ_PORT = int(os.environ.get("STOMPMQ_ACTIVEMQ_PORT", "61616"))
#: Seconds after the SEND within which a matching subscriber gets its MESSAGE (ActiveMQ
#: dispatches to topic subscribers asynchronously, so a RECEIPT cannot mark the end).
QUIET = 3.0
SELECTORS = sorted({selector for vectors in GROUPS.values() for selector, _ in vectors})

#: selector -> (stompmq's answer, ActiveMQ's answer): the intended differences, each explained
#: in docs/selectors.md ("Types: where stompmq and ActiveMQ differ on purpose").
DIFFERENCES: dict[str, tuple[str, str]] = {
    # a quoted name reaches any header (ActiveMQ cannot parse one)
    '"correlation-id" = \'c-42\'': ('match', 'error'),
    '"message-id" = \'77\'': ('no', 'error'),
    '"priority" = 7': ('match', 'error'),
    '"redelivery-count" = 2': ('no', 'error'),
    '"with""quote" IS NULL': ('match', 'error'),
    '"x-other" IS NULL': ('match', 'error'),
    '"x-tenant" = \'acme\'': ('match', 'error'),
    '"x-tenant" IN (\'acme\', \'other\')': ('match', 'error'),
    '"x-tenant" IS NOT NULL': ('match', 'error'),
    '"x-tenant" LIKE \'ac%\'': ('match', 'error'),
    # a header that spells a number is that number; ActiveMQ compares the string, and its arithmetic
    # on a string throws, failing the producer's SEND for every subscriber of the topic
    '- neg = 3': ('match', 'no'),
    '-count = -12': ('match', 'no'),
    '5 < price': ('match', 'no'),
    'count * 2 = 24': ('match', 'send-error'),
    'count * 2 BETWEEN 20 AND 25': ('match', 'send-error'),
    'count + 1 = 13': ('match', 'no'),
    'count + price = 17.5': ('match', 'no'),
    'count - 2 = 10': ('match', 'send-error'),
    'count - count = 0': ('match', 'send-error'),
    'count / 0 = 1': ('no', 'send-error'),
    'count / 0 IS NULL': ('match', 'send-error'),
    'count / 5 = 2': ('match', 'send-error'),
    'count / 5.0 = 2.4': ('match', 'send-error'),
    'price * 2 = 11': ('match', 'send-error'),
    'price * 2 > 10': ('match', 'send-error'),
    'price < 6': ('match', 'no'),
    'price > 5': ('match', 'no'),
    'price BETWEEN 5 AND 10': ('match', 'no'),
    'price NOT BETWEEN 6 AND 10': ('match', 'no'),
    "region = 'eu' AND count = 12 AND price > 5": ('match', 'no'),
    'sci / 10 = 100': ('match', 'send-error'),
    'sci = 1000': ('match', 'no'),
    'sci BETWEEN 999 AND 1001': ('match', 'no'),
    'word * 2 IS NULL': ('match', 'send-error'),
    # integer division truncates (Java's long); ActiveMQ divides as doubles
    '-7 / 2 = -3': ('match', 'no'),
    '7 / 2 = 3': ('match', 'no'),
    # ActiveMQ gives a message with JMSXGroupID a JMSXGroupSeq of 0; stompmq only what was sent
    'JMSXGroupSeq IS NULL': ('match', 'no'),
    # NOT binds looser than a comparison (JMS's grammar); ActiveMQ reads NOT x = y as (NOT x) = y,
    # which throws and fails the SEND, and cannot parse NOT x BETWEEN
    "NOT NOT region = 'eu'": ('match', 'send-error'),
    'NOT count BETWEEN 1 AND 20': ('no', 'error'),
    'NOT missing IS NULL': ('no', 'match'),
    "NOT region = 'eu'": ('no', 'send-error'),
    "NOT region = 'us'": ('match', 'send-error'),
    "not region = 'us'": ('match', 'send-error'),
    # a header used as a condition reads true/false; ActiveMQ takes the string as not TRUE
    'NOT flag': ('no', 'match'),
    'NOT word': ('no', 'match'),
    'TRUE = flag': ('match', 'send-error'),
    'flag': ('match', 'no'),
    'flag AND NOT off': ('match', 'no'),
    # 012 is the decimal 12; ActiveMQ reads Java's octal 10
    'count = 012': ('match', 'no'),
    # numbers in IN lists compare as = does; ActiveMQ takes string literals only (JMS)
    'count IN (1, 2)': ('no', 'error'),
    'count IN (11, 12, 13)': ('match', 'error'),
    'count NOT IN (1, 2)': ('match', 'error'),
    'neg IN (-3, 3)': ('match', 'error'),
    'price IN (5.5)': ('match', 'error'),
    'priority IN (7, 8)': ('match', 'error'),
    'priority NOT IN (7)': ('no', 'error'),
    'word IN (1, 2)': ('no', 'error'),
    'word NOT IN (1, 2)': ('no', 'error'),
    # the broker's facts under their STOMP names (priority, timestamp, expires, type); ActiveMQ
    # knows them only as JMS names (type becomes JMSType)
    'expires > timestamp': ('match', 'no'),
    'priority * 10 = 70': ('match', 'no'),
    'priority = 7': ('match', 'no'),
    'priority > 4': ('match', 'no'),
    'priority BETWEEN 5 AND 9': ('match', 'no'),
    'priority IS NULL': ('no', 'match'),
    'timestamp > 0': ('match', 'no'),
    "type = 'order'": ('match', 'no'),
    "type IN ('order', 'refund')": ('match', 'no'),
    "type LIKE 'ord%'": ('match', 'no'),
    # Java's D and F literal suffixes; ActiveMQ refuses them
    'price = 5.5D': ('match', 'error'),
    'price = 5.5f': ('match', 'error'),
}


def answers(port: int, topic: str) -> dict[str, str]:
    """Each selector's answer on the broker at ``port``: its own topic (``topic``-N), so a
    selector that breaks a SEND (ActiveMQ: "send-error") breaks only its own vector."""
    result: dict[str, str] = {}
    waiting: dict[Client, str] = {}
    headers = {"priority": "7", "expires": "1800000000000"}
    headers.update({name: escape(value, "1.2") for name, value in HEADERS.items() if name != "persistent"})
    try:
        for i, selector in enumerate(SELECTORS):
            client = Client(port)
            client.frame("SUBSCRIBE", {"destination": f"{topic}-{i}", "id": "1", "ack": "auto", "receipt": "r",
                                       "selector": escape(selector, "1.2")})
            reply = client.recv()
            if reply.command == "ERROR":
                result[selector] = "error"
                client.close()
            else:
                assert reply.command == "RECEIPT", reply
                waiting[client] = selector
        producer = Client(port)
        try:
            for i, selector in enumerate(SELECTORS):
                if selector in result:
                    continue
                producer.frame("SEND", {"destination": f"{topic}-{i}", "receipt": "sent", **headers}, b"body")
                if producer.recv().command == "ERROR":  # the broker failed the SEND over this selector
                    result[selector] = "send-error"
                    producer.close()
                    producer = Client(port)
        finally:
            producer.close()
        deadline = time.monotonic() + QUIET
        while waiting and time.monotonic() < deadline:
            ready, _, _ = select.select([c.sock for c in waiting], [], [], max(0.0, deadline - time.monotonic()))
            for client in [c for c in waiting if c.sock in ready]:
                frame = client.recv()
                selector = waiting.pop(client)
                client.close()
                if selector not in result:
                    result[selector] = "match" if frame.command == "MESSAGE" else frame.command.lower()
        result.update({selector: "no" for selector in waiting.values() if selector not in result})
    finally:
        for client in waiting:
            client.close()
    return result


def test_selector_vectors_answer_as_activemq_does_but_for_the_documented_differences(tmp_path: Path) -> None:
    if not port_open(ACTIVEMQ_PORT):
        pytest.skip(f"ActiveMQ is not listening on 127.0.0.1:{ACTIVEMQ_PORT} (start ActiveMQ Classic with a STOMP listener there)")
    topic = f"/topic/selector-differential-{os.getpid()}"
    with BrokerProcess(tmp_path / "broker.db", "--http-port", "0").start() as broker:
        ours = answers(broker.port, topic)
    theirs = answers(ACTIVEMQ_PORT, topic)
    differences = {s: (ours[s], theirs[s]) for s in SELECTORS if ours[s] != theirs[s]}
    for selector, (mine, amq) in sorted(differences.items()):
        print(f"{selector!r}: stompmq {mine}, ActiveMQ {amq}")
    assert differences == DIFFERENCES
