"""The management API's HTTP client, as ``stompmq admin`` and ``stompmq admin import-rabbitmq`` use it.

Its own module so that both commands import it and neither imports the other: ``admin`` hands
``import-rabbitmq`` its arguments, and the import sets policies through this client.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

from .config import DEFAULT_HTTP_PORT

#: An empty STOMPMQ_ADMIN_URL counts as unset.
DEFAULT_URL = os.environ.get("STOMPMQ_ADMIN_URL") or f"http://127.0.0.1:{DEFAULT_HTTP_PORT}"
#: Items per request when a list follows the API's pages.
PAGE = 1000


class ApiError(Exception):
    """The broker refused a request: its HTTP status and its error message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass
class Api:
    url: str
    vhost: str = "/"  # the vhost of the queue, exchange and topic routes
    headers: dict[str, str] = dataclasses.field(default_factory=lambda: {"content-type": "application/json"})

    @classmethod
    def login(cls, url: str, vhost: str, user: str | None, password: str) -> Api:
        """The API at ``url``, with HTTP basic credentials of a broker user (--users-file) if given."""
        api = cls(url.rstrip("/"), vhost)
        if user is not None:
            api.headers["authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        return api

    def call(self, method: str, path: str, body: Any = None, *, scoped: bool = True) -> Any:
        """One request; ``scoped``: the route takes the vhost as ``?vhost=`` (a queue's path
        names its vhost itself: ``queue``)."""
        data = json.dumps(body).encode() if body is not None else None
        if scoped and self.vhost != "/":
            path += ("&" if "?" in path else "?") + "vhost=" + quoted(self.vhost)
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as e:
            try:
                message = json.loads(e.read()).get("error", e.reason)
            except ValueError:
                message = e.reason
            raise ApiError(e.code, str(message)) from None

    def pages(self, path: str, *, scoped: bool = True) -> Iterator[dict[str, Any]]:
        after = ""
        while True:
            page = self.call("GET", f"{path}?limit={PAGE}&after={urllib.parse.quote(after)}", scoped=scoped)
            yield from page["items"]
            if page["next_after"] is None:
                return
            after = page["next_after"]

    def queue(self, method: str, name: str, action: str = "", body: Any = None) -> Any:
        """A request to queue ``name`` of the vhost: ``/api/queues/{vhost}/{name}[/action]``."""
        path = f"/api/queues/{quoted(self.vhost)}/{quoted(name.removeprefix('/queue/'))}"
        return self.call(method, path + ("/" + action if action else ""), body, scoped=False)

    def exchange(self, method: str, name: str, tail: str = "", body: Any = None) -> Any:
        """A request to exchange ``name`` of the vhost: ``/api/exchanges/{vhost}/{name}[tail]``."""
        path = f"/api/exchanges/{quoted(self.vhost)}/{quoted(name)}"
        return self.call(method, path + tail, body, scoped=False)


def quoted(name: str) -> str:
    """``name`` as one path segment of a route."""
    return urllib.parse.quote(name, safe="")
