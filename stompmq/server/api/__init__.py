"""The management API, /metrics and the dashboard: Starlette served by Hypercorn's trio worker.

Theory of operation
-------------------
The HTTP server runs in the broker's own trio process, as one more task of
``serve``: its handlers run on the same thread as the engine, so they read the
engine's state directly (through ``Broker``'s public methods, never its
modules) and need no locks.  A handler never blocks the loop for long: lists
are paged (``after``/``limit``, at most ``MAX_PAGE`` items) and reads of the
store go through the store's own database thread, like the engine's.

One module per resource (``queues.py``, ``messages.py``, ``exchanges.py``, ``streams.py``,
``shovels.py``, ``connections.py``, ``vhosts.py``, ``policies.py``, ``schedules.py``,
``cluster.py``, ``alarms.py``, ``definitions.py``, ``trace.py``, ``health.py``), each a class
of handlers over the ``Management`` they share (``management.py``; the app that builds and
routes to them, ``app.ManagementApp``, is one, so no part imports the app).  ``routes.py``'s ``ROUTES``
is every route with the handler it runs and what a caller needs: with a users file, a tag
(``basic_auth.py``) and, for a route that shows or moves messages or changes something in a
vhost, the user's permissions there, whatever its tag, resolved as resources like a STOMP
frame's (docs/security.md has the table).

Mutations (purge, delete, declare, bind) run the same ``/control`` verbs a
STOMP client can send (``Broker.administer``), so both surfaces behave
identically; they are applied at once and committed with the next commit
group (within ``--flush-interval``).

With a users file the API needs HTTP basic credentials (``basic_auth.py``).  Either way, two
guards keep a web page the operator happens to visit from driving it: a request that changes
something must carry ``content-type: application/json`` (which a cross-site form cannot send
without a CORS preflight this server never grants), and only a ``Host`` that is one of the
broker's names is answered (``vhosts.own_host``: no DNS rebinding), as on the WebSocket
listeners.

Whose numbers: a queue's counters (published, delivered, ...) and the rates are this broker's
own, since it started, so every counter answer names the broker (``broker``: its node id, or
``management.SINGLE_BROKER`` on a store of one broker); ready and unacked come from the store, which on
PostgreSQL is every broker's.  Rates are derived from samples (``rates.py``).
"""
