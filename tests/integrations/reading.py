"""Reading a queue with stompmq's own parser (the raw test client leaves headers escaped)."""

from __future__ import annotations

from stompmq.protocol import Frame
from stompmq.sync_client import Connection


def first_message(port: int, queue: str) -> Frame:
    """The first MESSAGE of ``queue``, headers unescaped (stompmq's parser)."""
    with Connection(f"stomp://127.0.0.1:{port}") as conn:
        conn.subscribe(f"/queue/{queue}", ack="client-individual", id="0")
        frame = conn.receive(10)
        assert frame is not None and frame.command == "MESSAGE", frame
        return frame
