"""Vhost names, shared by every layer: the default vhost, what a valid name is, and how a store
key carries its vhost (``vhost_space(vhost) + name``; ``split_key`` takes it apart)."""

from __future__ import annotations

#: The vhost a client is in when it names none, and the one every store has from the start.
DEFAULT_VHOST = "/"
#: Between a vhost and a name in a store key (no queue, exchange, stream or vhost name holds it).
VHOST_SEPARATOR = "\n"


def vhost_space(vhost: str) -> str:
    """The prefix of ``vhost``'s store keys: "" for the default vhost."""
    return "" if vhost == DEFAULT_VHOST else vhost + VHOST_SEPARATOR


#: Longest vhost name, in bytes of UTF-8 (the ``vhost`` columns hold 255).
VHOST_NAME_BYTES = 255


def vhost_name_error(name: str) -> str | None:
    """Why ``name`` cannot be a vhost's name, or None if it can."""
    if not name or len(name.encode()) > VHOST_NAME_BYTES:
        return f"a vhost name must be 1-{VHOST_NAME_BYTES} bytes of UTF-8"
    if any(c in name for c in "\x00\n\r"):
        return "a vhost name must not contain NUL, CR or LF"
    return None


def split_key(key: str) -> tuple[str, str]:
    """A store key as ``(vhost, name)``."""
    vhost, separator, name = key.partition(VHOST_SEPARATOR)
    return (vhost, name) if separator else (DEFAULT_VHOST, key)
