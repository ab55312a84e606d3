"""A first end-to-end check that a real broker answers over a real socket."""

from ..support.rawclient import RawClient


def test_send_subscribe_roundtrip(memory_broker):
    with RawClient(memory_broker.port) as c:
        c.connect()
        c.frame("SUBSCRIBE", {"id": "s", "destination": "/queue/a", "receipt": "r"})
        assert c.recv().headers["receipt-id"] == "r"
        c.frame("SEND", {"destination": "/queue/a", "x": "1"}, b"hello")
        msg = c.recv()
        assert msg.command == "MESSAGE" and msg.body == b"hello" and msg["x"] == "1"
