"""Settings: command-line flags > environment (STOMPMQ_*) > TOML file > defaults.

Every option is declared once in ``OPTIONS``; the command line, the
environment variable names and the TOML keys are all derived from it, so the
three sources cannot drift apart.  Each option's ``type`` parses *and*
range-checks a value, and every source goes through it (a TOML number or list
is turned back into text first), so a bad value is refused the same way
wherever it comes from: one line naming the source and the key, exit code 2.
"""

from __future__ import annotations

import argparse
import difflib
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from . import __version__
from .broker import BrokerConfig
from .broker.overflow import POLICIES
from .logs import masked
from .protocol import Limits
from .server import ServerSettings
from .server.logins import CONNECT_MAX_BYTES


def _heart_beat(value: str) -> tuple[int, int]:
    try:
        send, receive = (int(x) for x in value.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected SEND_MS,RECEIVE_MS, got {value!r}") from None
    if send < 0 or receive < 0:
        raise argparse.ArgumentTypeError("heart-beat intervals must be >= 0")
    return send, receive


def _flag(value: str) -> bool:
    lowered = str(value).lower()
    if lowered not in ("true", "false", "1", "0", "yes", "no"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")
    return lowered in ("true", "1", "yes")


def _names(value: str) -> tuple[str, ...]:
    """A comma-separated list of names (blanks ignored)."""
    return tuple(name.strip().lower() for name in str(value).split(",") if name.strip())


def _origins(value: str) -> tuple[str, ...]:
    """A comma-separated list of web origins (scheme://host[:port]), ``null`` or ``*``."""
    from .server.websocket import allowed_origins  # here: wsproto loads only when WebSocket is used

    try:
        return allowed_origins(entry.strip() for entry in str(value).split(",") if entry.strip())
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _login_budget(value: str) -> int:
    """--max-login-bytes: room for one connection's CONNECT frame at least."""
    number = _size(value)
    if number < CONNECT_MAX_BYTES:
        raise argparse.ArgumentTypeError(f"must be at least {CONNECT_MAX_BYTES} (one CONNECT frame), got {value!r}")
    return number


def _topic_overflow(value: str) -> str:
    if value not in POLICIES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(POLICIES)}, got {value!r}")
    return value
def _int(low: int, high: int | None = None) -> Callable[[str], int]:
    """An integer in [low, high]."""

    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
        if n < low or (high is not None and n > high):
            raise argparse.ArgumentTypeError(f"must be {low}-{high}, got {n}" if high is not None
                                             else f"must be >= {low}, got {n}")
        return n

    parse.__name__ = "int"  # argparse names the type in its messages
    return parse


def _seconds(*, zero: bool = False) -> Callable[[str], float]:
    """A duration in seconds: > 0 (or >= 0 where 0 means "never")."""

    def parse(value: str) -> float:
        try:
            x = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected seconds, got {value!r}") from None
        if not (x >= 0 if zero else x > 0) or x != x or x == float("inf"):
            raise argparse.ArgumentTypeError(f"must be {'>= 0' if zero else '> 0'}, got {value}")
        return x

    parse.__name__ = "seconds"
    return parse


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value.upper() not in (c.upper() for c in choices):
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(choices)}, got {value!r}")
        return next(c for c in choices if c.upper() == value.upper())

    parse.__name__ = "choice"
    return parse


def _optional_int(value: str) -> int | None:
    return None if value in ("", "none", "unlimited") else _int(0)(value)


def _port(value: str) -> int:
    return _int(1, 65535)(value)


def _from_toml(raw: Any) -> str:
    """A TOML value as the text a flag would carry (``[1000, 1000]`` -> ``1000,1000``)."""
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, list):
        return ",".join(_from_toml(x) for x in raw)
    if isinstance(raw, dict):
        raise argparse.ArgumentTypeError("expected a value, not a table")
    return str(raw)


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
DEFAULT_HTTP_PORT = 61680


