"""Property: ``Broker.handle_frames`` (the fast path: one socket read's frames in one call) has
the effects of ``Broker.handle`` (the general path) applying them one by one, for random frames
cut into random reads: the same frames sent, the same stored rows, the same counters and the
same failure (its message and receipt), after the same frames took effect."""

from __future__ import annotations

from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from stompmq.broker import Broker, BrokerConfig, ClientError
from stompmq.protocol import Frame
from stompmq.storage.memory import MemoryStore

from .fakes import DictStore, FakeOutbox, run_reads

QUEUES = ["/queue/a", "/queue/b"]
receipts = st.one_of(st.none(), st.integers(0, 99).map(lambda i: f"r{i}"))
transactions = st.sampled_from([None, None, "t"])


def _frame(command: str, receipt: str | None, **headers: str | None) -> Frame:
    fields = {k.replace("_", "-"): v for k, v in headers.items() if v is not None}
    if receipt is not None:
        fields["receipt"] = receipt
    return Frame(command, fields, b"")


sends = st.builds(
    lambda dest, body, receipt, tx, prio: Frame(
        "SEND", {k: v for k, v in (("destination", dest), ("receipt", receipt), ("transaction", tx),
                                   ("priority", prio)) if v is not None}, body),
    st.sampled_from(QUEUES + ["/topic/t"]), st.binary(max_size=3), receipts, transactions,
    st.sampled_from([None, None, "0", "9"]),
)
# Ack ids are message seqs (both paths number messages alike); some were never delivered.
settles = st.builds(
    lambda command, seq, receipt, tx: _frame(command, receipt, id=str(seq), transaction=tx),
    st.sampled_from(["ACK", "ACK", "ACK", "NACK"]), st.integers(1, 8), receipts, transactions,
)
# Units that keep the session valid most of the time (transaction "t" and subscription "s2" exist
# from the start): what fails then is mostly a bad ack id, as in real reads.
renewals = st.one_of(
    st.builds(lambda c, r: [_frame(c, r, transaction="t"), _frame("BEGIN", None, transaction="t")],
              st.sampled_from(["COMMIT", "ABORT"]), receipts),
    st.builds(lambda r, ack, prefetch: [
        _frame("UNSUBSCRIBE", r, id="s2"),
        _frame("SUBSCRIBE", None, id="s2", destination="/queue/b", ack=ack, prefetch=prefetch),
    ], receipts, st.sampled_from(["auto", "client", "client-individual"]), st.sampled_from([None, "1", "3"])),
)
units = st.one_of(sends.map(lambda f: [f]), sends.map(lambda f: [f]), settles.map(lambda f: [f]), renewals)
frames = st.lists(units, max_size=40).map(lambda us: [f for u in us for f in u])
cuts = st.lists(st.integers(1, 8), max_size=40)


def _reads(all_frames: list[Frame], sizes: list[int]) -> list[list[Frame]]:
    """``all_frames`` cut into reads of the given sizes (the rest in one last read)."""
    reads, at = [], 0
    for size in sizes:
        if at >= len(all_frames):
            break
        reads.append(all_frames[at:at + size])
        at += size
    if at < len(all_frames):
        reads.append(all_frames[at:])
    return reads


def _run(store_kind: type, reads: list[list[Frame]], batched: bool) -> dict[str, Any]:
    broker = Broker(store_kind(), BrokerConfig(window=5))
    outbox = FakeOutbox()
    session = broker.open_session("s", "1.2", outbox)
    broker.handle(session, _frame("SUBSCRIBE", None, id="s", destination="/queue/a", ack="client-individual",
                                  prefetch="4"))
    broker.handle(session, _frame("SUBSCRIBE", None, id="s2", destination="/queue/b", ack="client"))
    broker.handle(session, _frame("BEGIN", None, transaction="t"))
    run_reads(broker)
    failure = None
    try:
        for read in reads:
            if batched:
                broker.handle_frames(session, read)
            else:
                for one in read:
                    try:
                        broker.handle(session, one)
                    except ClientError as e:  # as handle_frames reports it: with the frame's receipt
                        raise ClientError(e.message, one.headers.get("receipt")) from None
            run_reads(broker)
    except ClientError as e:
        failure = (e.message, e.receipt_id)
        broker.close_session(session)
        run_reads(broker)
    rows = (sorted((seq, m.queue, m.body, delivered, redeliveries)
                   for seq, (m, delivered, redeliveries) in broker.store.rows.items())  # type: ignore[attr-defined]
            if isinstance(broker.store, DictStore) else None)
    return {
        "sent": [(f.command, sorted(f.headers.items()), f.body) for f in outbox.take()],
        "failure": failure,
        "rows": rows,
        "stats": {name: (s.published, s.delivered, s.acked, s.redelivered)
                  for name, s in sorted(broker.queue_stats.items())},
        "ready": {name: (q.size, len(q.inflight)) for name, q in sorted(broker.queues.items())},
    }


@settings(max_examples=200, deadline=None)
@given(frames, cuts, st.sampled_from([MemoryStore, DictStore]))
def test_one_call_per_read_does_what_the_frames_do_one_by_one(
    all_frames: list[Frame], sizes: list[int], store_kind: type
) -> None:
    reads = _reads(all_frames, sizes)
    batched = _run(store_kind, reads, batched=True)
    assert batched == _run(store_kind, reads, batched=False)
    event(f"failed: {batched['failure'][0][:30]}" if batched["failure"] else "no failure")
    event(f"{sum(c == 'MESSAGE' for c, _, _ in batched['sent']) // 5 * 5}+ messages sent")
