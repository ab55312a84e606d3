"""Which brokers on a shared PostgreSQL database are gone: a lock each holds while it lives, and
its lease for what the database cannot see.

Theory of operation
-------------------
* Each broker holds a session-level advisory lock keyed by its id (``hold``) on the connection
  that carries its claims, taken before it registers on every (re)connection.  A ``kill -9`` (a
  lost machine whose socket the server sees close) ends that session, and the lock with it, at
  once.
* Every sweep (``GONE_SQL``, every ``SWEEP_EVERY`` seconds and with each renewal) ends the lease
  of a peer whose lock it can take: its session is gone.  The test counts only for a peer that
  renewed since the server started (``pg_postmaster_start_time``): after a database restart a live
  broker holds its lock again only once it has reconnected, which it does before it renews.  The
  sweeper's try is transaction-level: the lock is let go with the sweep's commit.
* A paused broker (SIGSTOP, a stalled VM) keeps its session and its lock: its lease ends by time
  (``lease_until`` on the database's clock), but only by a sweeper that has itself been connected
  for a full lease.  Whatever kept the sweeper from the database (an outage, a restart of the
  server) may have kept the peer from renewing too; once the sweeper has been back a lease, a
  peer that could reach the database has had a lease to renew.
* A broker that leaves (swept, or stopped cleanly) adds what it counted to the stored totals of
  the brokers gone before it (``DEPARTED``), in the transaction that deletes its row: the
  cluster's totals are those plus every registered broker's, cumulative across restarts.
* Only a sweep takes claims over (it deletes the peer's row and frees its rows in the same
  transaction); a claim read never takes a row whose owner is still registered under that
  epoch.  So a broker whose row is still there when it renews has lost nothing and keeps its
  epoch, however late the renewal (storage/postgres.py ``_register``).

See docs/decisions/crash-detection.md.
"""

from __future__ import annotations

from typing import Any

import psycopg

from stompmq.storage import jsontext

#: Seconds between two sweeps for brokers that are gone: the delay of a take-over after a crash.
SWEEP_EVERY = 0.5
#: Seed of ``hashtextextended`` for the lock keys (any fixed number: "live" in ASCII), so that a
#: broker's key is computed alike by the holder and by every peer, in SQL.
LOCK_SEED = 0x6C697665
_KEY = f"hashtextextended({{id}}, {LOCK_SEED})"

HOLD_SQL = "SELECT pg_advisory_lock(" + _KEY.format(id="%s") + ")"
#: Ends the leases of the peers that are gone (their rows are deleted; the caller frees their
#: claims in the same transaction).  The lease test first: a paused peer still holds its lock.
GONE_SQL = (
    "DELETE FROM brokers AS b WHERE b.id <> %(me)s AND CASE"
    " WHEN b.lease_until < now() AND %(since)s <= now() - make_interval(secs => %(lease)s) THEN true"
    " WHEN b.renewed_at >= pg_postmaster_start_time() THEN pg_try_advisory_xact_lock(" + _KEY.format(id="b.id") + ")"
    " ELSE false END RETURNING b.id, b.lease_until < now(), b.counters"
)
#: ``broker_meta`` row of what the brokers that left counted, summed (JSON).
DEPARTED = "departed_counters"


#: Seconds ``hold`` waits for the lock: a peer's sweep holds it for a moment; this broker's own
#: previous session, cut off unseen, until the server notices (then the reconnection is retried).
HOLD_WAIT = "5s"


def hold(conn: psycopg.Connection[Any], broker_id: str) -> None:
    """Take this broker's lock on ``conn`` for the life of its session (waits while a peer's sweep
    holds it: that sweep ends our lease, and the registration after this sees it)."""
    conn.execute("SELECT set_config('lock_timeout', %s, false)", (HOLD_WAIT,))
    try:
        conn.execute(HOLD_SQL, (broker_id,))
    finally:
        conn.execute("SELECT set_config('lock_timeout', '0', false)")


def gone(conn: psycopg.Connection[Any], broker_id: str, since: Any, lease: float) -> list[tuple[str, bool]]:
    """End the leases of the peers that are gone, in the caller's transaction: (id, lapsed) each,
    lapsed False for a peer whose session ended before its lease.  ``since``: when this broker's
    connection registered, on the database's clock."""
    rows = conn.execute(GONE_SQL, {"me": broker_id, "since": since, "lease": lease}).fetchall()
    depart(conn, [counters for _, _, counters in rows])
    return [(id_, bool(lapsed)) for id_, lapsed, _ in rows]


def leave(conn: psycopg.Connection[Any], broker_id: str, counters: dict[str, int] | None) -> None:
    """A clean stop: delete this broker's row, its ``counters`` (None: those of its last renewal)
    added to the departed brokers' totals."""
    row = conn.execute("DELETE FROM brokers WHERE id = %s RETURNING counters", (broker_id,)).fetchone()
    if row is not None:
        depart(conn, [row[0] if counters is None else jsontext.dumps(counters)])


def depart(conn: psycopg.Connection[Any], counters: list[str | None]) -> None:
    """Add the counters (JSON text, None: nothing counted) of brokers whose rows are deleted in
    this transaction to the stored totals of the departed (row locked: sweepers may race)."""
    counted = [jsontext.loads(text) for text in counters if text]
    if not counted:
        return
    conn.execute("INSERT INTO broker_meta (name, value) VALUES (%s, '{}') ON CONFLICT (name) DO NOTHING", (DEPARTED,))
    row = conn.execute("SELECT value FROM broker_meta WHERE name = %s FOR UPDATE", (DEPARTED,)).fetchone()
    totals: dict[str, int] = jsontext.loads(row[0]) if row is not None else {}
    for each in counted:
        for key, value in each.items():
            totals[key] = totals.get(key, 0) + int(value)
    conn.execute("UPDATE broker_meta SET value = %s WHERE name = %s", (jsontext.dumps(totals), DEPARTED))


def departed(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """What the brokers that left the database counted, summed."""
    row = conn.execute("SELECT value FROM broker_meta WHERE name = %s", (DEPARTED,)).fetchone()
    return {} if row is None else {key: int(value) for key, value in jsontext.loads(row[0]).items()}