def _positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return number


def _optional_positive_int(value: str) -> int | None:
    return None if value in ("", "none", "auto") else _positive_int(value)


_SIZE_UNITS = {"": 1, "k": 1024, "kib": 1024, "m": 1024**2, "mib": 1024**2, "g": 1024**3, "gib": 1024**3}


def _size(value: str) -> int:
    """A byte count: an integer with an optional unit (K, M, G or KiB, MiB, GiB; powers of 1024)."""
    text = str(value).strip().lower()
    digits = text.rstrip("kmgib")
    unit = _SIZE_UNITS.get(text[len(digits) :].strip())
    try:
        number = int(digits) * unit if unit is not None else 0
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive size such as 65536 or 64MiB, got {value!r}")
    return number


def _optional_size(value: str) -> int | None:
    """A byte count, or none (no limit)."""
    return None if str(value).strip().lower() in ("", "none", "unlimited", "0") else _size(value)


def _watermark(value: str) -> float | None:
    """A fraction of the machine's RAM (0.4) or a byte count (2GiB); 0 or none: no limit."""
    text = str(value).strip().lower()
    if text in ("", "none", "unlimited", "0"):
        return None
    try:
        fraction = float(text)
    except ValueError:
        return float(_size(value))
    if not 0 < fraction <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction of RAM from 0 to 1 (such as 0.4) or a size such "
                                          f"as 2GiB, got {value!r}")
    return fraction


@dataclass(frozen=True)
class Option:
    name: str  # flag without dashes, e.g. "max-frame-size"
    type: Callable[[str], Any]
    default: Any
    help: str
    metavar: str | None = None

    @property
    def key(self) -> str:
        return self.name.replace("-", "_")

    @property
    def env(self) -> str:
        return "STOMPMQ_" + self.key.upper()


