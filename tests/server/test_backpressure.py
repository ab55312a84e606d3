"""A producer that outruns the disk is paused, so writes not yet on disk stay within
the store's byte budget (plus what one socket read can hold), and nothing is lost or reordered."""

from __future__ import annotations

from pathlib import Path

from stompmq.server.transport import RECEIVE_BYTES
from stompmq.storage.base import MESSAGE_OVERHEAD, StoredMessage
from stompmq.storage.sqlite import SQLiteStore

from ..support.pair import broker_pair

BODY = b"x" * (64 * 1024)
BUDGET = 1024 * 1024


async def test_unflushed_bytes_stay_within_the_budget(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "s.db"), max_backlog_bytes=BUDGET)
    peak = 0
    insert = store.insert

    def counting_insert(msg: StoredMessage) -> None:
        nonlocal peak
        insert(msg)
        peak = max(peak, store.backlog_bytes())

    store.insert = counting_insert  # type: ignore[method-assign]
    async with broker_pair(store) as pair:
        producer = await pair.connected()
        for i in range(100):  # 6.4 MB, all handed to the "socket" at once
            await producer.send("SEND", {"destination": "/queue/big", "n": str(i)}, BODY)
        await producer.send("SEND", {"destination": "/control/count-msgs/queue/big", "receipt": "count"})
        receipt = await producer.receive()
        assert receipt.headers["num-messages"] == "100"
    # the reader checks for room before each read; one read may hold a few more frames
    assert peak <= BUDGET + RECEIVE_BYTES + len(BODY) + MESSAGE_OVERHEAD
    assert peak >= BUDGET // 2  # the producer really did outrun the disk for a while
