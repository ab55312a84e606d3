"""What the network side of the server needs to know about its configuration."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..protocol import Limits


@dataclass(slots=True)
class ServerSettings:
    host: str = "127.0.0.1"  # loopback: a broker without credentials is not exposed by default
    port: int = 61613
    login: str | None = None
    passcode: str | None = None
    limits: Limits = field(default_factory=Limits)
    #: What the server offers in CONNECTED: (can send every ms, wants to receive every ms).
    heart_beat: tuple[int, int] = (10_000, 10_000)
    #: A peer may be this many times late with its heart-beats before it is closed.
    heart_beat_grace: float = 2.0
    #: Seconds a new connection has to be CONNECTED (TLS and WebSocket handshakes, login included).
    connect_timeout: float = 5.0
    #: --topic-overflow block: seconds a publisher waits for one slow topic subscriber before
    #: that subscriber is treated as under drop for the rest of its connection; 0 = wait forever.
    topic_block_timeout: float = 5.0
    #: Client connections served at once (more are refused); None: derived from the open-file limit.
    max_connections: int | None = None
    #: Resource alarms (server/alarms.py): publishers wait while the file system of ``disk_path``
    #: (the SQLite store's directory; None: not on this machine) has less than ``disk_free_limit``
    #: bytes free, or the process is resident in more than ``memory_high_watermark`` (a fraction
    #: of RAM up to 1, bytes above); None: that alarm off.
    disk_path: str | None = None
    disk_free_limit: int | None = None
    memory_high_watermark: float | None = None
    #: The management API and /metrics (server/api/); port None: off.
    http_host: str = "127.0.0.1"
    http_port: int | None = None
    #: HTTP connections served at once (api/listener.py); more get 429 at once.
    max_http_connections: int = 64
    #: Queues with per-queue series in /metrics (the busiest), bounding its label cardinality.
    metrics_top_queues: int = 100
    #: The store as an operator should see it (password masked), for the start-up line and the API.
    store_shown: str = ""
    #: TLS listener (0 = any free port, None = none) and its PEM files; see security.py.
    tls_port: int | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    tls_verify_client: bool = False
    #: A verified client certificate alone logs its CN in (CONNECT without a passcode); off by
    #: default: a browser presents its certificate to any page that opens a wss:// connection.
    tls_cert_login: bool = False
    #: STOMP over WebSocket (path /ws): plain and over TLS (None = none).
    ws_port: int | None = None
    wss_port: int | None = None
    #: Origins (``scheme://host[:port]``, ``null`` or ``*``) whose pages may open a WebSocket
    #: besides the broker's own origin (websocket.py); a handshake without Origin is not a browser's.
    ws_allowed_origins: tuple[str, ...] = ()
    #: TOML users file (auth.py); replaces --login/--passcode and turns anonymous access off.
    users_file: str | None = None
    #: Token logins (tokens.py): the JWKS (a file or an http(s) URL) that access tokens are
    #: checked against (None: off), and the resource server id their ``aud`` and scopes name.
    oauth_jwks: str | None = None
    oauth_resource_server_id: str = "stompmq"
    #: Connections one source address may hold at once (None = unlimited).
    max_connections_per_address: int | None = None
    #: Connections one user of the users file may hold at once (None = unlimited).
    max_connections_per_user: int | None = 100
    #: Bytes all connections not yet CONNECTED may buffer together (logins.py); past it, new
    #: connections are refused at once.
    max_login_bytes: int = 16 * 1024 * 1024
    #: More names of this server in CONNECT's host header (server/vhosts.py), lowercased.
    host_names: tuple[str, ...] = ()
