"""Tests for protocol/parser.py, table-driven over raw bytes.

Each case names the STOMP-CHECKLIST row it covers.  Every valid case is also
fed one byte at a time, and every invalid case must fail that way too, so the
incremental paths (resumed searches, partial CRLF, pending bodies) see the
same inputs as the one-shot path.
"""

from __future__ import annotations

from typing import NamedTuple

import pytest

from stompmq.protocol import Frame, FrameParser, Limits, ProtocolError
from stompmq.protocol import parser as parser_module


class Ok(NamedTuple):
    id: str
    data: bytes
    frames: list[Frame]
    version: str = "1.2"


class Bad(NamedTuple):
    id: str
    data: bytes
    error: str  # a fragment of the ProtocolError message
    version: str = "1.2"
    limits: Limits = Limits()


OK_CASES = [
    # S01: line ends and heart-beats
    Ok("s01_lf", b"SEND\ndestination:/q\n\nhi\0", [Frame("SEND", {"destination": "/q"}, b"hi")]),
    Ok("s01_crlf", b"SEND\r\ndestination:/q\r\n\r\nhi\0", [Frame("SEND", {"destination": "/q"}, b"hi")]),
    Ok("s01_crlf_no_headers", b"DISCONNECT\r\n\r\n\0", [Frame("DISCONNECT", {}, b"")]),
    Ok("s01_mixed_line_ends", b"SEND\r\na:1\nb:2\r\n\nx\0", [Frame("SEND", {"a": "1", "b": "2"}, b"x")]),
    Ok("s01_crlf_then_lf_blank_line", b"SEND\r\na:1\r\n\nx\0", [Frame("SEND", {"a": "1"}, b"x")]),
    Ok("s01_lf_then_crlf_blank_line", b"SEND\na:1\n\r\nx\0", [Frame("SEND", {"a": "1"}, b"x")]),
    Ok(
        "s01_heart_beats_before_and_between",
        b"\n\r\n\nSEND\n\n\0\n\n\r\nBEGIN\ntransaction:t\n\n\0\r\n",
        [Frame("SEND", {}, b""), Frame("BEGIN", {"transaction": "t"}, b"")],
    ),
    Ok("s01_only_heart_beats", b"\n\r\n\n\r\n", []),
    Ok(
        "s01_no_heart_beats_between",
        b"ACK\nid:1\n\n\0ACK\nid:2\n\n\0",
        [Frame("ACK", {"id": "1"}, b""), Frame("ACK", {"id": "2"}, b"")],
    ),
    Ok("s01_incomplete_frame_waits", b"SEND\ndestination:/q\n\nhi", []),
    Ok(
        "s01_crlf_frames_back_to_back_switch_style",
        b"A\r\nk:1\r\n\r\n\0B\nk:2\n\n\0C\r\nk:3\r\n\r\n\0",
        [Frame("A", {"k": "1"}, b""), Frame("B", {"k": "2"}, b""), Frame("C", {"k": "3"}, b"")],
    ),
    # S02: case-sensitive commands and header names
    Ok("s02_lowercase_command_kept", b"send\n\n\0", [Frame("send", {}, b"")]),
    Ok(
        "s02_header_names_case_sensitive",
        b"SEND\nDestination:a\ndestination:b\n\n\0",
        [Frame("SEND", {"Destination": "a", "destination": "b"}, b"")],
    ),
    # S03: unescaping per version, never for CONNECT/STOMP
    Ok("s03_v12_escapes", b"MESSAGE\nk\\cx:a\\nb\\\\c\\rd\n\n\0", [Frame("MESSAGE", {"k:x": "a\nb\\c\rd"}, b"")]),
    Ok("s03_v12_cr_escape_in_send_value", b"SEND\nk:a\\rb\n\n\0", [Frame("SEND", {"k": "a\rb"}, b"")]),
    Ok("s03_v12_cr_escape_in_send_name", b"SEND\na\\rb:v\n\n\0", [Frame("SEND", {"a\rb": "v"}, b"")]),
    Ok("s03_v12_cr_escape_at_value_end", b"SEND\nk:a\\r\n\n\0", [Frame("SEND", {"k": "a\r"}, b"")]),
    Ok("s03_v12_cr_escape_outside_send", b"SUBSCRIBE\nid:a\\rb\n\n\0", [Frame("SUBSCRIBE", {"id": "a\rb"}, b"")]),
    Ok("s03_escaped_backslash_before_r_is_no_cr", b"SEND\nk:a\\\\rb\n\n\0", [Frame("SEND", {"k": "a\\rb"}, b"")]),
    Ok("s03_v11_escapes", b"SEND\nk\\cx:a\\nb\\\\c\n\n\0", [Frame("SEND", {"k:x": "a\nb\\c"}, b"")], "1.1"),
    Ok("s03_v10_literal", b"SEND\nk\\cx:a\\nb\\\\c\\t\n\n\0", [Frame("SEND", {"k\\cx": "a\\nb\\\\c\\t"}, b"")], "1.0"),
    Ok(
        "s03_connect_never_unescaped",
        b"CONNECT\naccept-version:1.2\nlogin:a\\nb\\t\n\n\0",
        [Frame("CONNECT", {"accept-version": "1.2", "login": "a\\nb\\t"}, b"")],
    ),
    Ok(
        "s03_connected_never_unescaped",
        b"CONNECTED\nserver:a\\cb\n\n\0",
        [Frame("CONNECTED", {"server": "a\\cb"}, b"")],
    ),
    Ok("s03_stomp_never_unescaped", b"STOMP\npasscode:x\\cy\n\n\0", [Frame("STOMP", {"passcode": "x\\cy"}, b"")]),
    Ok("s03_escaped_backslash_before_n", b"SEND\nk:\\\\n\n\n\0", [Frame("SEND", {"k": "\\n"}, b"")]),
    # S06: never trim or pad; split on the first colon only
    Ok("s06_spaces_kept", b"SEND\n k : v \n\n\0", [Frame("SEND", {" k ": " v "}, b"")]),
    Ok("s06_value_with_colons", b"SEND\nk:a:b::c\n\n\0", [Frame("SEND", {"k": "a:b::c"}, b"")], "1.0"),
    Ok("s06_value_with_colons_v12", b"SEND\nk:a:b\n\n\0", [Frame("SEND", {"k": "a:b"}, b"")]),
    Ok("s06_empty_value", b"SEND\nk:\n\n\0", [Frame("SEND", {"k": ""}, b"")]),
    Ok("s06_empty_name", b"SEND\n:v\n\n\0", [Frame("SEND", {"": "v"}, b"")]),
    Ok("s06_cr_before_lf_is_eol", b"SEND\nk:v\r\n\n\0", [Frame("SEND", {"k": "v"}, b"")]),
    Ok("s06_inner_cr_kept", b"MESSAGE\nk:a\rb\n\n\0", [Frame("MESSAGE", {"k": "a\rb"}, b"")]),
    Ok("s06_only_last_cr_is_eol", b"MESSAGE\nk:v\r\r\n\n\0", [Frame("MESSAGE", {"k": "v\r"}, b"")]),
    # S08: content-length
    Ok(
        "s08_content_length_with_nul",
        b"SEND\ncontent-length:3\n\na\0b\0",
        [Frame("SEND", {"content-length": "3"}, b"a\0b")],
    ),
    Ok("s08_content_length_zero", b"SEND\ncontent-length:0\n\n\0", [Frame("SEND", {"content-length": "0"}, b"")]),
    Ok(
        "s08_content_length_leading_zeros",
        b"SEND\ncontent-length:002\n\nab\0",
        [Frame("SEND", {"content-length": "002"}, b"ab")],
    ),
    Ok(
        "s08_content_length_body_holds_frame_lookalike",
        b"SEND\ncontent-length:10\n\nSEND\n\n\0\n\n\0\0",
        [Frame("SEND", {"content-length": "10"}, b"SEND\n\n\0\n\n\0")],
    ),
    Ok(
        "s08_no_content_length_first_nul",
        b"SEND\n\nab\0SEND\n\ncd\0",
        [Frame("SEND", {}, b"ab"), Frame("SEND", {}, b"cd")],
    ),
    Ok("s08_body_with_blank_lines", b"SEND\n\na\n\nb\r\n\r\n\0", [Frame("SEND", {}, b"a\n\nb\r\n\r\n")]),
    # S10: UTF-8 headers, body bytes untouched
    Ok(
        "s10_utf8_headers",
        "SEND\ndestination:/queue/café\nñ:ü😀\n\n\0".encode(),
        [Frame("SEND", {"destination": "/queue/café", "ñ": "ü😀"}, b"")],
    ),
    Ok("s10_body_bytes_untouched", b"SEND\n\n\xff\xfe\r\n\\c\0", [Frame("SEND", {}, b"\xff\xfe\r\n\\c")]),
    # S11: the first of a repeated header wins
    Ok("s11_first_header_wins", b"SEND\nk:1\nk:2\nk:3\n\n\0", [Frame("SEND", {"k": "1"}, b"")]),
    Ok("s11_first_wins_with_escapes", b"SEND\nk:1\\c\nk\\c:x\nk:2\n\n\0", [Frame("SEND", {"k": "1:", "k:": "x"}, b"")]),
    Ok("s11_first_wins_after_unescaping_name", b"ACK\na\rb:1\na\\rb:2\n\n\0", [Frame("ACK", {"a\rb": "1"}, b"")]),
    Ok(
        "s11_first_content_length_wins",
        b"SEND\ncontent-length:1\ncontent-length:5\n\na\0",
        [Frame("SEND", {"content-length": "1"}, b"a")],
    ),
    # S35: bodies and header blocks exactly at the limits are fine
    Ok("s35_body_at_limit", b"SEND\n\n" + b"x" * 10 + b"\0", [Frame("SEND", {}, b"x" * 10)]),
    # server frames parse too (test clients use the parser)
    Ok("server_frames", b"RECEIPT\nreceipt-id:9\n\n\0", [Frame("RECEIPT", {"receipt-id": "9"}, b"")]),
]

