"""The real browser client: @stomp/stompjs in headless Chromium over ws://…/ws.

The page (tests/browser/page.html) and the stompjs bundle (installed by
scripts/test with npm into tests/browser/node_modules) are served by the test
itself on loopback; Chromium and its driver are Debian's.  Nothing is
downloaded while the test runs: when something is missing the test is skipped
and says what.
"""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from stompmq.server import ServerSettings
from stompmq.server.listeners import listener_port

from ..support.broker_thread import BrokerThread
from ..support.chromium import chromium
from ..support.stompclient import Client
from ..support.waiting import wait_until

pytestmark = pytest.mark.browser

HERE = Path(__file__).resolve().parents[1] / "browser"
BUNDLE = HERE / "node_modules" / "@stomp" / "stompjs" / "bundles" / "stomp.umd.min.js"


class _Files(http.server.SimpleHTTPRequestHandler):
    def translate_path(self, path: str) -> str:
        name = path.split("?")[0].lstrip("/")
        return str(BUNDLE if name == "stomp.umd.min.js" else HERE / "page.html")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def page_server() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Files, directory=str(HERE)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(name="chromium")
def chromium_driver() -> Iterator[object]:
    missing = [] if BUNDLE.exists() else ["@stomp/stompjs (npm install in tests/browser)"]
    with chromium(*missing) as driver:
        yield driver


def test_stompjs_in_chromium_connects_sends_receives_and_acks(
    chromium, page_server: int, make_memory_broker: Callable[..., BrokerThread]
) -> None:
    # the page comes from another origin than the broker's WebSocket: allowed explicitly
    broker = make_memory_broker(settings=ServerSettings(port=0, ws_port=0,
                                                        ws_allowed_origins=(f"http://127.0.0.1:{page_server}",)))
    ws_port = listener_port(broker.listeners[1])
    with Client(broker.port) as python:
        python.subscribe("/queue/from-browser")
        chromium.get(f"http://127.0.0.1:{page_server}/page.html?port={ws_port}")

        def events() -> list[str]:
            return list(chromium.execute_script("return window.events || []"))

        wait_until(lambda: "receipt" in events(), "the browser's SEND receipted", timeout=15)
        assert events()[0] == "connected 1.2"
        assert python.message().body == b"hello from the browser"
        python.send_to("/queue/to-browser", b"hello from Python")
        wait_until(lambda: "acked" in events(), "the browser received and acked", timeout=10)
        assert "received hello from Python" in events()
        chromium.execute_script("window.stop_client()")
        wait_until(lambda: "disconnected" in events(), "the browser disconnected")
        count = python.request("SEND", {"destination": "/control/count-msgs/queue/to-browser"})
        assert count["num-messages"] == "0"  # acked, so not requeued when the browser left
