"""The LISTEN thread of a shared PostgreSQL store: its own connection, each notification
handed to the trio thread (storage/postgres.py lists what the notifications say).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import trio

from stompmq.logs import masked
from stompmq.storage import jsontext
from stompmq.storage.pg_sql import (
    CHANNEL,
    CONNECT_TIMEOUT,
    LISTEN_RETRY,
    LISTEN_TICK,
)
from stompmq.storage.pg_streams import SharedStreams

_dumps, _loads = jsontext.dumps, jsontext.loads

class Listener:
    """A thread with its own connection, LISTENing on ``CHANNEL``: each notification goes to
    ``deliver`` on the trio thread (one ``run_sync_soon`` per batch received)."""

    def __init__(self, url: str, broker_id: str, token: trio.lowlevel.TrioToken,
                 deliver: Callable[[list[str]], None]) -> None:
        self.url = url
        self.broker_id = broker_id
        self._token = token
        self._deliver = deliver
        self._stop = threading.Event()
        #: set once the first LISTEN is in place: notifications from then on are never missed
        self.listening = threading.Event()
        #: when a notification last came (``p:`` pings included): the connection was alive then
        self.heard = -math.inf
        self._thread = threading.Thread(target=self._main, name=f"stompmq-listen {masked(url)}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(LISTEN_TICK * 4)

    def _main(self) -> None:
        connected_before = False
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.url, connect_timeout=CONNECT_TIMEOUT, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.listening.set()
                    if connected_before:
                        self._send(["*"])  # notifications may have been lost meanwhile: look again
                    connected_before = True
                    while not self._stop.is_set():
                        # Each packet as it comes (stop_after counts packets' worth): the others
                        # hear of claims given back and demand at once, not a tick later.
                        batch = [n.payload for n in conn.notifies(timeout=LISTEN_TICK, stop_after=1)]
                        if batch:
                            self.heard = time.monotonic()
                            self._send(self._resolve(conn, batch))
            except psycopg.Error:
                self._stop.wait(LISTEN_RETRY)

    def _resolve(self, conn: psycopg.Connection[Any], payloads: list[str]) -> list[str]:
        """Replace relayed topic messages by the message itself (read from topic_relay), and
        another broker's stream news by the stream's state (``S:`` + JSON, once per stream)."""
        out = []
        streams = SharedStreams(self.broker_id)
        for payload in dict.fromkeys(payloads):
            if payload.startswith("p:"):
                continue  # a broker's ping to its own listener: ``heard`` is all it is for
            if payload.startswith("s:"):
                origin, _, key = payload[2:].partition(":")
                if origin == self.broker_id:
                    continue  # our own commit told our engine already
                with conn.cursor() as cur:
                    state = streams.state(cur, key)
                payload = "S:" + _dumps([key, None if state is None else list(dataclasses.astuple(state))])
            elif payload.startswith("r:"):
                ref = _loads(payload[2:])
                if ref["b"] == self.broker_id:
                    continue
                row = conn.execute(
                    "SELECT topic, headers, body FROM topic_relay WHERE id = %s", (ref["i"],)
                ).fetchone()
                if row is None:
                    continue  # expired before we got to it
                payload = "t:" + _dumps(
                    {"b": ref["b"], "t": row[0], "h": _loads(row[1]), "d": base64.b64encode(bytes(row[2])).decode()}
                )
            out.append(payload)
        return out

    def _send(self, payloads: list[str]) -> None:
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(self._deliver, payloads)
