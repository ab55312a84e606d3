"""The native codec (``_frames.c``) against the pure-Python reference, fuzzed.

Every other test in tests/protocol already runs against both implementations
(conftest.py).  These feed both the same random and mutated streams, cut at
random points, under every version and under limits small enough to be hit,
and require after every ``feed``: the same frames (types, header order and
all), the same ProtocolError (message and receipt id), and the same parser
state, so a stream can switch implementation at any read.  The encoders must
produce the same bytes, or raise the same exception type.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from stompmq.protocol import Frame, FrameParser, Limits, LocalProtocolError, ProtocolError, encode_frame, encoder
from stompmq.protocol import headers as headers_mod
from stompmq.protocol import native as native_module

from .test_properties import _STOMPISH, _frameish, _frames, mutate

_frames_c = pytest.importorskip("stompmq.protocol._frames")  # test_native_codec_is_built fails loudly instead

_FUZZ = settings(deadline=None, max_examples=int(os.environ.get("STOMPMQ_FUZZ_EXAMPLES", "400")))
"""A longer hunt: STOMPMQ_FUZZ_EXAMPLES=20000 pytest tests/protocol/test_native.py"""
_VERSIONS = st.sampled_from(["1.0", "1.1", "1.2"])
_LIMITS = st.sampled_from(
    [
        Limits(),
        Limits(max_body=40, max_header_bytes=40, max_headers=3),
        Limits(max_body=5, max_header_bytes=12, max_headers=1),
        Limits(max_body=0, max_header_bytes=0, max_headers=0),
        Limits(max_body=-3, max_header_bytes=-3, max_headers=-1),  # nonsense, but never a wild read
    ]
)


@pytest.fixture
def native() -> bool:
    """This module compares both implementations itself (overrides conftest.py's parametrisation)."""
    return True


def test_native_codec_is_built() -> None:
    # setup.py marks the extension optional so installs without a compiler still work, but every
    # machine we test and benchmark on has one: a silent fallback would go unnoticed.
    assert native_module.BUILT is not None, "stompmq.protocol._frames is missing: reinstall (pip install -e .)"


_PENDING_FRAME = ("_headers", "_body_start", "_body_len")
"""State that describes a frame whose body is still arriving, meaningful only while ``_command`` is set."""


def _state(parser: FrameParser) -> dict[str, Any]:
    state = {k: v for k, v in vars(parser).items() if k not in ("_native_scan", "_error")}
    if state["_command"] is None:
        for name in _PENDING_FRAME:
            del state[name]
    return state


def _shape(frames: list[Frame]) -> list[tuple[Any, ...]]:
    """What equality of NamedTuples would miss: the types and the header order."""
    return [(type(f), type(f.command), f.command, list(f.headers.items()), type(f.body), f.body) for f in frames]


def _trace(native: bool, data: bytes, cuts: list[int], version: str, limits: Limits) -> list[tuple[Any, ...]]:
    parser = FrameParser(limits, native=native)
    parser.version = version
    trace: list[tuple[Any, ...]] = []
    start = 0
    for cut in [*sorted(cuts), len(data)]:
        try:
            frames = parser.feed(data[start:cut])
        except ProtocolError as error:
            trace.append(("error", error.message, error.receipt_id))
            with pytest.raises(ProtocolError) as again:  # and it stays broken
                parser.feed(b"SEND\n\n\0")
            assert again.value is error
            return trace
        trace.append(("frames", _shape(frames), _state(parser)))
        start = max(start, cut)
    return trace


def _check(data: bytes, cuts: list[int], version: str, limits: Limits) -> None:
    assert _trace(True, data, cuts, version, limits) == _trace(False, data, cuts, version, limits)


def _cuts(size: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, size), max_size=12)


@_FUZZ
@given(st.binary(max_size=300), _cuts(300), _VERSIONS, _LIMITS)
def test_random_bytes(data: bytes, cuts: list[int], version: str, limits: Limits) -> None:
    _check(data, cuts, version, limits)


@_FUZZ
@given(_STOMPISH, _cuts(200), _VERSIONS, _LIMITS)
def test_stomp_like_noise(data: bytes, cuts: list[int], version: str, limits: Limits) -> None:
    _check(data, cuts, version, limits)


@_FUZZ
@given(st.lists(_frameish(), max_size=5).map(b"".join), _cuts(250), _VERSIONS, _LIMITS)
def test_frame_shaped_input_with_mistakes(data: bytes, cuts: list[int], version: str, limits: Limits) -> None:
    _check(data, cuts, version, limits)


_HEART_BEATS = st.sampled_from([b"", b"", b"\n", b"\r\n", b"\n\n"])