BAD_CASES = [
    Bad("s01_stray_cr_before_command", b"\rSEND\n\n\0", "command"),
    Bad("s01_empty_command_after_cr", b"\r\r\n\n\0", "command"),
    Bad("s02_command_with_digit", b"SEND1\n\n\0", "command"),
    Bad("s02_command_with_space", b"SE ND\n\n\0", "command"),
    Bad("s02_command_non_ascii_letter", "SENDé\n\n\0".encode(), "command"),
    Bad("s02_command_leading_space", b" SEND\n\n\0", "command"),
    Bad("s35_tls_client_hello_refused_at_once", b"\x16\x03\x01\x02\x00\x01\x00", "command"),
    Bad("s35_junk_after_frame_refused_at_once", b"SEND\n\n\0\n0", "command"),
    Bad("s04_undefined_escape", b"SEND\nk:a\\tb\n\n\0", "escape"),
    Bad("s04_undefined_escape_in_name", b"SEND\nk\\x:v\n\n\0", "escape"),
    Bad("s04_trailing_backslash", b"SEND\nk:ab\\\n\n\0", "escape"),
    Bad("s04_v11_has_no_cr_escape", b"SEND\nk:a\\rb\n\n\0", "escape", "1.1"),
    # a raw CR in SEND headers: 1.2 allows one only escaped; 1.0/1.1 receivers misread it
    Bad("send_raw_cr_in_value_v12", b"SEND\nk:a\rb\n\n\0", "raw carriage return"),
    Bad("send_raw_cr_in_name", b"SEND\na\rb:v\n\n\0", "raw carriage return"),
    Bad("send_raw_cr_in_value", b"SEND\nk:a\rb\n\n\0", "carriage return", "1.1"),
    Bad("send_raw_cr_in_value_crlf", b"SEND\r\nk:a\rb\r\n\r\n\0", "carriage return", "1.0"),
    Bad("s06_header_without_colon", b"SEND\ndestination\n\n\0", "colon"),
    Bad("s06_header_without_colon_escaped_block", b"SEND\nk:\\n\nbad\n\n\0", "colon"),
    Bad("s08_content_length_no_nul_after", b"SEND\ncontent-length:1\n\nab\0", "NUL"),
    Bad("s08_content_length_negative", b"SEND\ncontent-length:-1\n\n\0", "content-length"),
    Bad("s08_content_length_empty", b"SEND\ncontent-length:\n\n\0", "content-length"),
    Bad("s08_content_length_text", b"SEND\ncontent-length:ten\n\n\0", "content-length"),
    Bad("s08_content_length_plus", b"SEND\ncontent-length:+1\n\na\0", "content-length"),
    Bad("s08_content_length_spaces", b"SEND\ncontent-length: 1\n\na\0", "content-length"),
    Bad("s08_content_length_underscore", b"SEND\ncontent-length:1_0\n\n\0", "content-length"),
    Bad("s08_content_length_non_ascii_digit", "SEND\ncontent-length:٣\n\nabc\0".encode(), "content-length"),
    Bad("s08_content_length_superscript", "SEND\ncontent-length:²\n\nab\0".encode(), "content-length"),
    Bad("s10_header_not_utf8", b"SEND\nk:\xff\n\n\0", "UTF-8"),
    Bad("s10_command_not_utf8", b"SE\xc3ND\n\n\0", "UTF-8"),
    Bad("nul_in_header_block", b"SEND\nk:a\0b\n\n\0", "NUL"),
    Bad("nul_in_unterminated_header_block", b"CONNECT\naccept-version:1.2\0", "NUL"),
    Bad("s35_body_over_limit_by_content_length", b"SEND\ncontent-length:11\n\n", "exceeds", limits=Limits(max_body=10)),
    Bad("s35_body_over_limit_no_nul_yet", b"SEND\n\n" + b"x" * 11, "exceeds", limits=Limits(max_body=10)),
    Bad("s35_body_over_limit_nul_later", b"SEND\n\n" + b"x" * 11 + b"\0", "exceeds", limits=Limits(max_body=10)),
    Bad(
        "s35_header_block_over_limit",
        b"SEND\nk:" + b"v" * 20 + b"\n\n\0",
        "header block",
        limits=Limits(max_header_bytes=20),
    ),
    Bad(
        "s35_header_block_over_limit_unterminated",
        b"SEND\nk:" + b"v" * 30,
        "header block",
        limits=Limits(max_header_bytes=20),
    ),
    Bad("s35_too_many_headers", b"SEND\na:1\nb:2\nc:3\n\n\0", "headers", limits=Limits(max_headers=2)),
    Bad("s35_too_many_headers_unterminated", b"SEND\na:1\nb:2\nc:3\nd", "headers", limits=Limits(max_headers=2)),
]


