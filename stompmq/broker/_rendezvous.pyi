"""Types of the native rendezvous router (stompmq/broker/_rendezvous.c)."""

class Router:
    def __init__(
        self, hash_key: bytes, names: tuple[str, ...], seeds: tuple[int, ...], weights: tuple[int, ...]
    ) -> None: ...
    def route(self, key: bytes | str | None, /) -> str | None: ...
