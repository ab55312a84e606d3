"""Reading a queue with stompmq's own parser (the raw test client leaves headers escaped)."""

from __future__ import annotations

from stompmq.integrations.blocking import BlockingConnection
from stompmq.integrations.url import StompURL
from stompmq.protocol import Frame


def first_message(port: int, queue: str) -> Frame:
    """The first MESSAGE of ``queue``, headers unescaped (stompmq's parser)."""
    conn = BlockingConnection(StompURL.parse(f"stomp://127.0.0.1:{port}"))
    try:
        conn.request("SUBSCRIBE", {"destination": f"/queue/{queue}", "id": "0", "ack": "client-individual"})
        frame = conn.receive(10)
        assert frame is not None and frame.command == "MESSAGE", frame
        return frame
    finally:
        conn.close()