def _parser(version: str, limits: Limits = Limits()) -> FrameParser:
    parser = FrameParser(limits)
    parser.version = version
    return parser


def _feed_bytewise(parser: FrameParser, data: bytes) -> list[Frame]:
    frames: list[Frame] = []
    view = memoryview(data)
    for i in range(len(data)):
        frames += parser.feed(view[i : i + 1])
    return frames


@pytest.mark.parametrize("case", OK_CASES, ids=[c.id for c in OK_CASES])
def test_valid_frames(case: Ok) -> None:
    assert _parser(case.version).feed(case.data) == case.frames


@pytest.mark.parametrize("case", OK_CASES, ids=[c.id for c in OK_CASES])
def test_valid_frames_fed_bytewise(case: Ok) -> None:
    assert _feed_bytewise(_parser(case.version), case.data) == case.frames


@pytest.mark.parametrize("case", OK_CASES, ids=[c.id for c in OK_CASES])
def test_header_order_is_wire_order(case: Ok) -> None:
    for got, want in zip(_parser(case.version).feed(case.data), case.frames, strict=True):
        assert list(got.headers) == list(want.headers)


@pytest.mark.parametrize("case", BAD_CASES, ids=[c.id for c in BAD_CASES])
def test_invalid_frames(case: Bad) -> None:
    with pytest.raises(ProtocolError, match=case.error):
        _parser(case.version, case.limits).feed(case.data)


