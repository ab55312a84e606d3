"""Property tests tying the encoder and the parser together.

- encode -> parse is the identity for every frame the version can express
  (S03/S05/S06/S08/S10): any header text incl. ``\\n : \\\\ \\r`` and non-ASCII
  for 1.2; 1.1 cannot carry a CR at the end of a value; 1.0 has no escaping.
- how the bytes are cut into reads never changes the result (S01);
- arbitrary or corrupted bytes only ever raise ProtocolError, and cutting them
  differently never changes whether they do;
- on frame-shaped input with plausible mistakes the parser agrees with a slow,
  independent line-by-line reading of the grammar (``_reference_parse``), ACK and
  NACK frames (the short path) among them, and with itself without the short path.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from stompmq.protocol import Frame, FrameParser, Limits, ProtocolError, encode_frame, escape
from stompmq.protocol import parser as parser_module

_NO_DEADLINE = settings(deadline=None)
"""Timing varies on shared machines; these tests check correctness, not speed."""


def _header_text(exclude: str = "") -> st.SearchStrategy[str]:
    """Return a strategy for header text without NUL (refused in headers) or ``exclude``.

    Only characters UTF-8 can encode (no surrogates); the characters escaping
    is about are drawn often on purpose.
    """
    special = [c for c in "\n\r:\\é😀" if c not in exclude]
    chars = st.characters(codec="utf-8", exclude_characters="\0" + exclude)
    return st.text(st.one_of(st.sampled_from(special), chars), max_size=20)


_SPECIAL_COMMANDS = {"CONNECT", "STOMP", "CONNECTED", "RECEIPT"}
"""Commands with their own rules (no escaping, or no body), covered by their own properties."""

_COMMANDS = st.one_of(
    st.sampled_from(["SEND", "MESSAGE", "ERROR", "SUBSCRIBE", "ACK", "NACK", "BEGIN"]),
    st.from_regex(r"\A[A-Za-z]{1,10}\Z").filter(lambda c: c not in _SPECIAL_COMMANDS),
)


def _no_trailing_cr(text: str) -> bool:
    return not text.endswith("\r")


_HEADER_TEXT = {
    "1.2": (_header_text(), _header_text()),
    "1.1": (_header_text(), _header_text().filter(_no_trailing_cr)),
    "1.0": (_header_text("\n:"), _header_text("\n").filter(_no_trailing_cr)),
}
"""(names, values) each version can carry unchanged."""


@st.composite
def _frames(draw: st.DrawFn, version: str) -> Frame:
    names, values = _HEADER_TEXT[version]
    headers = draw(st.dictionaries(names.filter(lambda n: n != "content-length"), values, max_size=6))
    command = draw(_COMMANDS)
    if command == "SEND" and version != "1.2":  # a raw CR in its headers is refused (parser.py)
        headers = {n.replace("\r", ""): v.replace("\r", "") for n, v in headers.items()}
        headers.pop("content-length", None)
    return Frame(command, headers, draw(st.binary(max_size=64)))


def _as_parsed(frame: Frame) -> Frame:
    """What the parser returns for an encoded ``frame``: the encoder appends content-length."""
    if frame.body or frame.command == "MESSAGE":
        return Frame(frame.command, {**frame.headers, "content-length": str(len(frame.body))}, frame.body)
    return frame


def _parser(version: str, limits: Limits = Limits()) -> FrameParser:
    parser = FrameParser(limits)
    parser.version = version
    return parser


def _feed_in_chunks(parser: FrameParser, data: bytes, cuts: list[int]) -> list[Frame]:
    frames: list[Frame] = []
    start = 0
    for cut in [*sorted(cuts), len(data)]:
        frames += parser.feed(data[start:cut])
        start = max(start, cut)
    return frames


def _check_round_trip(frame: Frame, version: str) -> None:
    [parsed] = _parser(version).feed(encode_frame(frame, version))
    expected = _as_parsed(frame)
    assert parsed == expected
    assert list(parsed.headers) == list(expected.headers)


@_NO_DEADLINE
@given(_frames("1.2"))
def test_s03_s05_round_trip_v12(frame: Frame) -> None:
    _check_round_trip(frame, "1.2")


@_NO_DEADLINE
@given(_frames("1.1"))
def test_s03_s05_round_trip_v11(frame: Frame) -> None:
    _check_round_trip(frame, "1.1")


@_NO_DEADLINE
@given(_frames("1.0"))
def test_s03_s05_round_trip_v10(frame: Frame) -> None:
    _check_round_trip(frame, "1.0")


@_NO_DEADLINE
@given(
    st.sampled_from(["CONNECT", "STOMP", "CONNECTED"]),
    st.dictionaries(_HEADER_TEXT["1.0"][0].filter(lambda n: n != "content-length"), _HEADER_TEXT["1.0"][1], max_size=6),
    st.sampled_from(["1.0", "1.1", "1.2"]),
)
def test_s03_s12_connect_frames_round_trip_unescaped(command: str, headers: dict[str, str], version: str) -> None:
    frame = Frame(command, headers, b"")
    [parsed] = _parser(version).feed(encode_frame(frame, version))
    assert parsed == frame


@_NO_DEADLINE
@given(st.lists(_frames("1.2"), max_size=8), st.data())
def test_s01_chunking_does_not_change_the_result(frames: list[Frame], data: st.DataObject) -> None:
    heart_beats = st.sampled_from([b"", b"", b"\n", b"\r\n", b"\n\r\n\n"])
    stream = b"".join(data.draw(heart_beats) + encode_frame(f, "1.2") for f in frames) + data.draw(heart_beats)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=20))
    assert _feed_in_chunks(FrameParser(), stream, cuts) == [_as_parsed(f) for f in frames]


@_NO_DEADLINE
@given(st.lists(_frames("1.2"), min_size=1, max_size=4), st.data())
def test_s01_any_mix_of_lf_and_crlf_parses_the_same(frames: list[Frame], data: st.DataObject) -> None:
    """Every line end (and the blank line) chosen independently as LF or CRLF."""
    eol = st.sampled_from([b"\n", b"\r\n"])
    stream = b""
    for frame in frames:
        lines = [frame.command] + [
            f"{escape(k, '1.2')}:{escape(v, '1.2')}" for k, v in _as_parsed(frame).headers.items()
        ]
        stream += b"".join(line.encode() + data.draw(eol) for line in lines) + data.draw(eol) + frame.body + b"\0"
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=10))
    assert _feed_in_chunks(FrameParser(), stream, cuts) == [_as_parsed(f) for f in frames]


@_NO_DEADLINE
@given(st.lists(st.one_of(_frames("1.2"), st.integers(parser_module.ASSEMBLE_BODIES - 2, 3 * 65536)), max_size=6),
       st.booleans(), st.data())
def test_s01_large_bodies_over_many_reads(items: list[Frame | int], views: bool, data: st.DataObject) -> None:
    """Bodies large enough to be assembled from their reads' pieces, among small frames, cut
    anywhere and fed as socket reads (bytes) or as views: the same frames as in one read."""
    frames = [f if isinstance(f, Frame) else Frame("SEND", {"destination": "/q"}, bytes([f % 251]) * f) for f in items]
    stream = b"".join(encode_frame(f, "1.2") for f in frames)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=12))
    got: list[Frame] = []
    parser, start = FrameParser(), 0
    for cut in [*sorted(cuts), len(stream)]:
        got += parser.feed(memoryview(stream)[start:cut] if views else stream[start:cut])
        start = max(start, cut)
    assert got == [_as_parsed(f) for f in frames]
    assert all(type(f.body) is bytes for f in got)


@_NO_DEADLINE
@given(st.integers(parser_module.ASSEMBLE_BODIES, 100_000), st.data())
def test_an_assembled_body_without_its_nul_is_refused_as_in_one_read(size: int, data: st.DataObject) -> None:
    stream = b"SEND\nreceipt:r\ncontent-length:%d\n\n%sX\0" % (size, b"b" * size)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=8))
    error, frames = _outcome(FrameParser(), stream, cuts)
    assert error is not None and frames == []
    assert (error.message, error.receipt_id) == (
        f"frame body is not followed by NUL after content-length {size}", "r")


_SMALL_LIMITS = Limits(max_body=40, max_header_bytes=40, max_headers=3)
"""Small enough that random input reaches every limit."""


def _outcome(parser: FrameParser, data: bytes, cuts: list[int]) -> tuple[ProtocolError | None, list[Frame]]:
    """Return (the ProtocolError raised, if any, frames); any other exception fails the test."""
    frames: list[Frame] = []
    start = 0
    try:
        for cut in [*sorted(cuts), len(data)]:
            frames += parser.feed(data[start:cut])
            start = max(start, cut)
    except ProtocolError as error:
        return error, frames
    return None, frames


def _check_garbage(data: bytes, cuts: list[int], version: str) -> None:
    whole_error, whole = _outcome(_parser(version, _SMALL_LIMITS), data, [])
    split_error, split = _outcome(_parser(version, _SMALL_LIMITS), data, cuts)
    assert (whole_error is None) == (split_error is None)
    if whole_error is None:
        assert whole == split


_VERSIONS = st.sampled_from(["1.0", "1.1", "1.2"])


@_NO_DEADLINE
@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=10), _VERSIONS)
def test_random_bytes_raise_only_protocol_errors(data: bytes, cuts: list[int], version: str) -> None:
    _check_garbage(data, cuts, version)


_STOMPISH = st.lists(
    st.sampled_from(
        [
            b"SEND",
            b"ACK\n",
            b"NACK\n",
            b"CONNECT",
            b"\n",
            b"\r\n",
            b"\r",
            b":",
            b"\\",
            b"\\n",
            b"\\c",
            b"\\r",
            b"\\t",
            b"\0",
            b"content-length:",
            b"3",
            b"-",
            b"k",
            b"\xc3",
            b"\xa9",
            b"receipt:1",
        ]
    ),
    max_size=60,
).map(b"".join)
"""Bytes built from STOMP's own tokens reach the parser's corners far more often than uniform noise."""


@_NO_DEADLINE
@given(_STOMPISH, st.lists(st.integers(0, 200), max_size=10), _VERSIONS)
def test_stomp_like_noise_raises_only_protocol_errors(data: bytes, cuts: list[int], version: str) -> None:
    _check_garbage(data, cuts, version)


def mutate(stream: bytearray, data: st.DataObject, edits: int, values: list[int]) -> None:
    """Make ``edits`` one-byte changes to ``stream``: replace, insert or delete, with ``values``."""
    for _ in range(edits):
        at = data.draw(st.integers(0, len(stream)))
        action = data.draw(st.sampled_from(["replace", "insert", "delete"]))
        byte = data.draw(st.sampled_from(values))
        if action == "insert":
            stream[at:at] = bytes([byte])
        elif at < len(stream):
            if action == "replace":
                stream[at] = byte
            else:
                del stream[at]


@settings(_NO_DEADLINE, max_examples=150)
@given(st.lists(_frames("1.2"), min_size=1, max_size=4), st.data())
def test_corrupted_streams_raise_only_protocol_errors(frames: list[Frame], data: st.DataObject) -> None:
    stream = bytearray(b"".join(encode_frame(f, "1.2") for f in frames))
    mutate(stream, data, data.draw(st.integers(1, 4)), [0, 10, 13, 58, 92, 65, 0xFF])
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=10))
    _check_garbage(bytes(stream), cuts, "1.2")


_REFERENCE_ESCAPES = {
    "1.0": {},
    "1.1": {"n": "\n", "c": ":", "\\": "\\"},
    "1.2": {"n": "\n", "c": ":", "\\": "\\", "r": "\r"},
}


class _Refused(Exception):
    pass


def _reference_unescape(text: str, version: str) -> str:
    if version == "1.0":
        return text
    out, chars = [], iter(text)
    for char in chars:
        if char == "\\":
            escaped = _REFERENCE_ESCAPES[version].get(next(chars, ""))
            if escaped is None:
                raise _Refused
            char = escaped
        out.append(char)
    return "".join(out)


def _reference_parse(data: bytes, version: str) -> list[Frame]:
    """A slow line-by-line reading of the STOMP grammar, written independently of the parser."""
    frames: list[Frame] = []
    negotiated = False
    i = 0
    while True:
        while data.startswith(b"\n", i) or data.startswith(b"\r\n", i):
            i += 1 if data[i] == 10 else 2
        if i >= len(data):
            return frames
        if data[i] < 65 and data[i:] != b"\r":  # no command starts below "A"; a lone CR may await its LF
            raise _Refused
        start, lines = i, list[bytes]()
        while True:
            j = data.find(b"\n", i)
            if j < 0:  # incomplete header block: only a NUL in it is already fatal
                if b"\0" in data[start:]:
                    raise _Refused
                return frames
            line, i = data[i:j], j + 1
            line = line[:-1] if line.endswith(b"\r") else line
            if not line and lines:
                break
            lines.append(line)
        if any(b"\0" in line for line in lines):
            raise _Refused
        try:
            command, *header_lines = [line.decode() for line in lines]
        except UnicodeDecodeError:
            raise _Refused from None
        if not (command.isascii() and command.isalpha()):
            raise _Refused
        headers: dict[str, str] = {}
        if command == "SEND" and any("\r" in header for header in header_lines):
            raise _Refused  # a raw CR: 1.2 allows one only escaped, 1.0/1.1 receivers misread it
        for header in header_lines:
            if ":" not in header:
                raise _Refused
            name, value = header.split(":", 1)
            if command not in ("CONNECT", "STOMP", "CONNECTED"):
                name, value = _reference_unescape(name, version), _reference_unescape(value, version)
            headers.setdefault(name, value)
        if command in ("CONNECT", "STOMP") and not negotiated:
            negotiated = True
            offered = headers.get("accept-version")
            versions = ["1.0"] if offered is None else [v.strip() for v in offered.split(",")]
            version = next((v for v in ("1.2", "1.1", "1.0") if v in versions), version)
        if "content-length" in headers:
            length = headers["content-length"]
            if not (length.isascii() and length.isdigit()):
                raise _Refused
            end = i + int(length)
            if end >= len(data):
                return frames
            if data[end] != 0:
                raise _Refused
        else:
            end = data.find(b"\0", i)
            if end < 0:
                return frames
        frames.append(Frame(command, headers, data[i:end]))
        i = end + 1


def _reference_outcome(data: bytes, version: str) -> tuple[bool, list[Frame]]:
    try:
        return False, _reference_parse(data, version)
    except _Refused:
        return True, []


_PIECES = st.sampled_from(
    [b"a", b"k", b":", b"\\", b"\\n", b"\\c", b"\\r", b"\\t", b"\r", b" ", b"\xc3\xa9", b"\xff", b"\0"]
)
_EOL = st.sampled_from([b"\n", b"\n", b"\r\n"])
_TEXT = st.lists(_PIECES, max_size=4).map(b"".join)
_HEADER_LINE = st.one_of(
    st.builds(lambda name, value: name + b":" + value, _TEXT, _TEXT),
    _TEXT,  # often without a colon
    st.sampled_from([b"content-length:", b"accept-version:"]).flatmap(
        lambda name: st.sampled_from([b"0", b"1", b"2", b"x", b"-1", b"", b"1.0", b"1.1", b"1.0,1.1"]).map(
            lambda value: name + value
        )
    ),
)


@st.composite
def _frameish(draw: st.DrawFn) -> bytes:
    """A frame-shaped byte string with plausible mistakes in every part."""
    command = draw(
        st.sampled_from([b"SEND", b"SEND", b"ACK", b"NACK", b"CONNECT", b"STOMP", b"CONNECTED", b"send", b"S1", b"\r"])
    )
    lines = draw(st.lists(st.tuples(_HEADER_LINE, _EOL), max_size=4))
    body = draw(st.lists(st.sampled_from([b"x", b"\0", b"\n", b"\r\n"]), max_size=4).map(b"".join))
    return (
        draw(st.sampled_from([b"", b"", b"\n", b"\r\n"]))
        + command
        + draw(_EOL)
        + b"".join(line + eol for line, eol in lines)
        + draw(_EOL)
        + body
        + draw(st.sampled_from([b"\0", b"\0", b""]))
    )


@settings(_NO_DEADLINE, max_examples=300)
@given(st.lists(_frameish(), max_size=4).map(b"".join), _VERSIONS, st.lists(st.integers(0, 200), max_size=8))
def test_parser_agrees_with_a_reference_reading_of_the_grammar(data: bytes, version: str, cuts: list[int]) -> None:
    """Same frames, or both refuse the stream, whether it is read whole or in pieces."""
    expected = _reference_outcome(data, version)
    for pieces in ([], cuts):
        error, frames = _outcome(_parser(version), data, pieces)
        failed = error is not None
        assert (failed, frames if not failed else []) == expected


@settings(_NO_DEADLINE, max_examples=300)
@given(st.lists(_frameish(), max_size=4).map(b"".join), _VERSIONS, st.lists(st.integers(0, 200), max_size=8))
def test_the_ack_short_path_changes_no_frame_and_no_error(data: bytes, version: str, cuts: list[int]) -> None:
    """The parser with and without ``_short_ack``: the same frames, or the same error message."""

    def outcome() -> tuple[tuple[str, str | None] | None, list[Frame]]:
        error, frames = _outcome(_parser(version, _SMALL_LIMITS), data, cuts)
        return (error.message, error.receipt_id) if error is not None else None, frames

    with_short = outcome()
    real = parser_module._short_ack
    parser_module._short_ack = lambda *args: None
    try:
        without = outcome()
    finally:
        parser_module._short_ack = real
    assert with_short == without
