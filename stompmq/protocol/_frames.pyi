from .frame import Frame
from .parser import Limits

def scan(
    buf: bytes | bytearray, pos: int, crlf: bool, version: str, limits: Limits, frames: list[Frame], /
) -> tuple[int, bool]: ...
def encode_message(
    subscription: str,
    message_id: int,
    destination: str,
    ack: str | None,
    redeliveries: int,
    version: str,
    tail: bytes,
    /,
) -> bytes: ...
def encode_message_tail(
    priority: int, timestamp: int, expires: int | None, headers: dict[str, str], body: bytes, version: str, /
) -> bytes: ...
def encode_message_tail_headers(
    priority: int, timestamp: int, expires: int | None, headers: dict[str, str], length: int, version: str, /
) -> bytes: ...
def headers_without(headers: dict[str, str], names: frozenset[str], /) -> dict[str, str]: ...
