"""Errors the broker raises while handling a client frame.

A ``ClientError`` becomes an ERROR frame (``message`` header = its text,
``receipt-id`` = the offending frame's receipt) and the connection closes, as
STOMP requires.  It never affects any other connection.
"""

from __future__ import annotations


class ClientError(Exception):
    """The client asked for something invalid; answer ERROR and close."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