@pytest.mark.parametrize("case", BAD_CASES, ids=[c.id for c in BAD_CASES])
def test_invalid_frames_fed_bytewise(case: Bad) -> None:
    with pytest.raises(ProtocolError, match=case.error):
        _feed_bytewise(_parser(case.version, case.limits), case.data)


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_s35_header_block_at_limit_is_accepted(eol: bytes) -> None:
    """The limit counts the command line and header lines with their line ends, not the blank line."""
    block = b"SEND" + eol + b"k:" + b"v" * (14 - 2 * len(eol)) + eol
    assert len(block) == 20
    frames = _parser("1.2", Limits(max_header_bytes=20)).feed(block + eol + b"\0")
    assert frames == [Frame("SEND", {"k": "v" * (14 - 2 * len(eol))}, b"")]
    assert _feed_bytewise(_parser("1.2", Limits(max_header_bytes=20)), block + eol + b"\0") == frames


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_s35_header_block_one_over_limit_is_rejected(eol: bytes) -> None:
    block = b"SEND" + eol + b"k:" + b"v" * (15 - 2 * len(eol)) + eol
    assert len(block) == 21
    with pytest.raises(ProtocolError, match="header block"):
        _parser("1.2", Limits(max_header_bytes=20)).feed(block + eol + b"\0")
    with pytest.raises(ProtocolError, match="header block"):
        _feed_bytewise(_parser("1.2", Limits(max_header_bytes=20)), block + eol + b"\0")


