"""What a SEND's headers mean (broker/send_headers.py) beyond the conformance tests."""

from __future__ import annotations

from typing import Any

from stompmq.broker.send_headers import DEFAULT_PRIORITY, SPECIAL_HEADERS, send_options


class Recording(dict[str, str]):
    """A header dict that remembers every name looked up in it."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read: set[str] = set()

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        self.read.add(name)
        return super().get(name, default)

    def __contains__(self, name: object) -> bool:
        self.read.add(str(name))
        return super().__contains__(name)


def test_every_header_send_options_reads_makes_a_send_special() -> None:
    # The engine publishes a SEND without any SPECIAL_HEADERS with the default options and never
    # calls send_options: a header read here but missing there would be ignored on that path.
    headers = Recording({"priority": "5", "ack-timeout": "1.5", "ttl": "10", "expires": "1800000000000",
                         "delay": "5", "AMQ_SCHEDULED_DELAY": "5", "deliver-at": "1700000000000"})
    assert send_options(headers, 1_700_000_000_000) != (DEFAULT_PRIORITY, None, None, None)
    assert headers.read <= SPECIAL_HEADERS


def test_a_send_without_special_headers_has_the_default_options() -> None:
    plain = {"destination": "/queue/q", "content-type": "text/plain", "receipt": "r1", "custom": "x"}
    assert SPECIAL_HEADERS.isdisjoint(plain)
    assert send_options(plain, 1_700_000_000_000) == (DEFAULT_PRIORITY, None, None, None)
