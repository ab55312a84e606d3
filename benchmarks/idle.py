"""Many idle connections: the broker's memory per connection, its idle CPU, and how fast a new
client still connects.

Starts a broker (``--store memory`` unless --store says otherwise) on a free loopback port, opens
--connections STOMP connections with ``heart-beat:10000,10000`` (--heart-beat), and keeps them
alive from this one process: a heart-beat on every connection each 0.9 interval, the connections
beating on evenly spread phases as independent clients do, whatever the broker sends read and
discarded.  Then reports the broker's RSS growth per connection, its CPU
(user + system, from /proc/PID/stat) over --idle seconds as a share of one core, and the time a
new client takes from connect() to CONNECTED and the time an idle connection's SEND takes to its
RECEIPT (--probes times each, while the others stay idle: the second is what a parked
connection's first frame costs, server/parking.py).

Both this process and the broker need a file descriptor per connection: the script raises its
soft RLIMIT_NOFILE to the hard limit, which the broker inherits.

  python -m benchmarks.idle --connections 15000 --idle 30
"""

from __future__ import annotations

import argparse
import os
import resource
import selectors
import socket
import statistics
import subprocess
import sys
import time

from benchmarks.proc import cpu_seconds, rss_kib
from tests.support.broker_process import free_port

#: Seconds the heart-beating loop waits at least between sends (beats due meanwhile go together).
#: Well under the gap between two clients' beats (0.6 ms for 15,000 every 9 s): a coarser tick
#: hands the broker bursts, which it reads in fewer wake-ups than independent clients cost it.
BEAT_TICK = 0.0005
CONNECT = "CONNECT\naccept-version:1.2\nhost:/\nheart-beat:{0},{0}\n\n\x00"


def open_connection(port: int, heart_beat: int) -> socket.socket:
    """A connected STOMP session (CONNECTED read), as a non-blocking socket."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(CONNECT.format(heart_beat).encode())
    buf = b""
    while b"\x00" not in buf:
        data = sock.recv(4096)
        if not data:
            raise EOFError("broker closed the connection")
        buf += data
    if not buf.lstrip(b"\r\n").startswith(b"CONNECTED"):
        raise RuntimeError(f"broker refused: {buf!r}")
    sock.setblocking(False)
    return sock


class KeepAlive:
    """Heart-beat every socket once per ``every`` seconds, each on its own phase (socket i at
    i/n of the interval), as independent clients do, and drain what arrives.

    Beating them all at once instead would hand the broker a burst of n beats every interval,
    and a probe connecting behind a burst of 15,000 waits for the whole burst: the load
    generator's artefact, not an idle broker's latency."""

    def __init__(self, socks: list[socket.socket], every: float) -> None:
        self.socks = socks
        self.every = every
        self.selector = selectors.DefaultSelector()
        for sock in socks:
            self.selector.register(sock, selectors.EVENT_READ)
            sock.send(b"\n")  # once all together (not measured): no connection goes silent in between
        self.start = time.monotonic()
        self.sent = 0  # beats sent so far; socket sent % n is next, due at start + sent * every / n
        self.closed = 0  # connections the broker closed

    def send(self, i: int) -> float:
        """Seconds from a SEND on idle connection ``i`` to its RECEIPT (blocking meanwhile)."""
        sock = self.socks[i]
        self.selector.unregister(sock)
        sock.setblocking(True)
        t = time.monotonic()
        sock.sendall(b"SEND\ndestination:/queue/idle-probe\nreceipt:probe\n\nx\x00")
        buf = b""
        while not (b"receipt-id:probe" in buf and buf.endswith(b"\x00")):
            buf += sock.recv(4096)
        elapsed = time.monotonic() - t
        sock.setblocking(False)
        self.selector.register(sock, selectors.EVENT_READ)
        return elapsed

    def run(self, seconds: float) -> None:
        n, step = len(self.socks), self.every / len(self.socks)
        end = time.monotonic() + seconds
        while (now := time.monotonic()) < end:
            due = int((now - self.start) / step) + 1
            for i in range(self.sent, due):
                try:
                    self.socks[i % n].send(b"\n")
                except OSError:
                    pass
            self.sent = max(self.sent, due)
            wake = min(end, self.start + self.sent * step)
            for key, _ in self.selector.select(timeout=max(wake - now, BEAT_TICK)):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    if not sock.recv(65536):
                        self.selector.unregister(sock)
                        self.closed += 1
                except BlockingIOError:
                    pass
                except OSError:
                    self.selector.unregister(sock)
                    self.closed += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=15_000)
    parser.add_argument("--heart-beat", type=int, default=10_000, help="milliseconds, both directions")
    parser.add_argument("--idle", type=float, default=30.0, help="seconds of idle CPU measured")
    parser.add_argument("--probes", type=int, default=5, help="new connections and idle SENDs timed")
    parser.add_argument("--store", default="memory")
    args = parser.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < args.connections + 100:
        sys.exit(f"RLIMIT_NOFILE hard limit {hard} is too low for {args.connections} connections")

    port = free_port()
    broker = subprocess.Popen(
        [sys.executable, "-m", "stompmq.cli", "--store", args.store, "--port", str(port), "--log-level", "WARNING",
         "--http-port", "0"],  # no management API: nothing else on the machine may hold its port
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                first = open_connection(port, args.heart_beat)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        time.sleep(1)
        before = rss_kib(broker.pid, "VmRSS")
        socks = [first]
        t0 = time.monotonic()
        every = 0.9 * args.heart_beat / 1000  # as clients do: a little within the interval
        beaten = t0
        for _ in range(args.connections - 1):
            socks.append(open_connection(port, args.heart_beat))
            if time.monotonic() - beaten >= every:  # opening takes minutes: keep the first ones alive
                for sock in socks:
                    sock.send(b"\n")
                beaten = time.monotonic()
        opened = time.monotonic() - t0
        alive = KeepAlive(socks, every)
        alive.run(2 * every)  # settle: every connection has beaten
        after = rss_kib(broker.pid, "VmRSS")
        cpu0, wall0, own0 = cpu_seconds(broker.pid), time.monotonic(), time.process_time()
        alive.run(args.idle)
        cpu = (cpu_seconds(broker.pid) - cpu0) / (time.monotonic() - wall0)
        own = (time.process_time() - own0) / (time.monotonic() - wall0)
        probes, sends = [], []
        for n in range(args.probes):
            t = time.monotonic()
            open_connection(port, args.heart_beat).close()
            probes.append(time.monotonic() - t)
            alive.run(0.5)
            sends.append(alive.send(n * len(socks) // args.probes))
            alive.run(0.5)
        closed = alive.closed
        load = os.getloadavg()[0]
        print(f"{args.connections} connections opened in {opened:.1f} s; closed by the broker: {closed}")
        print(
            f"RSS {before / 1024:.1f} -> {after / 1024:.1f} MiB:"
            f" {(after - before) / args.connections:.2f} KiB per connection"
        )
        print(f"idle CPU {100 * cpu:.1f} % of a core over {args.idle:.0f} s (this load generator: {100 * own:.1f} %;"
              f" load average {load:.1f})")
        print(
            f"new connection to CONNECTED: median {1000 * statistics.median(probes):.0f} ms,"
            f" max {1000 * max(probes):.0f} ms over {args.probes}"
        )
        print(
            f"an idle connection's SEND to RECEIPT: median {1000 * statistics.median(sends):.1f} ms,"
            f" max {1000 * max(sends):.1f} ms over {args.probes}"
        )
    finally:
        broker.terminate()
        broker.wait()


if __name__ == "__main__":
    main()
