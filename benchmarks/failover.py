#!/usr/bin/env python3
"""How long a dead broker's unacked messages take to reach a consumer on another broker.

Starts two stompmq brokers on one PostgreSQL database (``--store-url``), puts ``--messages``
messages on a queue, lets a client-ack consumer on broker A take ``--prefetch`` of them
without acking, ``kill -9``s broker A, and times, from the kill, the arrival of each of those
messages at a consumer on broker B.  Repeats ``--rounds`` times and prints the median and
maximum delay per round and overall.  Loopback only; every wait is bounded.

  python -m benchmarks.failover --store-url postgresql://USER:PASSWORD@127.0.0.1:PORT/DB --lease 10
"""

from __future__ import annotations

import argparse
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Seconds any single wait may take before the run is declared failed.
TIMEOUT = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Conn:
    """A minimal STOMP 1.2 client over a raw socket."""

    def __init__(self, port: int) -> None:
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.buf = b""
        self.send("CONNECT", {"accept-version": "1.2", "host": "/"})
        assert self.frame()[0] == "CONNECTED"

    def send(self, command: str, headers: dict[str, str], body: bytes = b"") -> None:
        head = "".join(f"{k}:{v}\n" for k, v in headers.items())
        self.sock.sendall(f"{command}\n{head}content-length:{len(body)}\n\n".encode() + body + b"\x00")

    def frame(self, timeout: float = TIMEOUT) -> tuple[str, dict[str, str], bytes]:
        self.sock.settimeout(timeout)
        while True:
            self.buf = self.buf.lstrip(b"\n")
            end = self.buf.find(b"\n\n")
            if end >= 0:
                lines = self.buf[:end].decode().split("\n")
                headers = dict(line.split(":", 1) for line in lines[1:])
                length = int(headers.get("content-length", "0"))
                if len(self.buf) > end + 2 + length:
                    body = self.buf[end + 2 : end + 2 + length]
                    self.buf = self.buf[end + 3 + length :]
                    return lines[0], headers, body
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("broker closed the connection")
            self.buf += chunk

    def message(self, timeout: float = TIMEOUT) -> tuple[str, dict[str, str], bytes]:
        while True:
            frame = self.frame(timeout)
            if frame[0] == "MESSAGE":
                return frame
            if frame[0] == "ERROR":
                raise RuntimeError(f"broker ERROR: {frame}")


def start_broker(url: str, port: int, lease: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "stompmq.cli", "--port", str(port), "--http-port", "0", "--store", url, "--lease", str(lease),
         "--log-level", "WARNING"],
        cwd=str(ROOT), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
    )


def one_round(args: argparse.Namespace, queue: str) -> list[float]:
    port_a, port_b = free_port(), free_port()
    a = start_broker(args.store_url, port_a, args.lease)
    b = start_broker(args.store_url, port_b, args.lease)
    try:
        producer = Conn(port_b)
        for i in range(args.messages):
            producer.send("SEND", {"destination": f"/queue/{queue}", **({"receipt": "done"} if i == args.messages - 1 else {})},
                          str(i).encode())
        while producer.frame()[0] != "RECEIPT":
            pass
        held = Conn(port_a)
        held.send("SUBSCRIBE", {"id": "1", "destination": f"/queue/{queue}", "ack": "client-individual",
                                "prefetch": str(args.prefetch)})
        taken = {held.message()[2] for _ in range(args.prefetch)}
        time.sleep(args.settle)  # the deliveries' state reaches the database (write-behind)
        killed = time.monotonic()
        a.send_signal(signal.SIGKILL)
        a.wait(TIMEOUT)
        rescuer = Conn(port_b)
        rescuer.send("SUBSCRIBE", {"id": "1", "destination": f"/queue/{queue}", "ack": "auto"})
        delays = []
        while taken:
            _, headers, body = rescuer.message()
            if body in taken:
                taken.discard(body)
                delays.append(time.monotonic() - killed)
        return delays
    finally:
        for proc in (a, b):
            if proc.poll() is None:
                proc.terminate()
                proc.wait(TIMEOUT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store-url", required=True, help="postgresql://... shared by both brokers")
    parser.add_argument("--lease", type=float, default=10.0, help="--lease of both brokers (seconds)")
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--prefetch", type=int, default=100, help="unacked messages held by the broker killed")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle", type=float, default=0.5, help="seconds between the last delivery and the kill")
    args = parser.parse_args()
    every: list[float] = []
    for r in range(args.rounds):
        delays = one_round(args, f"failover-{int(time.time())}-{r}")
        every += delays
        print(f"round {r + 1}: {len(delays)} messages, delay median {statistics.median(delays):.2f} s,"
              f" max {max(delays):.2f} s (lease {args.lease} s)")
    print(f"all rounds: median {statistics.median(every):.2f} s, max {max(every):.2f} s over {len(every)} messages")


if __name__ == "__main__":
    main()
