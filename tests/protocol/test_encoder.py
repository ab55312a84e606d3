"""Tests for protocol/encoder.py: golden bytes per checklist row."""

from __future__ import annotations

import pytest

from stompmq.protocol import Frame, FrameParser, LocalProtocolError, encode_frame, encode_header_block, encoder, escape

ESCAPE_CASES = [
    # (id, value, version, expected)
    ("s05_v10_identity", "a:b\\c\nd\re", "1.0", "a:b\\c\nd\re"),
    ("s05_v11_escapes", "a:b\\c\nd", "1.1", "a\\cb\\\\c\\nd"),
    ("s05_v11_never_emits_cr_escape", "a\rb", "1.1", "a\rb"),
    ("s05_v12_escapes_cr_too", "a:b\\c\nd\re", "1.2", "a\\cb\\\\c\\nd\\re"),
    ("s05_v12_backslash_escaped_first", "\\n", "1.2", "\\\\n"),
    ("s05_v12_plain", "/queue/a-b_c.d", "1.2", "/queue/a-b_c.d"),
    ("s10_v12_non_ascii_untouched", "café😀", "1.2", "café😀"),
]


@pytest.mark.parametrize(
    ("value", "version", "expected"), [c[1:] for c in ESCAPE_CASES], ids=[c[0] for c in ESCAPE_CASES]
)
def test_escape(value: str, version: str, expected: str) -> None:
    assert escape(value, version) == expected


def test_escape_returns_plain_values_unchanged() -> None:
    value = "/queue/orders"
    assert escape(value, "1.2") is value


def test_escape_unknown_version() -> None:
    with pytest.raises(LocalProtocolError):
        escape("x", "1.3")


FRAME_CASES = [
    # (id, frame, version, expected bytes)
    (
        "s09_message_gets_content_length",
        Frame("MESSAGE", {"destination": "/queue/a", "message-id": "1", "subscription": "s"}, b"hi"),
        "1.2",
        b"MESSAGE\ndestination:/queue/a\nmessage-id:1\nsubscription:s\ncontent-length:2\n\nhi\0",
    ),
    (
        "s09_message_with_nul_in_body",
        Frame("MESSAGE", {"destination": "/queue/a"}, b"a\0b"),
        "1.2",
        b"MESSAGE\ndestination:/queue/a\ncontent-length:3\n\na\0b\0",
    ),
    (
        "s09_empty_message_still_has_content_length",
        Frame("MESSAGE", {"destination": "/queue/a"}, b""),
        "1.2",
        b"MESSAGE\ndestination:/queue/a\ncontent-length:0\n\n\0",
    ),
    (
        "s09_existing_content_length_kept_once",
        Frame("MESSAGE", {"content-length": "2", "destination": "/q"}, b"hi"),
        "1.2",
        b"MESSAGE\ncontent-length:2\ndestination:/q\n\nhi\0",
    ),
    (
        "s07_error_with_body",
        Frame("ERROR", {"message": "bad frame"}, b"details"),
        "1.2",
        b"ERROR\nmessage:bad frame\ncontent-length:7\n\ndetails\0",
    ),
    ("s07_error_without_body", Frame("ERROR", {"message": "m"}, b""), "1.2", b"ERROR\nmessage:m\n\n\0"),
    ("s07_receipt_without_body", Frame("RECEIPT", {"receipt-id": "7"}, b""), "1.2", b"RECEIPT\nreceipt-id:7\n\n\0"),
    ("no_headers", Frame("DISCONNECT", {}, b""), "1.2", b"DISCONNECT\n\n\0"),
    (
        "s05_v12_escaped_message",
        Frame("MESSAGE", {"destination": "/q", "k:1": "a\nb\\c\rd"}, b""),
        "1.2",
        b"MESSAGE\ndestination:/q\nk\\c1:a\\nb\\\\c\\rd\ncontent-length:0\n\n\0",
    ),
    (
        "s05_v11_escaped_message_raw_cr",
        Frame("MESSAGE", {"k:1": "a\nb\\c\rd"}, b""),
        "1.1",
        b"MESSAGE\nk\\c1:a\\nb\\\\c\rd\ncontent-length:0\n\n\0",
    ),
    (
        "s05_v10_unescaped_message",
        Frame("MESSAGE", {"k": "a:b\\n"}, b""),
        "1.0",
        b"MESSAGE\nk:a:b\\n\ncontent-length:0\n\n\0",
    ),
    (
        "s05_connected_never_escaped",
        Frame("CONNECTED", {"version": "1.2", "server": "stompmq/0.1", "session": "a:b\\c"}, b""),
        "1.2",
        b"CONNECTED\nversion:1.2\nserver:stompmq/0.1\nsession:a:b\\c\n\n\0",
    ),
    (
        "s10_utf8_headers",
        Frame("MESSAGE", {"destination": "/queue/café"}, b"\xff"),
        "1.2",
        "MESSAGE\ndestination:/queue/café\ncontent-length:1\n\n".encode() + b"\xff\0",
    ),
]


@pytest.mark.parametrize(
    ("frame", "version", "expected"), [c[1:] for c in FRAME_CASES], ids=[c[0] for c in FRAME_CASES]
)
def test_encode_frame(frame: Frame, version: str, expected: bytes) -> None:
    assert encode_frame(frame, version) == expected


@pytest.mark.parametrize(
    ("frame", "version", "expected"), [c[1:] for c in FRAME_CASES], ids=[c[0] for c in FRAME_CASES]
)
def test_encoded_frames_parse_back(frame: Frame, version: str, expected: bytes) -> None:
    parser = FrameParser()
    parser.version = version
    [parsed] = parser.feed(expected)
    assert parsed.command == frame.command and parsed.body == frame.body
    assert {k: v for k, v in parsed.headers.items() if k != "content-length"} == {
        k: v for k, v in frame.headers.items() if k != "content-length"
    }


