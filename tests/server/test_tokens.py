"""Token logins' pure parts (server/tokens.py): scopes to permissions as RabbitMQ maps them, the
JWKS checks and its rate-limited refetch on an unknown kid, and the lease's timing."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import pytest
import trio
import trio.testing

from stompmq.protocol import Frame
from stompmq.server.security import Security
from stompmq.server.settings import ServerSettings
from stompmq.server.tokens import TokenError, TokenLease, TokenVerifier, Verified, looks_like_jwt, scoped_user

pytest.importorskip("jwt", reason="token logins need the oauth extra")

from ..support.pair import PeerClient, broker_pair
from ..support.tokens import Issuer


def test_scopes_map_to_permissions_per_vhost_and_tags() -> None:
    scopes = ["stompmq.read:*/orders-*", "stompmq.write:%2F/orders-in", "stompmq.configure:secret/*",
              "stompmq.tag:administrator", "other.write:*/*", "stompmq.tag:root", "stompmq.read:nonsense"]
    user = scoped_user("alice", scopes, "stompmq", ["/", "secret", "elsewhere"])
    assert user.name == "alice" and user.tags == ["administrator"]
    assert sorted(user.permissions) == ["/", "elsewhere", "secret"]
    root = user.permissions["/"]
    assert root.allows("read", "/queue/orders-eu") and root.allows("read", "/exchange/orders-x")
    assert not root.allows("read", "/queue/payroll")
    assert root.allows("write", "/queue/orders-in") and not root.allows("write", "/queue/orders-inx")
    assert not root.allows("configure", "/queue/orders-in")
    assert user.permissions["secret"].allows("configure", "/queue/anything")
    assert not user.permissions["elsewhere"].allows("write", "/queue/orders-in")  # %2F is only "/"


def test_a_name_with_regex_characters_is_matched_literally() -> None:
    user = scoped_user("a", ["stompmq.write:*/a.b+c"], "stompmq", ["/"])
    assert user.permissions["/"].allows("write", "/queue/a.b+c")
    assert not user.permissions["/"].allows("write", "/queue/aXbbc")


def test_looks_like_jwt() -> None:
    assert looks_like_jwt(Issuer().token())
    assert not looks_like_jwt("secret") and not looks_like_jwt(None) and not looks_like_jwt("a.b.c")


def test_the_verifier_checks_signature_audience_and_expiry() -> None:
    issuer, other = Issuer(), Issuer()
    verifier = TokenVerifier("jwks", "stompmq", lambda _: issuer.jwks())
    verified = verifier.verify(issuer.token(sub="bob", scope="stompmq.read:*/*"), 0.0)
    assert (verified.subject, verified.scopes) == ("bob", ("stompmq.read:*/*",))
    with pytest.raises(TokenError, match="Signature verification failed"):
        verifier.verify(other.token(), 0.0)  # signed with another key of the same kid
    with pytest.raises(TokenError, match="Audience"):
        verifier.verify(issuer.token(aud="someone-else"), 0.0)
    with pytest.raises(TokenError, match="token expired"):
        verifier.verify(issuer.token(lifetime=-5), 0.0)
    with pytest.raises(TokenError, match="exp"):
        verifier.verify(issuer.token(lifetime=0), 0.0)  # no exp at all
    with pytest.raises(TokenError, match="malformed"):
        verifier.verify("eyJ.not.atoken", 0.0)


def test_an_unknown_kid_refetches_the_jwks_at_most_every_ten_seconds() -> None:
    issuer = Issuer("k1")
    fetched: list[int] = []

    def fetch(_: str) -> bytes:
        fetched.append(1)
        return issuer.jwks()

    verifier = TokenVerifier("jwks", "stompmq", fetch, now=0.0)
    assert len(fetched) == 1
    issuer.add_key("k2")  # the provider rotates its keys
    with pytest.raises(TokenError, match="unknown signing key 'k2'"):
        verifier.verify(issuer.token(kid="k2"), 5.0)  # 5 s after the last fetch: not yet
    assert len(fetched) == 1
    assert verifier.verify(issuer.token(kid="k2"), 10.0).subject == "alice"  # refetched
    assert len(fetched) == 2
    rogue = Issuer("made-up")
    for now in (11.0, 12.0, 13.0):  # made-up kids do not make it fetch again and again
        with pytest.raises(TokenError, match="unknown signing key 'made-up'"):
            verifier.verify(rogue.token(kid="made-up"), now)
    assert len(fetched) == 2


def test_a_failed_refetch_keeps_the_known_keys() -> None:
    issuer = Issuer("k1")
    answers = [issuer.jwks()]

    def fetch(_: str) -> bytes:
        if answers:
            return answers.pop()
        raise OSError("provider down")

    verifier = TokenVerifier("jwks", "stompmq", fetch, now=0.0)
    with pytest.raises(TokenError, match="provider down"):
        verifier.verify(Issuer("k9").token(kid="k9"), 20.0)
    assert verifier.verify(issuer.token(kid="k1"), 21.0).subject == "alice"


async def test_a_15_s_token_ends_at_15_s_and_a_refresh_at_10_s_keeps_it(autojump_clock: trio.testing.MockClock) -> None:
    """The figure, in virtual time: the lease of a token that expires 15 s after it was checked
    ends exactly then; a fresh 15 s token of the same subject at 10 s moves the end to 25 s."""
    start = trio.current_time()
    wall = 1_000_000.0
    lease = TokenLease.start(Verified("alice", (), wall + 15), wall, start)
    await trio.sleep(14.9)
    assert not lease.expired(trio.current_time())
    await trio.sleep(0.1)
    assert lease.expired(trio.current_time())
    lease = TokenLease.start(Verified("alice", (), wall + 15), wall, start)
    await trio.sleep(10)
    fresh = TokenLease.start(Verified("alice", (), wall + 25), wall + 10, trio.current_time())
    lease = lease.refreshed(fresh)
    await trio.sleep(14.9)
    assert not lease.expired(trio.current_time())
    await trio.sleep(0.1)
    assert lease.expired(trio.current_time())
    with pytest.raises(TokenError, match="for 'mallory', not 'alice'"):
        lease.refreshed(TokenLease.start(Verified("mallory", (), wall + 60), wall, start))


async def _deliveries_until_error(consumer: PeerClient) -> tuple[list[float], Frame]:
    """The times of the MESSAGEs ``consumer`` gets, and the ERROR that ends them."""
    times: list[float] = []
    while True:
        frame = await consumer.receive()
        if frame.command == "ERROR":
            return times, frame
        if frame.command == "MESSAGE":
            times.append(trio.current_time())


async def _produce_every_second(producer: PeerClient) -> None:
    while True:
        await producer.send("SEND", {"destination": "/queue/orders-v"}, b"tick")
        await trio.sleep(1.0)


@pytest.mark.parametrize("refresh_at", [None, 10.0])
async def test_a_15_s_token_session_over_a_connection(autojump_clock: trio.testing.MockClock, tmp_path: Path,
                                                      refresh_at: float | None) -> None:
    """The figure over a real Connection in virtual time: with a 15 s token deliveries stop at
    15 s (within the timer's 50 ms tick) with the ERROR saying why; a fresh 15 s token sent at
    10 s keeps the session, which then ends at 25 s."""
    issuer = Issuer("k1")
    settings = ServerSettings(port=0, oauth_jwks=str(issuer.write_jwks(tmp_path / "jwks.json")))
    async with broker_pair(settings=settings, security=Security(settings)) as pair:
        producer = pair.open()
        assert (await producer.connect(login="p", passcode=issuer.token(sub="p", lifetime=600))).command == "CONNECTED"
        consumer = pair.open()
        assert (await consumer.connect(login="a", passcode=issuer.token(lifetime=15))).command == "CONNECTED"
        start = trio.current_time()
        await consumer.send("SUBSCRIBE", {"id": "1", "destination": "/queue/orders-v"})
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_produce_every_second, producer)
            if refresh_at is not None:
                await trio.sleep(refresh_at)
                await consumer.send("SEND", {"destination": "/control/refresh-token", "receipt": "fresh",
                                             "token": issuer.token(lifetime=15)})
            times, error = await _deliveries_until_error(consumer)
            nursery.cancel_scope.cancel()
        ended = trio.current_time() - start
        expected = 15.0 if refresh_at is None else refresh_at + 15.0
        assert "access token expired" in error.headers["message"]
        assert expected - 0.1 <= ended <= expected + 0.1, ended
        assert times and times[-1] - start < ended and times[-1] - start >= expected - 1.0


def test_a_jwks_url_is_fetched_and_refetched_for_a_rotated_key() -> None:
    """``--oauth-jwks`` as a URL: a loopback HTTP server the test runs publishes the keys."""
    issuer = Issuer("k1")
    requests: list[str] = []

    class Jwks(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            requests.append(self.path)
            body = issuer.jwks()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Jwks)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/certs"
        verifier = TokenVerifier(url, "stompmq", now=0.0)
        assert verifier.verify(issuer.token(), 1.0).subject == "alice"
        issuer.add_key("k2")
        assert verifier.verify(issuer.token(kid="k2"), 11.0).subject == "alice"
        assert requests == ["/certs", "/certs"]
    finally:
        server.shutdown()
        server.server_close()
