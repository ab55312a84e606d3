"""The broker's names: which vhost a CONNECT's ``host`` header selects, and which ``Host`` an
HTTP request or a WebSocket handshake may carry.

STOMP 1.1 and 1.2 say ``host`` names the virtual host; most clients (stomp.py, stomp.js)
fill it with the host name they dialled, which is no vhost at all.  The rule:

1. no ``host`` header, or an empty one: the default vhost ``/``;
2. the name of a declared vhost: that vhost (a declared vhost wins over rule 3);
3. a name for this server: ``localhost``, any IP address literal, the machine's host name or
   fully qualified name (``socket.gethostname``/``getfqdn``), or one of ``--host-names``
   (DNS aliases the machine cannot know), each with or without a ``:port`` suffix,
   case-insensitive: the default vhost;
4. anything else: no vhost (the CONNECT is refused with ``unknown vhost``), so a typo in a
   vhost's name never lands a client in the default vhost.

The management API and the WebSocket listeners answer only a ``Host`` that is one of the names
of rule 3 (``own_host``), so a page whose own name an attacker points at the broker's address
(DNS rebinding: ``evil.example`` resolving to 127.0.0.1) is refused before it can do anything;
an IP address literal is no name an attacker controls.  ``--host-names '*'`` turns the check off
(a proxy in front that rewrites Host, checking names itself).
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from collections.abc import Container

from ..vhost_names import DEFAULT_VHOST

#: Names for the local machine whatever it is called.
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


@functools.cache
def machine_names(more: tuple[str, ...] = ()) -> frozenset[str]:
    """This machine's names and ``more``, lowercased (looked up once: getfqdn may ask DNS)."""
    names = {socket.gethostname(), socket.getfqdn(), *more}
    return LOOPBACK_NAMES | {name.lower() for name in names if name}


def vhost_for_host(host: str | None, declared: Container[str], local: Container[str] = LOOPBACK_NAMES) -> str | None:
    """The vhost a CONNECT with ``host`` selects among ``declared``; None: no such vhost."""
    if not host:
        return DEFAULT_VHOST
    if host in declared:
        return host
    name = _without_port(host).lower()
    if name in local or _is_address(name):
        return DEFAULT_VHOST
    return None


#: The ``--host-names`` entry that lets any Host through (the check is the operator's proxy's).
ANY_HOST = "*"


def own_host(host: str | None, names: Container[str] = LOOPBACK_NAMES) -> bool:
    """Whether ``host`` (a ``Host`` header, with or without its port) names this broker: one of
    ``names`` (``machine_names``) or an IP address literal; always with ``ANY_HOST`` in ``names``."""
    if ANY_HOST in names:
        return True
    name = _without_port(host or "").lower()
    return bool(name) and (name in names or _is_address(name))


def _without_port(host: str) -> str:
    if host.startswith("["):  # [::1] or [::1]:61613
        address, bracket, port = host[1:].partition("]")
        return address if bracket and (not port or port[:1] == ":" and port[1:].isdigit()) else host
    name, colon, port = host.rpartition(":")
    if colon and port.isdigit() and ":" not in name:  # not a bare IPv6 address
        return name
    return host


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