REJECTED = [
    ("s07_receipt_with_body", Frame("RECEIPT", {"receipt-id": "1"}, b"x"), "1.2"),
    ("s07_connected_with_body", Frame("CONNECTED", {"version": "1.2"}, b"x"), "1.2"),
    ("s08_wrong_content_length", Frame("MESSAGE", {"content-length": "3"}, b"hi"), "1.2"),
    ("s08_malformed_content_length_no_body", Frame("RECEIPT", {"content-length": ""}, b""), "1.2"),
    ("s05_v10_newline_in_value", Frame("MESSAGE", {"k": "a\ninjected:1"}, b""), "1.0"),
    ("s05_v10_colon_in_name", Frame("MESSAGE", {"a:b": "c"}, b""), "1.0"),
    ("s05_v10_newline_in_name", Frame("MESSAGE", {"a\nb": "c"}, b""), "1.0"),
    ("s05_connected_newline_in_value", Frame("CONNECTED", {"server": "x\ny"}, b""), "1.2"),
    ("unknown_version", Frame("MESSAGE", {}, b""), "2.0"),
]


@pytest.mark.parametrize(("frame", "version"), [c[1:] for c in REJECTED], ids=[c[0] for c in REJECTED])
def test_encode_frame_rejects(frame: Frame, version: str) -> None:
    with pytest.raises(LocalProtocolError):
        encode_frame(frame, version)


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_encode_header_block_accepts_any_iterable_of_pairs(version: str) -> None:
    pairs = [("a", "1"), ("b", "2")]
    expected = b"a:1\nb:2\n"
    assert encode_header_block(pairs, version) == expected
    assert encode_header_block(tuple(pairs), version) == expected
    assert encode_header_block(dict(pairs).items(), version) == expected
    assert encode_header_block(iter(pairs), version) == expected
    assert encode_header_block([], version) == b""


def test_encode_header_block_escapes_per_version() -> None:
    pairs = [("k:", "v\n\\\r")]
    assert encode_header_block(pairs, "1.2") == b"k\\c:v\\n\\\\\\r\n"
    assert encode_header_block(pairs, "1.1") == b"k\\c:v\\n\\\\\r\n"
    with pytest.raises(LocalProtocolError):
        encode_header_block(pairs, "1.0")
    assert encode_header_block([("k", "a:b\\")], "1.0") == b"k:a:b\\\n"


def test_s20_spliced_user_header_block_parses_as_one_frame() -> None:
    """The broker caches the user block per version and splices it after its own headers."""
    user = encode_header_block([("destination", "/queue/forged"), ("x-trace", "a:b")], "1.2")
    own = encode_header_block([("destination", "/queue/real"), ("message-id", "9")], "1.2")
    wire = b"MESSAGE\n" + own + user + b"content-length:2\n\nhi\0"
    [frame] = FrameParser().feed(wire)
    assert frame.headers == {
        "destination": "/queue/real",  # S11: the broker's own header comes first and wins
        "message-id": "9",
        "x-trace": "a:b",
        "content-length": "2",
    }


_ESCAPES = {"cr": "a\rb", "newline": "a\nb", "colon": "a:b", "backslash": "a\\b"}
"""One value per character STOMP 1.2 escapes (``\\r``, ``\\n``, ``\\c``, ``\\\\``)."""

_CARRIED = {"1.2": {"cr", "newline", "colon", "backslash"}, "1.1": {"newline", "colon", "backslash"},
            "1.0": {"colon", "backslash"}}
"""Which of ``_ESCAPES`` a subscriber of each version receives (docs/security.md)."""


@pytest.mark.parametrize("tail", [encoder._message_tail, encoder.encode_message_tail], ids=["python", "bound"])
@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest.mark.parametrize("char", sorted(_ESCAPES))
def test_message_tail_leaves_out_what_a_version_cannot_carry(tail, version: str, char: str) -> None:
    """A 1.2 SEND's header with an escaped character reaches 1.2 subscribers intact; an older
    subscriber gets it intact too, or not at all (never altered), and the other headers always."""
    headers = {"before": "1", f"special-{char}": _ESCAPES[char], "after": "2"}
    wire = b"MESSAGE\n" + tail(4, 5, None, headers, b"hi", version)
    parser = FrameParser()
    parser.version = version
    [frame] = parser.feed(wire)
    expected = {"before": "1", "after": "2"}
    if char in _CARRIED[version]:
        expected[f"special-{char}"] = _ESCAPES[char]
    assert {k: v for k, v in frame.headers.items() if k in headers} == expected


@pytest.mark.parametrize("expires", [None, 1_700_000_000_000])
def test_a_text_tail_is_the_tail_without_content_length(expires: int | None) -> None:
    """What a text message's MESSAGE ends with (docs/decisions/text-messages.md): the bytes tail's
    headers but ``content-length``, and it parses back, the NUL ending the body."""
    headers = {"amq-msg-type": "text", "k": "v:1"}
    text = encoder.encode_text_tail_headers(4, 17, expires, headers, "1.2")
    with_length = encoder.encode_message_tail_headers(4, 17, expires, headers, 3, "1.2")
    assert text == with_length.replace(b"content-length:3\n", b"")
    (frame,) = FrameParser().feed(b"MESSAGE\nmessage-id:1\n" + text + b"abc\x00")
    assert "content-length" not in frame.headers and frame.body == b"abc" and frame.headers["k"] == "v:1"
