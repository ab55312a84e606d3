"""Errors the broker raises while handling a client frame.

A ``ClientError`` becomes an ERROR frame (``message`` header = its text,
``receipt-id`` = the offending frame's receipt) and the connection closes, as
STOMP requires.  It never affects any other connection.
"""

from __future__ import annotations


class ClientError(Exception):
    """The client asked for something invalid; answer ERROR and close.

    ``receipt_id`` is the offending frame's receipt when the raiser handled several frames
    (``Broker.handle_frames``); otherwise the caller knows the frame and takes it from there.
    """

    def __init__(self, message: str, receipt_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.receipt_id = receipt_id
