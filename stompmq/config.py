"""Settings: command-line flags > environment (STOMPMQ_*) > TOML file > defaults.

Every option is declared once in ``OPTIONS``; the command line, the
environment variable names and the TOML keys are all derived from it, so the
three sources cannot drift apart.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import __version__
from .broker import BrokerConfig
from .protocol import Limits
from .server import ServerSettings


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


def _optional_int(value: str) -> int | None:
    return None if value in ("", "none", "unlimited") else int(value)


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
    Option("port", int, 61613, "TCP port for STOMP"),
    Option("store", str, None, "message store: 'memory' (no durability), 'sqlite:///PATH' (default: sqlite file in --data-dir) or 'postgresql://USER:PASSWORD@HOST:PORT/DB' (several brokers may share it)", "URL"),
    Option("data-dir", str, "./stompmq-data", "directory for the default SQLite store"),
    Option("flush-interval", float, 0.05, "seconds within which SENDs without receipt are committed (write-behind)", "SECONDS"),
    Option("lease", float, 10.0, "PostgreSQL store: seconds after which a broker that stopped renewing its lease (a crash) loses its messages to the other brokers", "SECONDS"),
    Option("login", str, None, "require this login in CONNECT (with --passcode)"),
    Option("passcode", str, None, "require this passcode in CONNECT (with --login)"),
    Option("max-frame-size", int, 16 * 1024 * 1024, "largest accepted frame body in bytes", "BYTES"),
    Option("max-header-bytes", int, 64 * 1024, "largest accepted command line plus header block in bytes", "BYTES"),
    Option("max-headers", int, 1000, "most headers accepted in one frame", "N"),
    Option("heart-beat", _heart_beat, (10_000, 10_000), "heart-beats the server offers: SEND_MS,RECEIVE_MS (0 = none)", "SEND_MS,RECEIVE_MS"),
    Option("heart-beat-grace", float, 2.0, "how many receive intervals a silent client gets before it is closed", "FACTOR"),
    Option("connect-timeout", float, 10.0, "seconds a new connection has to send CONNECT", "SECONDS"),
    Option("default-prefetch", int, 100, "prefetch of a client-ack subscription that asks for none", "N"),
    Option("max-prefetch", int, 10_000, "upper bound on the prefetch a subscription may ask for", "N"),
    Option("window", int, 10_000, "ready messages a queue keeps in memory; the rest is paged in from the store", "N"),
    Option("ack-timeout", float, 0.0, "seconds before an unacked message is redelivered (0 = never); SEND/SUBSCRIBE 'ack-timeout' headers override", "SECONDS"),
    Option("max-redeliveries", _optional_int, None, "redeliveries before a message goes to its dead-letter queue (default unlimited)", "N"),
    Option("dlq-prefix", str, "DLQ.", "dead-letter queue of /queue/NAME is /queue/<prefix>NAME", "PREFIX"),
    Option("dead-letter-rejected", _flag, False, "NACK with requeue:false moves the message to its dead-letter queue instead of discarding it", "BOOL"),
    Option("definitions", str, None, "TOML or JSON file declaring exchanges, queues and bindings at start", "FILE"),
    Option("log-level", str, "INFO", "logging level (DEBUG, INFO, WARNING, ERROR)", "LEVEL"),
    Option("tls-port", _optional_int, None, "TCP port for STOMP over TLS (needs --tls-cert and --tls-key)", "PORT"),
    Option("tls-cert", str, None, "PEM certificate chain of the TLS listeners (reloaded on SIGHUP or change)", "FILE"),
    Option("tls-key", str, None, "PEM private key of --tls-cert", "FILE"),
    Option("tls-ca", str, None, "PEM CA certificates that client certificates are verified against", "FILE"),
    Option("tls-verify-client", _flag, False, "require a client certificate signed by --tls-ca (its CN may be the login)", "BOOL"),
    Option("ws-port", _optional_int, None, "TCP port for STOMP over WebSocket (ws://HOST:PORT/ws)", "PORT"),
    Option("wss-port", _optional_int, None, "TCP port for STOMP over WebSocket on TLS (wss://HOST:PORT/ws; the --tls-* files)", "PORT"),
    Option("max-subscriptions", int, 1000, "subscriptions one connection may hold at once", "N"),
    Option("max-connections-per-address", _optional_int, None, "connections one source IP address may hold at once (default unlimited)", "N"),
    Option("users-file", str, None, "TOML users file with hashed passwords and permissions (see 'stompmq users'); anonymous access is off", "FILE"),
)


@dataclass(frozen=True)
class Config:
    values: Mapping[str, Any]

    def __getattr__(self, key: str) -> Any:
        try:
            return self.values[key]
        except KeyError:
            raise AttributeError(key) from None

    @property
    def store_url(self) -> str:
        store = self.values["store"]
        if store:
            return str(store)
        return "sqlite:///" + str(Path(self.values["data_dir"]) / "stompmq.db")

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
            tls_port=self.tls_port,
            tls_cert=self.tls_cert,
            tls_key=self.tls_key,
            tls_ca=self.tls_ca,
            tls_verify_client=self.tls_verify_client,
            ws_port=self.ws_port,
            wss_port=self.wss_port,
            users_file=self.users_file,
            max_connections_per_address=self.max_connections_per_address,
        )

    def broker(self) -> BrokerConfig:
        return BrokerConfig(
            default_prefetch=self.default_prefetch,
            max_prefetch=self.max_prefetch,
            window=self.window,
            ack_timeout=self.ack_timeout,
            max_redeliveries=self.max_redeliveries,
            dlq_prefix=self.dlq_prefix,
            dead_letter_rejected=self.dead_letter_rejected,
            definitions=self.definitions,
            max_subscriptions=self.max_subscriptions,
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stompmq",
        description="A STOMP 1.0-1.2 message broker with durable queues. "
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
    if args.get("config"):
        with open(args["config"], "rb") as f:
            file_values = tomllib.load(f)
    known = {opt.key for opt in OPTIONS}
    unknown = set(file_values) - known
    if unknown:
        parser.error(f"unknown settings in {args['config']}: {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    for opt in OPTIONS:
        if opt.key in args:
            values[opt.key] = args[opt.key]
        elif opt.env in environ:
            try:
                values[opt.key] = opt.type(environ[opt.env])
            except (ValueError, argparse.ArgumentTypeError) as e:
                parser.error(f"{opt.env}: {e}")
        elif opt.key in file_values:
            raw = file_values[opt.key]
            values[opt.key] = opt.type(raw) if isinstance(raw, str) else raw
        else:
            values[opt.key] = opt.default
    if (values["login"] is None) != (values["passcode"] is None):
        parser.error("--login and --passcode go together")
    return Config(values)
