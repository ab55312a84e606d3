"""One error root (protocol/errors.py): our own misuse and the broker's refusals are
``ProtocolError``s with its ``message`` and ``receipt_id``, as h11's errors share one root."""

from __future__ import annotations

import pytest

from stompmq.broker.errors import ClientError
from stompmq.protocol import Frame, LocalProtocolError, ProtocolError, encode_frame


def test_an_inexpressible_frame_is_a_local_protocol_error_under_the_root() -> None:
    with pytest.raises(ProtocolError) as caught:
        encode_frame(Frame("SEND", {"a\nb": "c"}), "1.0")
    assert type(caught.value) is LocalProtocolError
    assert caught.value.message == str(caught.value) and caught.value.receipt_id is None


def test_a_broker_refusal_shares_the_roots_shape() -> None:
    refusal = ClientError("no such transaction", receipt_id="r7")
    assert isinstance(refusal, ProtocolError) and not isinstance(refusal, LocalProtocolError)
    assert (refusal.message, refusal.receipt_id) == ("no such transaction", "r7")
