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
* Only a sweep takes claims over (it deletes the peer's row and frees its rows in the same
  transaction); a claim read never takes a row whose owner is still registered under that
  epoch.  So a broker whose row is still there when it renews has lost nothing and keeps its
  epoch, however late the renewal (storage/postgres.py ``_register``).

See docs/decisions/crash-detection.md.
"""

from __future__ import annotations

from typing import Any

import psycopg

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
    " ELSE false END RETURNING b.id, b.lease_until < now()"
)


def hold(conn: psycopg.Connection[Any], broker_id: str) -> None:
    """Take this broker's lock on ``conn`` for the life of its session (waits while a peer's sweep
    holds it: that sweep ends our lease, and the registration after this sees it)."""
    conn.execute(HOLD_SQL, (broker_id,))


def gone(conn: psycopg.Connection[Any], broker_id: str, since: Any, lease: float) -> list[tuple[str, bool]]:
    """End the leases of the peers that are gone, in the caller's transaction: (id, lapsed) each,
    lapsed False for a peer whose session ended before its lease.  ``since``: when this broker's
    connection registered, on the database's clock."""
    return [(id_, bool(lapsed)) for id_, lapsed in
            conn.execute(GONE_SQL, {"me": broker_id, "since": since, "lease": lease}).fetchall()]