def test_s35_headers_at_limit_are_accepted() -> None:
    frames = _parser("1.2", Limits(max_headers=2)).feed(b"SEND\na:1\nb:2\n\n\0")
    assert frames == [Frame("SEND", {"a": "1", "b": "2"}, b"")]


def test_s35_repeated_headers_count_against_the_limit() -> None:
    with pytest.raises(ProtocolError, match="headers"):
        _parser("1.2", Limits(max_headers=2)).feed(b"SEND\na:1\na:2\na:3\n\n\0")


def test_s35_oversized_body_fails_before_it_arrives() -> None:
    """A content-length over the limit fails on the header alone (nothing is buffered first)."""
    parser = _parser("1.2", Limits(max_body=1024))
    with pytest.raises(ProtocolError, match="exceeds") as caught:
        parser.feed(b"SEND\nreceipt:r-7\ncontent-length:1025\n\n")
    assert caught.value.receipt_id == "r-7"


def test_s35_unterminated_header_fails_at_the_limit_not_later() -> None:
    parser = _parser("1.2", Limits(max_header_bytes=100))
    assert parser.feed(b"SEND\n" + b"k" * 90) == []
    with pytest.raises(ProtocolError, match="header block"):
        parser.feed(b"k" * 10)


def test_s34_error_carries_receipt_of_offending_frame() -> None:
    with pytest.raises(ProtocolError) as caught:
        _parser("1.2").feed(b"SEND\nreceipt:77\ncontent-length:x\n\n\0")
    assert caught.value.receipt_id == "77"


def test_s34_escape_error_carries_the_unescaped_receipt() -> None:
    with pytest.raises(ProtocolError, match="escape") as caught:
        _parser("1.2").feed(b"SEND\nk:\\t\nreceipt:a\\cb\n\n\0")
    assert caught.value.receipt_id == "a:b"