@_FUZZ
@given(st.sampled_from(["1.0", "1.1", "1.2"]).flatmap(lambda v: st.tuples(st.just(v), st.lists(_frames(v), max_size=5))),
       st.data())
def test_valid_streams_mutated_and_cut(version_frames: tuple[str, list[Frame]], data: st.DataObject) -> None:
    """Encoded frames (escaping, content-length, LF or CRLF) with a few bytes changed."""
    version, frames = version_frames
    stream = bytearray()
    for frame in frames:
        encoded = encode_frame(frame, version)
        if data.draw(st.booleans()):  # CRLF line ends in the header block
            head, sep, rest = encoded.partition(b"\n\n")
            encoded = head.replace(b"\n", b"\r\n") + b"\r\n\r\n" + rest if sep else encoded
        stream += data.draw(_HEART_BEATS) + encoded
    mutate(stream, data, data.draw(st.integers(0, 3)), [0, 10, 13, 58, 92, 65, 0xC3, 0xFF])
    _check(bytes(stream), data.draw(_cuts(len(stream))), version, data.draw(_LIMITS))


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_byte_at_a_time(version: str) -> None:
    stream = (
        b"CONNECT\naccept-version:1.1,1.2\n\n\0\n"
        + b"SEND\ndestination:/q/\\c\xc3\xa9\ncontent-length:3\nreceipt:r\\n1\n\na\0b\0"
        + b"SEND\r\nk:v\r\n\r\nbody\0\r\n"
        + b"ACK\nid:1\nid:2\n\n\0"
        + b"NACK\nid:3\nk\\t:v\n\n\0"
    )
    _check(stream, list(range(len(stream))), version, Limits())


_CLEAN = [
    b"SEND\ndestination:/queue/a\ncontent-length:5\n\nhello\0",
    b"SEND\ndestination:/queue/a\nreceipt:77\n\nno length\0\n",
    b"SEND\r\ndestination:/queue/crlf\r\n\r\nx\0\r\n",
    b"SEND\ndestination:/queue/esc\\c\\n\\\\\nk:v\nk:repeat\n\n\0",
    "SEND\ndestination:/queue/café\nñ:ü😀\n\n\0".encode(),
    b"ACK\nid:12\n\n\0",
    b"NACK\nid:13\n\n\0",
    b"SUBSCRIBE\nid:1\ndestination:/topic/t\nack:client-individual\n\n\0",
    b"BEGIN\ntransaction:t\n\n\0COMMIT\ntransaction:t\n\n\0",
    b"MESSAGE\nsubscription:1\nmessage-id:9\ndestination:/queue/a\ncontent-length:2\n\nhi\0",
    b"DISCONNECT\nreceipt:bye\n\n\0",
]


def test_clean_frames_are_all_taken_by_the_fast_path() -> None:
    """No silent slow path: scan consumes every ordinary frame itself, not only the odd ones."""
    stream = bytearray(b"".join(_CLEAN) * 100)
    frames: list[Frame] = []
    pos, crlf = _frames_c.scan(stream, 0, False, "1.2", Limits(), frames)
    assert pos == len(stream)
    assert _shape(frames) == _shape(FrameParser(native=False).feed(bytes(stream)))
    read: list[Frame] = []  # a socket read (bytes) is scanned where it lies, the same
    assert _frames_c.scan(bytes(stream), 0, False, "1.2", Limits(), read) == (pos, crlf)
    assert _shape(read) == _shape(frames)


@pytest.mark.parametrize(
    "stream",
    [b"CONNECT\n\n\0", b"STOMP\n\n\0", b"SEND\nk\n\n\0", b"SEND\n\nab", b"SEND\ncontent-length:9\n\nab\0", b"SEND\n"],
)
def test_scan_defers_what_python_decides(stream: bytes) -> None:
    """Negotiation, errors and incomplete frames are left where they start, for parser.py."""
    frames: list[Frame] = []
    assert _frames_c.scan(bytearray(b"\n" + stream), 0, True, "1.2", Limits(), frames) == (1, True)
    assert frames == []


# ---- the MESSAGE encoder -------------------------------------------------------------------

_TEXT = st.text(st.one_of(st.sampled_from(list("\n\r:\\é😀")), st.characters(codec="utf-8")), max_size=12)
_ANY_VERSION = st.sampled_from(["1.0", "1.1", "1.2", "2.0", ""])


