"""Every route of the management API and what a caller needs for it: the one table the server
is built from (``app.py``), docs/security.md shows and tests/e2e/test_management_permissions.py
walks as six kinds of user."""

from __future__ import annotations

from dataclasses import dataclass

from .basic_auth import OPEN_PATHS, READ_METHODS
from .policies import PREFIXES as POLICY_PREFIXES
from .trace import TRACE_RESOURCE


@dataclass(frozen=True, slots=True)
class ApiRoute:
    """One method of one path of the API and what a caller needs for it (docs/security.md's table).

    The tag follows from the method (``basic_auth.py``): GET and HEAD need ``monitoring`` or
    ``administrator``, anything else ``administrator``, the probes nothing.  ``needs`` are the
    permissions on the vhost of the resource, whatever the tag, as ``ACTION RESOURCE`` with the
    request's names in capitals (``/queue/NAME``; ``TO`` and ``QUEUE`` are a body's or the
    path's other queue): a route that reads or moves messages or declares, deletes or binds
    something needs them as a STOMP frame doing the same would (RabbitMQ's rule, administrators
    included); a route without them shows counts, names and settings, never a message.
    ``vhost`` says where the request names its vhost: ``path``, ``query`` (``?vhost=``,
    default ``/``) or ``""`` (broker-wide).  ``admin`` routes need ``administrator`` to read
    too (users and permissions, as in RabbitMQ: ``app.py`` checks it before the handler).
    A ``deprecated`` route is an older form of another (``?vhost=`` where the path names the
    vhost now); it answers with ``Deprecation: true`` and goes in the release after next.  A
    ``listing`` is a list route whose ``?vhost=`` is such an older form: its ``/{vhost}`` form
    (RabbitMQ's ``/api/KIND/{vhost}``) is the route after it in ``ROUTES``."""

    method: str
    path: str
    handler: str  # ``part.method``: a method of one of ``ManagementApp``'s resource parts
    needs: tuple[str, ...] = ()
    vhost: str = ""
    admin: bool = False
    deprecated: bool = False
    listing: bool = False

    @property
    def tag(self) -> str:
        """The tag a caller needs: ``none``, ``monitoring`` (or administrator) or ``administrator``."""
        if self.path in OPEN_PATHS:
            return "none"
        return "monitoring" if self.method in READ_METHODS and not self.admin else "administrator"


#: The queue resource's path; its actions are ``QUEUE_PATH/ACTION``.
QUEUE_PATH = "/api/queues/{vhost}/{name}"
#: A resource's path under its collection, each segment percent-encoded (``router.py``).
VHOST_NAME = "/{vhost}/{name}"
#: An exchange, as RabbitMQ names it.
EXCHANGE_PATH = "/api/exchanges" + VHOST_NAME
#: The list routes by vhost: ``GET /api/KIND/{vhost}`` (RabbitMQ's), and ``/api/KIND?vhost=`` of before.
VHOST_LISTS = (("queues", "queue_api.list_queues"), ("exchanges", "exchange_api.list_exchanges"),
               ("topics", "stream_api.list_topics"), ("streams", "stream_api.list_streams"),
               *((prefix.removeprefix("/api/"), "policy_api.list_policies") for prefix in POLICY_PREFIXES.values()))


def listings(kind: str) -> tuple[ApiRoute, ApiRoute]:
    """``GET /api/KIND`` (``?vhost=``, deprecated) and ``GET /api/KIND/{vhost}``."""
    handler = dict(VHOST_LISTS)[kind]
    return (ApiRoute("GET", "/api/" + kind, handler, vhost="query", listing=True),
            ApiRoute("GET", f"/api/{kind}/{{vhost}}", handler, vhost="path"))


