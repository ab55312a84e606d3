"""Sans-IO STOMP 1.0-1.2: feed bytes, get frames; give frames, get bytes.

Nothing here performs I/O or imports the rest of stompmq; the server owns
sockets, timers and the ERROR replies built from ``ProtocolError``.
"""

from .encoder import encode_frame, encode_header_block, escape
from .errors import LocalProtocolError, ProtocolError
from .frame import Frame
from .negotiation import (
    SUPPORTED_VERSIONS,
    connected_heart_beat,
    heart_beat_intervals,
    negotiate_version,
    parse_heart_beat,
)
from .parser import FrameParser, Limits

__all__ = [
    "SUPPORTED_VERSIONS",
    "Frame",
    "FrameParser",
    "Limits",
    "LocalProtocolError",
    "ProtocolError",
    "connected_heart_beat",
    "encode_frame",
    "encode_header_block",
    "escape",
    "heart_beat_intervals",
    "negotiate_version",
    "parse_heart_beat",
]