OPTIONS: tuple[Option, ...] = (
    Option("host", str, "127.0.0.1", "address to listen on (loopback by default, so an unauthenticated broker is not exposed)"),
    Option("port", _port, 61613, "TCP port for STOMP"),
    Option("store", str, None, "message store: 'memory' (no durability), 'sqlite:///PATH' (default: sqlite file in --data-dir) or 'postgresql://USER:PASSWORD@HOST:PORT/DB' (several brokers may share it)", "URL"),
    Option("data-dir", str, "./stompmq-data", "directory for the default SQLite store"),
    Option("flush-interval", _seconds(), 0.05, "seconds within which SENDs without receipt are committed (write-behind)", "SECONDS"),
    Option("lease", _seconds(), 10.0, "PostgreSQL store: seconds after which a broker that stopped renewing its lease (a crash) loses its messages to the other brokers", "SECONDS"),
    Option("login", str, None, "require this login in CONNECT (with --passcode)"),
    Option("passcode", str, None, "require this passcode in CONNECT (with --login)"),
    Option("max-frame-size", _int(1), 16 * 1024 * 1024, "largest accepted frame body in bytes", "BYTES"),
    Option("max-header-bytes", _int(1), 64 * 1024, "largest accepted command line plus header block in bytes", "BYTES"),
    Option("max-headers", _int(1), 1000, "most headers accepted in one frame", "N"),
    Option("heart-beat", _heart_beat, (10_000, 10_000), "heart-beats the server offers: SEND_MS,RECEIVE_MS (0 = none)", "SEND_MS,RECEIVE_MS"),
    Option("heart-beat-grace", _seconds(), 2.0, "how many receive intervals a silent client gets before it is closed", "FACTOR"),
    Option("connect-timeout", _seconds(), 5.0, f"seconds a new connection has to be CONNECTED (TLS and WebSocket handshakes and the login included); until then it may send one CONNECT frame of at most {CONNECT_MAX_BYTES} bytes", "SECONDS"),
    Option("default-prefetch", _int(1), 100, "prefetch of a client-ack subscription that asks for none", "N"),
    Option("max-prefetch", _int(1), 10_000, "upper bound on the prefetch a subscription may ask for", "N"),
    Option("window", _int(1), 10_000, "ready messages a queue keeps in memory; the rest is paged in from the store", "N"),
    Option("window-bytes", _size, 16 * 1024**2, "bytes of ready messages a queue keeps in memory (with --window, whichever is reached first)", "BYTES"),
    Option("queue-pace-timeout", _seconds(zero=True), 1.0, "seconds a queue whose consumers fall behind (its ready messages fill half its window) may stop reading its producers in one stretch; after that its backlog goes to the store (0 = never pace producers)", "SECONDS"),
    Option("store-timeout", _seconds(zero=True), 30.0, "seconds a SEND with a receipt waits for an unavailable store (its producer paused meanwhile) before it is answered ERROR, withdrawn and never delivered (0 = at the first failed commit)", "SECONDS"),
    Option("max-unflushed-bytes", _size, 64 * 1024**2, "bytes of messages waiting for the disk before producers are paused (back-pressure)", "BYTES"),
    Option("max-queue-bytes", _optional_size, None, "body bytes any queue may hold unless its declaration says otherwise; past it a SEND gets an ERROR (reject-publish) (default unlimited)", "BYTES"),
    Option("disk-free-limit", _optional_size, 50 * 1024**2, "free bytes the SQLite store's file system must keep; below it publishers are blocked until space is freed (a resource alarm; 0 = off)", "BYTES"),
    Option("memory-high-watermark", _watermark, 0.4, "resident memory past which publishers are blocked until it falls (a resource alarm): a fraction of RAM or a size such as 2GiB (0 = off)", "FRACTION|BYTES"),
    Option("max-connections", _optional_positive_int, None, "client connections served at once; more are refused with an ERROR (default: the open-file limit minus a reserve)", "N"),
    Option("ack-timeout", _seconds(zero=True), 0.0, "seconds before an unacked message is redelivered (0 = never); SEND/SUBSCRIBE 'ack-timeout' headers override", "SECONDS"),
    Option("max-redeliveries", _optional_int, None, "redeliveries before a message goes to its dead-letter queue (default unlimited)", "N"),
    Option("dlq-prefix", str, "DLQ.", "dead-letter queue of /queue/NAME is /queue/<prefix>NAME", "PREFIX"),
    Option("dead-letter-rejected", _flag, False, "NACK with requeue:false moves the message to its dead-letter queue instead of discarding it", "BOOL"),
    Option("topic-overflow", _topic_overflow, "block", "a topic subscriber over its output limit: block the publisher (bounded memory), drop its messages, or disconnect it", "block|drop|disconnect"),
    Option("topic-block-timeout", _seconds(zero=True), 5.0, "under --topic-overflow block, seconds one topic subscriber may hold a publisher back; after that, if another subscriber of its topic drains twice as fast, or if its output never fell below the limit while the publisher waited (it reads nothing), it is treated as under drop for the rest of its connection (0 = wait forever)", "SECONDS"),
    Option("stream-max-age", float, 0.0, "seconds a stream keeps its entries (0 = no limit); per stream: /control/declare/stream/NAME max-age", "SECONDS"),
    Option("stream-max-bytes", int, 0, "body bytes a stream keeps (0 = no limit); per stream: /control/declare/stream/NAME max-bytes", "BYTES"),
    Option("stream-segment", int, 10_000, "entries per stream segment, the unit retention deletes", "N"),
    Option("definitions", str, None, "TOML or JSON file declaring exchanges, queues and bindings at start", "FILE"),
    Option("log-level", _choice(*LOG_LEVELS), "INFO", "logging level (DEBUG: every frame; INFO: start, connections)", "LEVEL"),
    Option("log-format", _choice("text", "json"), "text", "log lines as text, or one JSON object per line for log shippers", "FORMAT"),
    Option("http-host", str, "127.0.0.1", "address of the management API, /metrics and dashboard (HTTP basic auth over --users-file; open without one)"),
    Option("http-port", _int(0, 65535), DEFAULT_HTTP_PORT, "TCP port of the management API, /metrics and dashboard (0 = off)"),
    Option("max-http-connections", _int(1), 64, "connections the management API serves at once (each is unauthenticated until its request's credentials are checked); more get HTTP 429 at once, counted in /metrics; they are reserved from the open-file limit before --max-connections' default", "N"),
    Option("metrics-top-queues", _int(0), 100, "queues with per-queue series in /metrics (the busiest, then those holding most; dead-letter queues besides)", "N"),
    Option("tls-port", _optional_int, None, "TCP port for STOMP over TLS (needs --tls-cert and --tls-key)", "PORT"),
    Option("tls-cert", str, None, "PEM certificate chain of the TLS listeners (reloaded on SIGHUP or change)", "FILE"),
    Option("tls-key", str, None, "PEM private key of --tls-cert", "FILE"),
    Option("tls-ca", str, None, "PEM CA certificates that client certificates are verified against", "FILE"),
    Option("tls-verify-client", _flag, False, "require a client certificate signed by --tls-ca", "BOOL"),
    Option("tls-cert-login", _flag, False, "a verified client certificate alone logs its CN in (a CONNECT without passcode); off by default, since a browser presents its certificate to any page that opens a wss:// connection", "BOOL"),
    Option("ws-port", _optional_int, None, "TCP port for STOMP over WebSocket (ws://HOST:PORT/ws)", "PORT"),
    Option("wss-port", _optional_int, None, "TCP port for STOMP over WebSocket on TLS (wss://HOST:PORT/ws; the --tls-* files)", "PORT"),
    Option("ws-allowed-origins", _origins, (), "web origins (scheme://host[:port]; null; * for any) whose pages may open a WebSocket besides the broker's own origin (Origin host:port = Host header); a browser's handshake from any other origin gets HTTP 403, one without Origin (not a browser) is accepted", "ORIGIN,..."),
    Option("max-subscriptions", _int(1), 1000, "subscriptions one connection may hold at once", "N"),
    Option("max-transaction-frames", _int(1), 10_000, "frames (SEND, ACK, NACK) one transaction may hold; past it an ERROR naming the limit", "N"),
    Option("max-transaction-bytes", _size, 32 * 1024**2, "bytes one login may hold in open transactions, over all its connections and vhosts (bodies, headers and 256 bytes a frame); past it an ERROR naming the limit", "BYTES"),
    Option("max-temp-queues", _int(1), 100, "temporary queues (/temp-queue/NAME) one connection may make", "N"),
    Option("max-queues", _int(1), 20_000, "queues in use per vhost; a SEND or SUBSCRIBE naming a new queue past it gets an ERROR naming the limit", "N"),
    Option("max-stream-producers", _int(1), 10_000, "idempotent producers (x-producer-id) one stream remembers; a new one past it forgets those not seen for --stream-producer-expiry, or gets an ERROR naming the limit if none expired", "N"),
    Option("stream-producer-expiry", _seconds(), 7 * 24 * 3600.0, "seconds after which an idempotent producer not seen may be forgotten (its retry is then taken for a new producer)", "SECONDS"),
    Option("max-connections-per-user", _optional_positive_int, 100, "connections one user of --users-file may hold at once; more get an ERROR naming the limit at CONNECT", "N"),
    Option("stamp-user-id", _flag, False, "set user-id and JMSXUserID of every message to its sender's login (ActiveMQ's populateJMSXUserID); off, a SEND may carry only its own login there (an ERROR otherwise, as RabbitMQ)", "BOOL"),
    Option("virtual-topic-prefix", str, "VirtualTopic.", "ActiveMQ's virtual topics: a consumer of /queue/Consumer.GROUP.PREFIXNAME makes that queue collect every message sent to /topic/PREFIXNAME from then on, whether or not anyone is subscribed (empty: off)", "PREFIX"),
    Option("max-connections-per-address", _optional_int, None, "connections one source IP address may hold at once (default unlimited); more are refused at once and do not count against --max-connections", "N"),
    Option("max-login-bytes", _login_budget, 16 * 1024**2, f"bytes all connections not yet CONNECTED may buffer together; each reserves {CONNECT_MAX_BYTES} (its largest CONNECT frame), and a new connection past the budget is refused at once with an ERROR", "BYTES"),
    Option("host-names", _names, (), "more names clients use for this server (DNS aliases, a load balancer): a CONNECT host header with one of them is in the default vhost, like localhost, IP addresses and the machine's name; the management API and the WebSocket listeners answer only a Host among these names (no DNS rebinding; * lets any Host through)", "NAME,..."),
    Option("oauth-jwks", str, None, "token logins: a JWKS file or http(s) URL that JWT access tokens (CONNECT's passcode, or Authorization: Bearer on the WebSocket handshake) are checked against; anonymous access is off (needs the oauth extra)", "FILE|URL"),
    Option("oauth-resource-server-id", str, "stompmq", "token logins: the audience tokens must name and the prefix of their scopes (RS.read:VHOST/NAME, RS.write:..., RS.configure:..., RS.tag:administrator)", "ID"),
    Option("users-file", str, None, "TOML users file with hashed passwords and permissions (see 'stompmq users'); anonymous access is off", "FILE"),
)


