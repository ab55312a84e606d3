"""The protocol layer's two error types, in the manner of h11.

``ProtocolError``: the peer broke STOMP; its text goes into the ERROR frame's
``message`` header and the connection closes.  ``LocalProtocolError``: our own
code asked for something STOMP cannot express (a bug on our side).
"""

from __future__ import annotations


class ProtocolError(Exception):
    """The peer sent something STOMP does not allow."""

    def __init__(self, message: str, receipt_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.receipt_id = receipt_id


class LocalProtocolError(Exception):
    """We tried to produce something STOMP cannot express."""
