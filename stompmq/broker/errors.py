"""Errors the broker raises while handling a client frame.

A ``ClientError`` becomes an ERROR frame (``message`` header = its text,
``receipt-id`` = the offending frame's receipt) and the connection closes, as
STOMP requires.  It never affects any other connection.  It is a
``protocol.ProtocolError`` (the one root, protocol/errors.py) with the same
``message`` and ``receipt_id``, so a caller that answers any failed exchange
with an ERROR frame needs one ``except``.
"""

from __future__ import annotations

from ..protocol.errors import ProtocolError


class ClientError(ProtocolError):
    """The client asked for something invalid; answer ERROR and close.

    ``receipt_id`` is the offending frame's receipt when the raiser handled several frames
    (``Broker.handle_frames``); otherwise the caller knows the frame and takes it from there.
    """