#: ``STOMPMQ_*`` variables that are not broker settings, with what reads them.  Any other
#: ``STOMPMQ_*`` variable is taken for a misspelt setting and refused (a typo such as
#: ``STOMPMQ_PORTT`` would otherwise be ignored without a word).
OTHER_VARIABLES = {
    "STOMPMQ_ADMIN_URL": "stompmq admin --url",
    "STOMPMQ_ADMIN_USER": "stompmq admin --user",
    "STOMPMQ_ADMIN_PASSWORD": "stompmq admin --password",
    "STOMPMQ_PURE_PYTHON_CODEC": "1: the Python frame codec instead of the C one (read at import)",
    "STOMPMQ_STORE_URL": "the store alembic migrates when run by hand (alembic.ini)",
    "STOMPMQ_MYPYC": "1: setup.py compiles the engine with mypyc (read at build time)",
    "STOMPMQ_EXPECT_ENGINE": "the test suite: the engine build the run must import, pure or compiled",
    "STOMPMQ_TEST_POSTGRES_URL": "the test suite: a PostgreSQL server to use instead of starting one",
    "STOMPMQ_FUZZ_EXAMPLES": "the test suite: examples of the frame codec fuzz tests",
    "STOMPMQ_CRASH_SEED": "the test suite: replays one run of the kill -9 test",
    "STOMPMQ_CHAOS_SEED": "the test suite: replays one schedule of the chaos test (scripts/chaos.py)",
}


