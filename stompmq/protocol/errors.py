"""stompmq's error root, in the manner of h11.

``ProtocolError`` is the root: a STOMP exchange cannot go on.  Raised as itself, the peer broke
STOMP; its text goes into the ERROR frame's ``message`` header and the connection closes.  Two
kinds derive from it, as h11's ``LocalProtocolError`` does from its ``ProtocolError``:

* ``LocalProtocolError``: our own code asked for something STOMP cannot express (a bug on our
  side, or a header a STOMP 1.0 peer cannot be sent);
* ``broker.errors.ClientError``: a well-formed frame asked the broker for something it refuses
  (a destination it does not allow, an unknown transaction); answered like the first.

A handler that must not mistake one for another catches the subclass first; the places that
catch ``ProtocolError`` itself wrap only parsing (``parser.feed``, ``parse_heart_beat``), which
raises nothing else.
"""

from __future__ import annotations


class ProtocolError(Exception):
    """The root: the peer sent something STOMP does not allow (or, in a subclass, see above).

    ``receipt_id`` is the offending frame's receipt when known, for the ERROR frame."""

    def __init__(self, message: str, receipt_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.receipt_id = receipt_id


class LocalProtocolError(ProtocolError):
    """We tried to produce something STOMP cannot express."""