def test_s34_error_message_quotes_only_a_little_of_the_input() -> None:
    """The message goes into the ERROR frame's header; a 60 KiB header line must not."""
    with pytest.raises(ProtocolError) as caught:
        _parser("1.2").feed(b"SEND\n" + b"x" * 60_000 + b"\n\n\0")
    assert len(caught.value.message) < 200


def test_s04_bad_escape_in_a_dropped_repeat_is_still_fatal() -> None:
    with pytest.raises(ProtocolError, match="escape"):
        _parser("1.2").feed(b"SEND\nk:1\nk:\\t\n\n\0")


def test_parser_stays_broken_after_an_error() -> None:
    parser = _parser("1.2")
    with pytest.raises(ProtocolError):
        parser.feed(b"SEND\nbad\n\n\0")
    with pytest.raises(ProtocolError):
        parser.feed(b"SEND\n\n\0")


def test_s03_version_set_by_server_changes_unescaping() -> None:
    parser = FrameParser()
    assert parser.version == "1.2"
    parser.version = "1.0"
    assert parser.feed(b"SEND\nk:a\\tb\n\n\0") == [Frame("SEND", {"k": "a\\tb"}, b"")]
    parser.version = "1.1"
    with pytest.raises(ProtocolError):
        parser.feed(b"SEND\nk:a\\tb\n\n\0")


def test_unknown_version_is_rejected() -> None:
    with pytest.raises(ValueError):
        FrameParser().version = "2.0"


@pytest.mark.parametrize(
    ("accept_version", "version"),
    [(None, "1.0"), ("1.0", "1.0"), ("1.0,1.1", "1.1"), ("1.1,1.2", "1.2"), ("9.9", "1.2")],
)
def test_s13_frames_pipelined_behind_connect_use_the_negotiated_version(
    accept_version: str | None, version: str
) -> None:
    """CONNECT and a SEND in one read: the SEND is unescaped per the version CONNECT negotiates."""
    connect = b"CONNECT\n" + (b"accept-version:%s\n" % accept_version.encode() if accept_version else b"") + b"\n\0"
    parser = FrameParser()
    frames = parser.feed(connect + b"SEND\nk:a\\cb\n\n\0")
    assert parser.version == version
    assert frames[1].headers == {"k": "a\\cb" if version == "1.0" else "a:b"}


def test_s37_only_the_first_connect_sets_the_version() -> None:
    parser = FrameParser()
    parser.feed(b"CONNECT\naccept-version:1.1\n\n\0CONNECT\naccept-version:1.0\n\n\0")
    assert parser.version == "1.1"


def test_lone_cr_split_from_its_lf_between_frames() -> None:
    parser = FrameParser()
    assert parser.feed(b"SEND\n\n\0\r") == [Frame("SEND", {}, b"")]
    assert parser.feed(b"\nSEND\n\nx\0") == [Frame("SEND", {}, b"x")]


def test_many_frames_in_one_buffer() -> None:
    frame = b"SEND\ndestination:/queue/a\ncontent-length:5\n\nhello\0"
    frames = FrameParser().feed(frame * 1000)
    assert frames == [Frame("SEND", {"destination": "/queue/a", "content-length": "5"}, b"hello")] * 1000


@pytest.mark.parametrize("chunk", [1, 7, 997, 65536])
def test_compaction_keeps_pending_state(chunk: int) -> None:
    """A stream several times _COMPACT_AT, cut so that compaction happens mid-header and mid-body."""
    frames = [Frame("SEND", {"destination": f"/queue/{i}", "n": "x" * (i % 50)}, b"b" * (i % 300)) for i in range(4000)]
    stream = b"".join(
        f"SEND\ndestination:{f.headers['destination']}\nn:{f.headers['n']}\n".encode()
        + (b"content-length:%d\n\n" % len(f.body) if i % 2 else b"\n")
        + f.body
        + b"\0\n"
        for i, f in enumerate(frames)
    )
    assert len(stream) > 3 * parser_module._COMPACT_AT
    parser = FrameParser()
    view = memoryview(stream)
    got: list[Frame] = []
    for i in range(0, len(stream), chunk):
        got += parser.feed(view[i : i + chunk])
    assert [(f.headers["destination"], f.body) for f in got] == [(f.headers["destination"], f.body) for f in frames]


