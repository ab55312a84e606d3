"""A password guesser for the failed-login figure: many bad CONNECTs from one source address.

Run it beside ``benchmarks/load.py`` (which logs in correctly from 127.0.0.1) against a broker
started with ``--users-file``; compare bench.py's rate with and without it.  Each of
``--concurrency`` threads connects from ``--source``, sends a CONNECT with a wrong passcode and
waits for the answer (the broker's ERROR, after the throttle's delay, or the close at its CONNECT
deadline), until ``--attempts`` attempts were made or ``--max-seconds`` passed.  Bounded in count
and time; loopback only.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import Counter

from benchmarks.stompload import BrokerError, Client, LoadError


def attempt(host: str, port: int, source: str, login: str, timeout: float) -> str:
    """One CONNECT with a wrong passcode; what came of it (ERROR, closed, a timeout, ...)."""
    try:
        Client(host, port, login=login, passcode="wrong", source=source, timeout=timeout).close()
        return "CONNECTED"
    except BrokerError:
        return "ERROR"
    except LoadError as e:
        cause = e.__cause__
        return type(cause).__name__ if cause is not None else "closed" if "closed" in str(e) else "timeout"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=61613)
    p.add_argument("--source", default="127.0.0.2", help="source address of every attempt (loopback)")
    p.add_argument("--login", default="admin", help="login tried (an existing one: only the passcode is wrong)")
    p.add_argument("--attempts", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--max-seconds", type=float, default=120.0)
    args = p.parse_args()
    results: Counter[str] = Counter()
    lock = threading.Lock()
    started = 0
    deadline = time.monotonic() + args.max_seconds

    def worker() -> None:
        nonlocal started
        while time.monotonic() < deadline:
            with lock:
                if started >= args.attempts:
                    return
                started += 1
            outcome = attempt(args.host, args.port, args.source, args.login, timeout=15.0)
            with lock:
                results[outcome] += 1

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(args.max_seconds + 20)
    elapsed = time.monotonic() - t0
    summary = " ".join(f"{k}={v}" for k, v in sorted(results.items()))
    print(f"login_flood attempts={sum(results.values())} elapsed_s={elapsed:.1f} {summary}")


if __name__ == "__main__":
    main()
