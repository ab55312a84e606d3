"""Task-queue frameworks on stompmq: a broker for Dramatiq (``integrations.dramatiq``) and one
for Taskiq (``integrations.taskiq``).

Each is an optional extra (``stompmq[dramatiq]``, ``stompmq[taskiq]``) imported only by the
application that uses it: this package imports neither framework, and the broker itself never
imports this package.  They are clients of the broker over plain STOMP 1.2 and use only its
public headers (``delay``, ``priority``, ``prefetch``, receipts, transactions, ``/control``).
"""
