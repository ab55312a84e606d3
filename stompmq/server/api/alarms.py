"""``/api/alarms``: the resource alarms set now, their limits, and new limits until a restart."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .requests import json_object, log

if TYPE_CHECKING:
    from .management import Management


class AlarmApi:
    def __init__(self, app: Management) -> None:
        self.app = app

    async def get_alarms(self, request: Request) -> Response:
        """The alarms set now, their limits and the latest measurements."""
        return JSONResponse(self.app.runtime.alarms.describe())

    async def set_alarm_limits(self, request: Request) -> Response:
        """``{"disk_free_limit": BYTES|null, "memory_high_watermark": FRACTION|BYTES|null}``: new
        limits until the broker restarts (null: that alarm off; a field left out keeps its limit)."""
        body = await json_object(request)
        alarms = self.app.runtime.alarms
        unknown = sorted(set(body) - {"disk_free_limit", "memory_high_watermark"})
        if unknown:
            raise HTTPException(400, f"unknown field {unknown[0]!r}: the limits are disk_free_limit and "
                                     "memory_high_watermark")
        disk = body.get("disk_free_limit", alarms.disk_free_limit)
        memory = body.get("memory_high_watermark", alarms.memory_limit)
        if disk is not None and (not isinstance(disk, int) or isinstance(disk, bool) or disk < 1):
            raise HTTPException(400, "disk_free_limit must be a positive number of bytes or null")
        if memory is not None and (not isinstance(memory, (int, float)) or isinstance(memory, bool) or memory <= 0):
            raise HTTPException(400, "memory_high_watermark must be a fraction of RAM (at most 1), bytes, or null")
        self.app.runtime.tick()
        alarms.set_limits(disk, memory)
        log.info("resource limits set through the management API: disk free %s, memory %s", disk, memory)
        return JSONResponse(alarms.describe())