def _nearest(name: str, names: list[str]) -> str:
    """`` (did you mean X?)`` for the name closest to a misspelt ``name``, or nothing."""
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


@dataclass(frozen=True, slots=True)
class Config:
    """The merged settings, one typed field per option of ``OPTIONS`` (the same key, the type
    its parser returns, ``| None`` where the default is None): a misspelt ``config.ack_timout``
    fails mypy.  ``tests/test_config.py`` checks the fields against the table both ways."""

    host: str
    port: int
    store: str | None
    data_dir: str
    flush_interval: float
    lease: float
    login: str | None
    passcode: str | None
    max_frame_size: int
    max_header_bytes: int
    max_headers: int
    heart_beat: tuple[int, int]
    heart_beat_grace: float
    connect_timeout: float
    default_prefetch: int
    max_prefetch: int
    window: int
    window_bytes: int
    queue_pace_timeout: float
    store_timeout: float
    max_unflushed_bytes: int
    max_queue_bytes: int | None
    disk_free_limit: int | None
    memory_high_watermark: float | None
    max_connections: int | None
    ack_timeout: float
    max_redeliveries: int | None
    dlq_prefix: str
    dead_letter_rejected: bool
    topic_overflow: str
    topic_block_timeout: float
    stream_max_age: float
    stream_max_bytes: int
    stream_segment: int
    definitions: str | None
    log_level: str
    log_format: str
    http_host: str
    http_port: int
    max_http_connections: int
    metrics_top_queues: int
    tls_port: int | None
    tls_cert: str | None
    tls_key: str | None
    tls_ca: str | None
    tls_verify_client: bool
    tls_cert_login: bool
    ws_port: int | None
    wss_port: int | None
    ws_allowed_origins: tuple[str, ...]
    max_subscriptions: int
    max_transaction_frames: int
    max_transaction_bytes: int
    max_temp_queues: int
    max_queues: int
    max_stream_producers: int
    stream_producer_expiry: float
    max_connections_per_user: int | None
    stamp_user_id: bool
    virtual_topic_prefix: str
    max_connections_per_address: int | None
    max_login_bytes: int
    host_names: tuple[str, ...]
    oauth_jwks: str | None
    oauth_resource_server_id: str
    users_file: str | None

    @property
    def store_url(self) -> str:
        if self.store:
            return self.store
        # Absolute: a broker started from another directory must not open a new, empty store.
        return "sqlite:///" + str(Path(self.data_dir).resolve() / "stompmq.db")

    @property
    def store_shown(self) -> str:
        """The store for logs and the API: an absolute path, or the URL with its password masked."""
        url = self.store_url
        if url.startswith("sqlite:///"):
            return "sqlite:///" + str(Path(url[len("sqlite:///"):]).resolve())
        return masked(url)

    def server(self) -> ServerSettings:
        return ServerSettings(
            host=self.host,
            port=self.port,
            login=self.login,
            passcode=self.passcode,
            limits=Limits(self.max_frame_size, self.max_header_bytes, self.max_headers),
            heart_beat=self.heart_beat,
            heart_beat_grace=self.heart_beat_grace,
            connect_timeout=self.connect_timeout,
            topic_block_timeout=self.topic_block_timeout,
            max_connections=self.max_connections,
            disk_path=str(Path(self.store_url[len("sqlite:///"):]).resolve().parent)
            if self.store_url.startswith("sqlite:///") else None,
            disk_free_limit=self.disk_free_limit,
            memory_high_watermark=self.memory_high_watermark,
            http_host=self.http_host,
            http_port=self.http_port or None,
            max_http_connections=self.max_http_connections,
            metrics_top_queues=self.metrics_top_queues,
            store_shown=self.store_shown,
            tls_port=self.tls_port,
            tls_cert=self.tls_cert,
            tls_key=self.tls_key,
            tls_ca=self.tls_ca,
            tls_verify_client=self.tls_verify_client,
            tls_cert_login=self.tls_cert_login,
            ws_port=self.ws_port,
            wss_port=self.wss_port,
            ws_allowed_origins=self.ws_allowed_origins,
            users_file=self.users_file,
            oauth_jwks=self.oauth_jwks,
            oauth_resource_server_id=self.oauth_resource_server_id,
            max_connections_per_address=self.max_connections_per_address,
            max_connections_per_user=self.max_connections_per_user,
            max_login_bytes=self.max_login_bytes,
            host_names=self.host_names,
        )

    def broker(self) -> BrokerConfig:
        return BrokerConfig(
            default_prefetch=self.default_prefetch,
            max_prefetch=self.max_prefetch,
            window=self.window,
            window_bytes=self.window_bytes,
            queue_pace_timeout=self.queue_pace_timeout,
            store_timeout=self.store_timeout,
            ack_timeout=self.ack_timeout,
            max_redeliveries=self.max_redeliveries,
            dlq_prefix=self.dlq_prefix,
            dead_letter_rejected=self.dead_letter_rejected,
            topic_overflow=self.topic_overflow,
            stream_max_age=self.stream_max_age,
            stream_max_bytes=self.stream_max_bytes,
            stream_segment=self.stream_segment,
            definitions=self.definitions,
            max_subscriptions=self.max_subscriptions,
            max_transaction_frames=self.max_transaction_frames,
            max_transaction_bytes=self.max_transaction_bytes,
            max_temp_queues=self.max_temp_queues,
            max_queues=self.max_queues,
            max_stream_producers=self.max_stream_producers,
            stream_producer_expiry=self.stream_producer_expiry,
            stamp_user_id=self.stamp_user_id,
            virtual_topic_prefix=self.virtual_topic_prefix,
            max_queue_bytes=self.max_queue_bytes,
        )


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, no usage block: ``stompmq: error: <source> <key>: <why>``, exit code 2."""
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="stompmq",
        description="A STOMP 1.0-1.2 message broker with durable queues "
        "(also: 'stompmq admin --help' for the management CLI, 'stompmq backup DEST' to copy a live SQLite store). "
        "Every option can also be set in the environment (STOMPMQ_<OPTION>, e.g. STOMPMQ_PORT) "
        "or in the TOML file given with --config (key = option name with underscores). "
        "'stompmq users --help' manages the users file of --users-file.",
    )
    parser.add_argument("--version", action="version", version=f"stompmq {__version__}")
    parser.add_argument("--config", metavar="FILE", help="TOML file with settings (flags and environment win)")
    for opt in OPTIONS:
        shown = opt.default if not isinstance(opt.default, tuple) else ",".join(map(str, opt.default))
        parser.add_argument(
            "--" + opt.name,
            type=opt.type,
            default=argparse.SUPPRESS,
            metavar=opt.metavar,
            help=f"{opt.help} [default: {shown}; env {opt.env}]",
        )
    return parser


def load_config(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Merge the sources; raises SystemExit (via argparse) on a bad value."""
    parser = build_parser()
    args = vars(parser.parse_args(argv))
    environ = os.environ if environ is None else environ
    file_values: dict[str, Any] = {}
    path = args.get("config")
    if path:
        try:
            with open(path, "rb") as f:
                loaded = tomllib.load(f)
        except OSError as e:
            parser.error(f"--config {path}: cannot read: {e.strerror or e}")
        except tomllib.TOMLDecodeError as e:
            parser.error(f"--config {path}: not valid TOML: {e}")
        file_values = {key.replace("-", "_"): value for key, value in loaded.items()}  # dashes as in flags
    known = {opt.key for opt in OPTIONS}
    unknown = sorted(set(file_values) - known)
    if unknown:
        parser.error(f"{path}: unknown setting {unknown[0]}{_nearest(unknown[0], sorted(known))}")
    variables = [opt.env for opt in OPTIONS]
    for name in sorted(environ):
        if name.startswith("STOMPMQ_") and name not in OTHER_VARIABLES and name not in variables:
            parser.error(f"environment {name}: no such setting{_nearest(name, variables)}")
    values: dict[str, Any] = {}
    for opt in OPTIONS:
        if opt.key in args:
            values[opt.key] = args[opt.key]
        elif opt.env in environ:
            values[opt.key] = _parse(parser, opt, environ[opt.env], f"environment {opt.env}")
        elif opt.key in file_values:
            values[opt.key] = _parse(parser, opt, file_values[opt.key], f"{path}: {opt.key}")
        else:
            values[opt.key] = opt.default
    if (values["login"] is None) != (values["passcode"] is None):
        parser.error("--login and --passcode go together")
    return Config(**values)


def _parse(parser: argparse.ArgumentParser, opt: Option, raw: Any, source: str) -> Any:
    try:
        return opt.type(_from_toml(raw))
    except (ValueError, argparse.ArgumentTypeError) as e:
        parser.error(f"{source}: {e}")