@pytest.mark.parametrize("content_length", [True, False], ids=["content-length", "nul-terminated"])
def test_large_body_in_one_byte_chunks_is_linear(content_length: bool) -> None:
    """1 MiB fed a byte at a time completes quickly only if nothing is rescanned or copied per feed."""
    size = 1 << 20
    head = b"SEND\n" + (b"content-length:%d\n" % size if content_length else b"") + b"\n"
    data = head + b"z" * size + b"\0"
    frames = _feed_bytewise(FrameParser(), data)
    assert len(frames) == 1 and frames[0].body == b"z" * size


@pytest.mark.parametrize("content_length", [True, False], ids=["content-length", "nul-terminated"])
def test_16_mib_body_in_small_chunks(content_length: bool) -> None:
    size = 16 << 20
    head = b"SEND\n" + (b"content-length:%d\n" % size if content_length else b"") + b"\n"
    data = head + b"z" * size + b"\0"
    view = memoryview(data)
    parser = FrameParser()
    frames: list[Frame] = []
    for i in range(0, len(data), 64):
        frames += parser.feed(view[i : i + 64])
    assert len(frames) == 1 and len(frames[0].body) == size


# -- the ACK/NACK short path (``_short_ack``) ----------------------------------------------------
# Every case is parsed with the short path and without it (the general path alone): the frames,
# or the error and its receipt, must be the same.  ``short`` says whether the short path takes
# the frame (True) or declines it to the general path (False).
ACK_CASES: list[tuple[str, bytes, bool]] = [
    ("v12_id", b"ACK\nid:17\n\n\0", True),
    ("v12_nack", b"NACK\nid:17\n\n\0", True),
    ("v12_receipt", b"ACK\nid:17\nreceipt:r-1\n\n\0", True),
    ("v12_transaction", b"ACK\nid:17\ntransaction:tx\n\n\0", True),
    ("v11_message_id_subscription", b"ACK\nsubscription:s\nmessage-id:42\n\n\0", True),
    ("nack_requeue_false", b"NACK\nid:3\nrequeue:false\n\n\0", True),
    ("no_headers", b"ACK\n\n\0", True),
    ("repeated_header_first_wins", b"ACK\nid:1\nid:2\n\n\0", True),
    ("value_with_colons", b"ACK\nmessage-id:ID:host-1:2:3\n\n\0", True),
    ("empty_value", b"ACK\nid:\n\n\0", True),
    ("non_ascii_value", "ACK\nid:é😀\n\n\0".encode(), True),
    ("heart_beats_around", b"\n\r\nACK\nid:1\n\n\0\nACK\nid:2\n\n\0\r\n", True),
    # declined: the general path parses or refuses these
    ("body", b"ACK\nid:1\n\nxyz\0", False),
    ("body_of_an_eol", b"ACK\nid:1\n\n\n\0", False),
    ("body_after_no_headers", b"ACK\n\n\n\0", False),
    ("content_length_zero", b"ACK\nid:1\ncontent-length:0\n\n\0", False),
    ("content_length_body", b"ACK\nid:1\ncontent-length:2\n\nab\0", False),
    ("content_length_past_nul", b"ACK\nid:1\ncontent-length:3\n\n\0ab\0", False),
    ("content_length_bad", b"ACK\nid:1\ncontent-length:x\n\n\0", False),
    ("crlf", b"ACK\r\nid:1\r\n\r\n\0", False),
    ("crlf_blank_line", b"ACK\nid:1\r\n\r\n\0", False),
    ("cr_in_value", b"ACK\nid:1\rx\n\n\0", False),
    ("escape_ok", b"ACK\nid:a\\cb\n\n\0", False),
    ("escape_undefined", b"ACK\nid:a\\tb\nreceipt:r\n\n\0", False),
    ("line_without_colon", b"ACK\nid:1\nnocolon\nreceipt:r\n\n\0", False),
    ("blank_line_early", b"ACK\nid:1\n\nreceipt:r\n\n\0", False),
    ("invalid_utf8", b"ACK\nid:\xff\n\n\0", False),
    ("too_many_headers", b"ACK\n" + b"h:v\n" * 4 + b"\n\0", False),
    ("header_block_over_limit", b"ACK\nid:" + b"1" * 60 + b"\n\n\0", False),
    ("longer_than_the_short_path_looks", b"ACK\nid:" + b"1" * 600 + b"\n\n\0", False),
    ("incomplete", b"ACK\nid:1\n\n", False),
    ("nul_in_headers", b"ACK\nid:1\0\n\n\0", False),
    ("ackx_command", b"ACKX\nid:1\n\n\0", False),
    ("abort", b"ABORT\ntransaction:t\n\n\0", False),
    ("ack_lowercase", b"ack\nid:1\n\n\0", False),
]
_ACK_LIMITS = Limits(max_header_bytes=64, max_headers=3)
"""Low enough that the limit cases reach them; the others stay below."""


