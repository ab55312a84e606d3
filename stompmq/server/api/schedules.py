"""The management API's schedules: ``GET /api/schedules/{vhost}``, ``DELETE /api/schedules/{vhost}/{id}``.

A listing shows when each schedule fires next and how many copies are left, never a message's
headers or body (so, as every route that shows no message, it needs the ``monitoring`` tag and
no vhost permission).  A cancel needs ``configure`` on the schedule's queue, as a purge does,
checked once the schedule is found; it is answered once the delete is committed, so a 200 means
the schedule will not fire again whatever happens to the broker after it.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...broker import Broker
from ...broker.control import MAX_PAGE
from ...broker.delays import Key
from ...broker.schedule_listing import CANCELLED, MISSING, ScheduleRow
from .requests import authorise, count_param, queue_resource

if TYPE_CHECKING:
    from .management import Management

log = logging.getLogger("stompmq.server.http")
#: Schedules in a page when the client does not say.
DEFAULT_PAGE = 100
#: Times a cancel looks again for a schedule that fired while it looked (``MOVED``).
CANCEL_TRIES = 5


class ScheduleRoutes:
    """The handlers, over the management app's engines and runtime."""

    def __init__(self, app: Management) -> None:
        self.app = app

    def _engine(self, request: Request) -> tuple[str, Broker]:
        vhost = request.path_params["vhost"]
        engine = self.app.engines.get(vhost)
        if engine is None:
            raise HTTPException(404, f"no vhost {vhost!r}")
        self.app.runtime.tick()
        return vhost, engine

    async def list_schedules(self, request: Request) -> Response:
        """``?after=TOKEN&limit=N``: the vhost's schedules, the next to fire first; ``next_after``
        is the token of the next page (null: the last)."""
        vhost, engine = self._engine(request)
        limit = count_param(request, "limit", DEFAULT_PAGE, MAX_PAGE)
        page = await self.app.answer(engine, engine.schedules.page(_after(request), limit))
        return JSONResponse({
            "items": [schedule_json(row) for row in page.rows],
            "next_after": None if page.after is None else f"{page.after[0]}-{page.after[1]}",
        })

    async def cancel_schedule(self, request: Request) -> Response:
        """Cancel schedule ``id``: 404 if the vhost has none such, 200 once its delete is committed."""
        vhost, engine = self._engine(request)
        wanted = request.path_params["id"]

        def allowed(queue: str) -> None:
            authorise(request, vhost, [("configure", queue_resource(queue))])

        for _ in range(CANCEL_TRIES):
            answer, queue = await self.app.answer(engine, engine.schedules.cancel(wanted, allowed))
            if answer == MISSING:
                raise HTTPException(404, f"no schedule {wanted!r} in vhost {vhost!r}")
            if answer == CANCELLED:
                # The read runs behind the delete, so it is committed; a row still there is held
                # by another broker sharing the store, whose claim the delete respects.
                if await self.app.answer(engine, engine.schedules.find(wanted)) is not None:
                    raise HTTPException(409, f"schedule {wanted!r} is held by another broker sharing the store: "
                                             "cancel it through that broker")
                log.info("schedule %s of queue %s of vhost %s cancelled through the management API", wanted,
                         queue, vhost)
                return JSONResponse({"id": wanted, "vhost": vhost, "queue": queue, "cancelled": True})
            self.app.runtime.tick()  # it fired meanwhile: its next row has another seq
        raise HTTPException(409, f"schedule {wanted!r} kept firing while it was being cancelled: try again")


def schedule_json(row: ScheduleRow) -> dict[str, Any]:
    """A schedule as the API shows it: ``next`` is ``next_at`` (epoch ms) in the broker's local
    time with its UTC offset, the time zone its cron expressions are read in."""
    local = datetime.fromtimestamp(row.next_at / 1000).astimezone()
    return {"id": row.id, "queue": row.queue, "next_at": row.next_at, "next": local.isoformat(timespec="milliseconds"),
            "remaining": row.remaining, "period": row.period, "cron": row.cron, "priority": row.priority,
            "bytes": row.body_bytes}


def _after(request: Request) -> Key | None:
    token = request.query_params.get("after", "")
    if not token:
        return None
    due, _, seq = token.partition("-")
    if not (due.isdigit() and seq.isdigit()):
        raise HTTPException(400, "after must be the next_after of the page before")
    return int(due), int(seq)