#: The ``handler`` of the dashboard's static files (a mount, not a method).
DASHBOARD_ROUTE = "dashboard"
_QUEUE_CONFIGURE = ("configure /queue/NAME",)
_EXCHANGE_CONFIGURE = ("configure /exchange/NAME",)
_BINDING = ("configure /exchange/NAME", "configure /queue/QUEUE")
#: Every route of the API, the one list the server is built from and the tests walk.
ROUTES: tuple[ApiRoute, ...] = (
    ApiRoute("GET", "/healthz", "health_api.healthz"),
    ApiRoute("GET", "/readyz", "health_api.readyz"),
    ApiRoute("GET", "/metrics", "health_api.metrics"),
    ApiRoute("GET", "/api/overview", "overview_api.overview"),
    ApiRoute("GET", "/api/history", "overview_api.total_history"),
    ApiRoute("GET", "/api/alarms", "alarm_api.get_alarms"),
    ApiRoute("PUT", "/api/alarms", "alarm_api.set_alarm_limits"),
    ApiRoute("GET", "/api/cluster", "cluster_api.cluster"),
    ApiRoute("GET", "/api/vhosts", "vhost_api.list_vhosts"),
    ApiRoute("PUT", "/api/vhosts/{name:path}", "vhost_api.declare_vhost"),
    ApiRoute("DELETE", "/api/vhosts/{name:path}", "vhost_api.delete_vhost"),
    *listings("queues"),
    ApiRoute("GET", QUEUE_PATH, "queue_api.get_queue", vhost="path"),
    ApiRoute("PUT", QUEUE_PATH, "queue_api.declare_queue", _QUEUE_CONFIGURE, "path"),
    ApiRoute("DELETE", QUEUE_PATH, "queue_api.delete_queue", _QUEUE_CONFIGURE, "path"),
    ApiRoute("POST", QUEUE_PATH + "/purge", "queue_api.purge_queue", _QUEUE_CONFIGURE, "path"),
    ApiRoute("GET", QUEUE_PATH + "/consumers", "queue_api.queue_consumers", vhost="path"),
    ApiRoute("GET", QUEUE_PATH + "/messages", "message_api.peek_messages", ("read /queue/NAME",), "path"),
    ApiRoute("POST", QUEUE_PATH + "/publish", "message_api.publish_message", ("write /queue/NAME",), "path"),
    ApiRoute("POST", QUEUE_PATH + "/get", "message_api.get_messages", ("read /queue/NAME",), "path"),
    ApiRoute("POST", QUEUE_PATH + "/move", "message_api.move_messages", ("read /queue/NAME", "write /queue/TO"),
             "path"),
    ApiRoute("GET", QUEUE_PATH + "/history", "queue_api.queue_history", vhost="path"),
    *listings("exchanges"),
    ApiRoute("GET", EXCHANGE_PATH, "exchange_api.get_exchange", vhost="path"),
    ApiRoute("PUT", EXCHANGE_PATH, "exchange_api.declare_exchange", _EXCHANGE_CONFIGURE, "path"),
    ApiRoute("DELETE", EXCHANGE_PATH, "exchange_api.delete_exchange", _EXCHANGE_CONFIGURE, "path"),
    ApiRoute("POST", EXCHANGE_PATH + "/bindings", "exchange_api.bind", _BINDING, "path"),
    ApiRoute("DELETE", EXCHANGE_PATH + "/bindings/{queue}", "exchange_api.unbind", _BINDING, "path"),
    # The ?vhost= forms of before, kept for a release (after the path forms: a path both read,
    # /api/exchanges/V/bindings/bindings/Q, is the path form's).
    ApiRoute("DELETE", "/api/exchanges/{name}/bindings/{queue:path}", "exchange_api.unbind", _BINDING, "query",
             deprecated=True),
    ApiRoute("POST", "/api/exchanges/{name}/bindings", "exchange_api.bind", _BINDING, "query", deprecated=True),
    # (GET /api/exchanges/NAME?vhost= is GET /api/exchanges/{vhost}'s: list_exchanges answers it.)
    ApiRoute("PUT", "/api/exchanges/{name}", "exchange_api.declare_exchange", _EXCHANGE_CONFIGURE, "query",
             deprecated=True),
    ApiRoute("DELETE", "/api/exchanges/{name}", "exchange_api.delete_exchange", _EXCHANGE_CONFIGURE, "query",
             deprecated=True),
    *listings("topics"),
    *listings("streams"),
    ApiRoute("GET", "/api/streams" + VHOST_NAME, "stream_api.get_stream", vhost="path"),
    ApiRoute("GET", "/api/schedules/{vhost:path}", "schedule_api.list_schedules", vhost="path"),
    ApiRoute("DELETE", "/api/schedules/{vhost:path}/{id}", "schedule_api.cancel_schedule",
             ("configure /queue/QUEUE",), "path"),
    ApiRoute("GET", "/api/trace", "trace_api.get", vhost="query"),
    ApiRoute("PUT", "/api/trace", "trace_api.put", ("configure " + TRACE_RESOURCE,), "query"),
    ApiRoute("GET", "/api/trace/events", "trace_api.events", ("read " + TRACE_RESOURCE,), "query"),
    ApiRoute("GET", "/api/shovels", "shovel_api.list_shovels"),
    ApiRoute("GET", "/api/shovels/{name}", "shovel_api.get_shovel"),
    ApiRoute("PUT", "/api/shovels/{name}", "shovel_api.declare_shovel"),
    ApiRoute("DELETE", "/api/shovels/{name}", "shovel_api.delete_shovel"),
    *(route for prefix in POLICY_PREFIXES.values() for route in listings(prefix.removeprefix("/api/"))),
    *(ApiRoute(method, path, "policy_api." + handler) for prefix in POLICY_PREFIXES.values()
      for method, path, handler in (("GET", prefix + VHOST_NAME, "get_policy"),
                                    ("PUT", prefix + VHOST_NAME, "put_policy"),
                                    ("DELETE", prefix + VHOST_NAME, "delete_policy"))),
    ApiRoute("GET", "/api/definitions", "definitions_api.export"),
    ApiRoute("POST", "/api/definitions", "definitions_api.import_"),
    ApiRoute("GET", "/api/users", "user_api.list_users", admin=True),
    ApiRoute("GET", "/api/users/{name}", "user_api.get_user", admin=True),
    ApiRoute("PUT", "/api/users/{name}", "user_api.put_user", admin=True),
    ApiRoute("DELETE", "/api/users/{name}", "user_api.delete_user", admin=True),
    ApiRoute("GET", "/api/permissions", "user_api.list_permissions", admin=True),
    ApiRoute("GET", "/api/permissions/{vhost}/{user}", "user_api.get_permission", admin=True),
    ApiRoute("PUT", "/api/permissions/{vhost}/{user}", "user_api.put_permission", admin=True),
    ApiRoute("DELETE", "/api/permissions/{vhost}/{user}", "user_api.delete_permission", admin=True),
    ApiRoute("GET", "/api/connections", "connection_api.list_connections"),
    ApiRoute("GET", "/api/connections/{id}", "connection_api.get_connection"),
    ApiRoute("DELETE", "/api/connections/{id}", "connection_api.close_connection"),
    ApiRoute("GET", "/{file:path}", DASHBOARD_ROUTE),
)