def _outcome(data: bytes, feed_bytewise: bool = False, version: str = "1.2") -> tuple[str, object]:
    parser = _parser(version, _ACK_LIMITS)
    try:
        frames = _feed_bytewise(parser, data) if feed_bytewise else parser.feed(data)
    except ProtocolError as e:
        return "error", (e.message, e.receipt_id)
    return "frames", [(f, list(f.headers)) for f in frames]


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest.mark.parametrize("name, data, short", ACK_CASES, ids=[c[0] for c in ACK_CASES])
def test_ack_short_path_agrees_with_the_general_path(
    name: str, data: bytes, short: bool, version: str, monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    taken: list[Frame] = []
    real = parser_module._short_ack

    def spy(*args: object) -> object:
        result = real(*args)  # type: ignore[arg-type]
        if result is not None:
            taken.append(result[0])
        return result

    monkeypatch.setattr(parser_module, "_short_ack", spy)
    with_short = _outcome(data, version=version)
    bytewise = _outcome(data, feed_bytewise=True, version=version)
    if not native:  # the native scan takes complete, valid ACKs before the Python short path
        assert bool(taken) == short, taken
    monkeypatch.setattr(parser_module, "_short_ack", lambda *args: None)
    assert with_short == _outcome(data, version=version)
    assert bytewise == _outcome(data, feed_bytewise=True, version=version)


def test_ack_short_path_frames() -> None:
    frames = FrameParser().feed(b"ACK\nid:1\nreceipt:r\n\n\0NACK\nsubscription:s\nmessage-id:9\nrequeue:false\n\n\0")
    assert frames == [
        Frame("ACK", {"id": "1", "receipt": "r"}, b""),
        Frame("NACK", {"subscription": "s", "message-id": "9", "requeue": "false"}, b""),
    ]


def test_ack_short_path_after_a_crlf_frame_leaves_crlf_search_for_the_next() -> None:
    """The short path sets the blank-line style to LF, as the general path would have."""
    data = b"SEND\r\nk:1\r\n\r\nx\0ACK\nid:1\n\n\0SEND\r\nk:2\r\n\r\ny\0"
    assert FrameParser().feed(data) == [
        Frame("SEND", {"k": "1"}, b"x"), Frame("ACK", {"id": "1"}, b""), Frame("SEND", {"k": "2"}, b"y")
    ]


def test_many_acks_fed_bytewise_stay_linear() -> None:
    """A long header block starting like an ACK, a byte at a time: the short path looks at most
    ``_SHORT_ACK_BYTES`` per feed, so this stays quick."""
    data = b"ACK\n" + b"h:" + b"v" * 60_000 + b"\n\n\0"
    assert _feed_bytewise(FrameParser(), data)[0].headers["h"] == "v" * 60_000
