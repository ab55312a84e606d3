"""One ``stomp://`` parser (stompmq/stomp_url.py), two meanings of the path: the blocking
clients' vhost and the CLI tools' destination, with the same host, port, user and errors."""

from __future__ import annotations

import pytest

from stompmq.client import ClientError, StompUrl
from stompmq.stomp_url import BadURL, StompURL, split_url

TEXT = "stomp://us%40r:p%3Ass@example.org:1234/queue/a%20b?vhost=prod"


def test_both_meanings_read_the_same_parts() -> None:
    parts = split_url(TEXT, "stomp://host")
    blocking, tool = StompURL.parse(TEXT), StompUrl.parse(TEXT)
    assert (parts.host, parts.port, parts.login, parts.passcode) == ("example.org", 1234, "us@r", "p:ss")
    for url in (blocking, tool):
        assert (url.host, url.port, url.login, url.passcode) == (parts.host, parts.port, parts.login, parts.passcode)


def test_the_path_is_a_vhost_for_the_blocking_clients_and_a_destination_for_the_tools() -> None:
    assert StompURL.parse("stomp://h/prod").vhost == "prod"
    assert StompURL.parse("stomp://h").vhost == "h"  # the host name: stompmq's default vhost
    tool = StompUrl.parse("stomp://h/queue/a%20b?vhost=prod")
    assert (tool.destination, tool.vhost) == ("/queue/a b", "prod")
    assert (StompUrl.parse("stomp://h").destination, StompUrl.parse("stomp://h").vhost) == ("", None)


@pytest.mark.parametrize("text", ["amqp://al%40ice:s3cr%40t@host", "stomp://al%40ice:s3cr%40t@host:99999"])
def test_a_bad_url_is_the_same_complaint_without_its_password(text: str) -> None:
    with pytest.raises(BadURL) as blocking:
        StompURL.parse(text)
    with pytest.raises(ClientError) as tool:
        StompUrl.parse(text)
    for error in (blocking.value, tool.value):
        assert str(error).startswith("bad URL") and "s3cr" not in str(error) and "***" in str(error)
