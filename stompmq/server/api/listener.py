"""The management API's accept loop: at most ``--max-http-connections`` HTTP connections at once.

Why: Hypercorn accepts every connection it is offered, and HTTP basic auth is checked per
request, so a connection holds a file descriptor before (and between) requests without any
credentials: with ``ulimit -n 256`` a flood of idle HTTP connections once took the descriptors
STOMP's accept loop needed.  Here the loop is ours, as STOMP's is (``app.py``): a connection
past the bound gets ``429`` (``Retry-After: 5``, ``Connection: close``) at once and is closed, is counted in
``LimitHits`` (``/metrics``) and logged once per address; the others are served by Hypercorn's
own per-connection server (``hypercorn.trio.tcp_server.TCPServer``, as ``hypercorn.trio.serve``
runs it), which closes an idle one after its keep-alive timeout (5 s); a connection counts
until that server ends, up to the same 5 s after its peer closed it.  A descriptor shortage
at accept waits a moment and is logged once per episode, never a traceback per connection.
"""

from __future__ import annotations

import errno
import logging
import socket
from typing import Any

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import wrap_app

from ...broker import LimitError, LimitHits

log = logging.getLogger(__name__)

_BODY = b'{"error": "too many HTTP connections (limit max-http-connections)", "status": 429}'
REFUSAL = (b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: 5\r\n"
           b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_BODY), _BODY))
#: Seconds the accept loop waits when the process is out of descriptors.
FD_PAUSE = 0.1


async def serve_bounded(app: Any, config: HypercornConfig, sock: socket.socket, limit: int, hits: LimitHits,
                        *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``app`` on the listening ``sock``, at most ``limit`` connections at once."""
    wrapped = wrap_app(app, config.wsgi_max_body_size, None)
    context = WorkerContext(None)
    listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
    open_now = 0
    short = False  # out of descriptors, logged for this episode

    async def serve_one(stream: trio.SocketStream) -> None:
        nonlocal open_now
        try:
            await TCPServer(wrapped, config, context, ConnectionState({}), stream)  # type: ignore[arg-type]
        finally:
            open_now -= 1
            stream.socket.close()  # hypercorn leaves it open when cancelled (the broker stopping)

    async with trio.open_nursery() as nursery:
        task_status.started()
        while True:
            try:
                stream = await listener.accept()
            except OSError as e:
                if e.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    raise
                if not short:
                    log.warning("management API: cannot accept a connection (%s); waiting", e.strerror)
                    short = True
                await trio.sleep(FD_PAUSE)
                continue
            short = False
            if open_now >= limit:
                nursery.start_soon(_refuse, stream, limit, hits)
                continue
            open_now += 1
            nursery.start_soon(serve_one, stream)


async def _refuse(stream: trio.SocketStream, limit: int, hits: LimitHits) -> None:
    """Answer 429 and close; the hit is counted and logged once per address."""
    try:
        address = str(stream.socket.getpeername()[0])
    except OSError:
        address = "?"
    hits.hit(LimitError("max-http-connections", f"{limit} HTTP connections are open already"), address)
    with trio.move_on_after(1):
        try:
            await stream.send_all(REFUSAL)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
    await trio.aclose_forcefully(stream)
