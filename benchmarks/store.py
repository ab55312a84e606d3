"""Micro-benchmark of the SQLite store: group-committed receipted inserts, and draining.

No pass/fail: it prints figures for docs/benchmarks.md.  It drives ``SQLiteStore``
directly on a trio loop, the way the broker does (buffered writes, tickets,
``events.committed``), so what it measures is the store's ceiling, without STOMP parsing
or sockets.  Three figures:

* receipted inserts: batches of ``--batch`` inserts each followed by
  ``sync_ticket()`` (the receipts of that many SENDs), with at most ``--window``
  tickets outstanding, like that many clients waiting for their RECEIPTs; counted
  until the last ticket's group has committed (fsync'd).
* drain (read): ``load_ready`` pages of ``--page`` after a cold reopen.
* drain + ack: each page is deleted (acked) and the acks committed before the next
  page is read, as a consumer emptying a backlog would.

Usage: ``python -m benchmarks.store [--messages 100000] [--drain 200000] [--dir DIR]``
"""

from __future__ import annotations

import argparse
import collections
import os
import tempfile
import time

import trio

from stompmq.storage.base import StoredMessage, StoreError, StoreEvents
from stompmq.storage.sqlite import SQLiteStore

# Headers of a typical SEND (the broker stores only the user headers).
HEADERS = {"content-type": "text/plain", "persistent": "true"}
# Priority of every message: the default of the JMS convention.
PRIORITY = 4


class Tickets(StoreEvents):
    """Lets a task wait until the store has committed a ticket; counts groups."""

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store
        self._changed = trio.Event()
        self.groups = 0
        store.bind(self)

    def committed(self, ticket: int) -> None:
        self.groups += 1
        self._changed.set()
        self._changed = trio.Event()

    def commit_failed(self, ticket: int, error: StoreError) -> None:
        raise SystemExit(f"group {ticket} failed: {error}")

    async def wait(self, ticket: int) -> None:
        while self._store.committed < ticket:
            await self._changed.wait()


def make(seq: int, queue: str, body: bytes) -> StoredMessage:
    return StoredMessage(seq, queue, PRIORITY, HEADERS, body, int(time.time() * 1000))


async def receipted_inserts(
    path: str, messages: int, body_size: int, batch: int, window: int, queue: str, first_seq: int
) -> None:
    store = SQLiteStore(path)
    await store.open()
    try:
        tickets = Tickets(store)
        body = os.urandom(body_size)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.run)
            outstanding: collections.deque[int] = collections.deque()
            start = time.perf_counter()
            for first in range(first_seq, first_seq + messages, batch):
                for seq in range(first, min(first + batch, first_seq + messages)):
                    store.insert(make(seq, queue, body))
                outstanding.append(store.sync_ticket())
                while len(outstanding) > window:
                    await tickets.wait(outstanding.popleft())
                await trio.lowlevel.checkpoint()  # a broker yields between network reads
            await tickets.wait(outstanding[-1])
            elapsed = time.perf_counter() - start
            nursery.cancel_scope.cancel()
    finally:
        await store.close()
    print(
        f"receipted inserts: {messages} x {body_size} B, sync every {batch}, window {window}:"
        f" {messages / elapsed:,.0f} msg/s committed ({elapsed:.2f} s, {tickets.groups} groups,"
        f" {messages / tickets.groups:,.0f} msg/group)"
    )


async def drain(path: str, queue: str, expected: int, page: int, ack: bool) -> None:
    store = SQLiteStore(path)
    await store.open()
    try:
        tickets = Tickets(store)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.run)
            start = time.perf_counter()
            total = 0
            after = None
            while chunk := await store.load_ready(queue, after, page):
                total += len(chunk)
                after = chunk[-1].order_key
                if ack:
                    for msg in chunk:
                        store.delete(msg)
                    await tickets.wait(store.sync_ticket())
            elapsed = time.perf_counter() - start
            nursery.cancel_scope.cancel()
    finally:
        await store.close()
    assert total == expected, (total, expected)
    what = "drain + ack (committed)" if ack else "drain (load_ready)"
    rate = total / elapsed
    print(f"{what}: {total} msgs in pages of {page}: {rate:,.0f} msg/s ({elapsed:.2f} s)")


async def main(args: argparse.Namespace) -> None:
    if args.dir is None:
        with tempfile.TemporaryDirectory(prefix="stompmq-bench-") as directory:
            await run_all(args, directory)
    else:
        await run_all(args, args.dir)


async def run_all(args: argparse.Namespace, directory: str) -> None:
    path = os.path.join(directory, "bench.db")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    print(f"database: {path}")
    await receipted_inserts(
        path, args.messages, args.body, args.batch, args.window, "bench", first_seq=1
    )
    # The drain queue is filled the same way (receipted, big batches), then read cold.
    await receipted_inserts(
        path, args.drain, args.body, 10_000, 2, "drain", first_seq=args.messages + 1
    )
    await drain(path, "drain", args.drain, args.page, ack=False)
    await drain(path, "drain", args.drain, args.page, ack=True)
    print(f"file size: {os.path.getsize(path) / 1e6:.1f} MB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--body", type=int, default=100, help="body size in bytes")
    parser.add_argument("--batch", type=int, default=1000, help="inserts per sync_ticket()")
    parser.add_argument("--window", type=int, default=4, help="tickets outstanding at most")
    parser.add_argument("--drain", type=int, default=200_000)
    parser.add_argument("--page", type=int, default=1000)
    parser.add_argument("--dir", help="directory for the database (default: a new temp dir)")
    trio.run(main, parser.parse_args())