def _outcome(function: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", function(*args)
    except (LocalProtocolError, UnicodeEncodeError, TypeError) as error:
        return type(error).__name__, str(error) if isinstance(error, LocalProtocolError) else None


_INT64 = st.integers(-(2**63), 2**63 - 1)  # the store's integers; _frames.c refuses wider ones (OverflowError)


@_FUZZ
@given(_TEXT, _INT64, _TEXT, st.none() | _TEXT, st.one_of(st.integers(0, 3), _INT64), _ANY_VERSION, st.binary())
@example("", 0, "", None, 2**63 - 1, "1.0", b"")  # JMSXDeliveryCount, one more than the largest count
def test_encode_message_matches(
    subscription: str, message_id: int, destination: str, ack: str | None, redeliveries: int, version: str, tail: bytes
) -> None:
    args = (subscription, message_id, destination, ack, redeliveries, version, tail)
    assert _outcome(_frames_c.encode_message, *args) == _outcome(encoder._message, *args)


@_FUZZ
@given(st.one_of(st.integers(0, 9), _INT64), _INT64, st.none() | _INT64,
       st.dictionaries(_TEXT, _TEXT, max_size=5), st.binary(max_size=50), _ANY_VERSION)
def test_encode_message_tail_matches(
    priority: int, timestamp: int, expires: int | None, headers: dict[str, str], body: bytes, version: str
) -> None:
    args = (priority, timestamp, expires, headers, body, version)
    assert _outcome(_frames_c.encode_message_tail, *args) == _outcome(encoder._message_tail, *args)


@_FUZZ
@given(st.one_of(st.integers(0, 9), _INT64), _INT64, st.none() | _INT64,
       st.dictionaries(_TEXT, _TEXT, max_size=5), st.binary(max_size=50), _ANY_VERSION)
def test_encode_message_tail_headers_matches(
    priority: int, timestamp: int, expires: int | None, headers: dict[str, str], body: bytes, version: str
) -> None:
    """The tail up to its blank line: the same bytes from both, and with the body and a NUL after
    it the whole tail (what the server sends by scatter/gather)."""
    args = (priority, timestamp, expires, headers, len(body), version)
    outcome = _outcome(_frames_c.encode_message_tail_headers, *args)
    assert outcome == _outcome(encoder._message_tail_headers, *args)
    if outcome[0] == "ok":
        assert outcome[1] + body + b"\0" == _frames_c.encode_message_tail(*args[:4], body, version)


def test_encode_message_tail_headers_refuses_a_negative_length() -> None:
    for function in (_frames_c.encode_message_tail_headers, encoder._message_tail_headers):
        with pytest.raises(ValueError):
            function(4, 0, None, {}, -1, "1.2")


def test_encoders_refuse_unencodable_text_alike() -> None:
    for function in (_frames_c.encode_message, encoder._message):
        with pytest.raises(UnicodeEncodeError):
            function("\ud800", 1, "/q", None, 0, "1.2", b"")
    for function in (_frames_c.encode_message_tail, encoder._message_tail):
        with pytest.raises(UnicodeEncodeError):
            function(4, 0, None, {"k": "\udfff"}, b"", "1.2")


@_FUZZ
@given(st.dictionaries(_TEXT, _TEXT, max_size=8), st.frozensets(_TEXT, max_size=6), st.data())
def test_headers_without_matches(headers: dict[str, str], names: frozenset[str], data: st.DataObject) -> None:
    names |= data.draw(st.frozensets(st.sampled_from(sorted(headers) or [""]), max_size=4))  # names it has
    native_result = _frames_c.headers_without(headers, names)
    assert list(native_result.items()) == list(headers_mod._headers_without(headers, names).items())  # and order
    assert native_result is not headers and set(names).isdisjoint(native_result)


def test_headers_without_refuses_what_is_not_a_dict_and_a_set() -> None:
    bad_args: tuple[tuple[Any, ...], ...] = (([("a", "b")], frozenset()), ({"a": "b"}, ["a"]), ({"a": "b"},))
    for bad in bad_args:
        with pytest.raises(TypeError):
            _frames_c.headers_without(*bad)


def test_pure_python_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """STOMPMQ_PURE_PYTHON_CODEC=1 keeps the extension out of the parser and the encoder."""
    import subprocess
    import sys

    code = (
        "from stompmq.protocol import FrameParser, encoder, headers, native;"
        "print(native.describe(), native.NATIVE, FrameParser()._native_scan is None,"
        " encoder.encode_message is encoder._message, headers.headers_without is headers._headers_without, sep='|')"
    )
    for value, expected in (
        ("1", "pure Python (STOMPMQ_PURE_PYTHON_CODEC is set)|False|True|True|True"),
        ("0", "native|True|False|False|False"),
    ):
        env = {**os.environ, native_module.ENV_VAR: value}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == expected
