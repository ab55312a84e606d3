"""The test kit: real brokers and real clients for every suite (no mocks).

* brokers: ``broker_thread.BrokerThread`` (in this process; ``restarting``), ``broker_process.BrokerProcess``
  (``python -m stompmq.cli``, for crashes and signals), ``pair.broker_pair`` (in-memory streams in the
  test's own trio loop, for virtual time with ``autojump_clock``);
* stores: ``stores`` (memory, a SQLite file, a database of the session's PostgreSQL server, from
  ``postgres_server``; psycopg only once one starts);
* clients: ``rawclient.RawClient`` (frames split without stompmq's parser), ``stompclient.Client``
  (receipts, ACK/NACK per version, ``control`` for /control/ requests), ``wsclient.WSClient``;
* waiting: ``waiting`` (poll for a condition with a deadline; never a fixed sleep);
* the disk: ``on_disk`` (what a SQLite file holds), ``unwritable`` (a file the store cannot write).
"""
