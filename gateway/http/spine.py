"""What the request spine keeps per app: the services every operation uses, and the edge's
own bounds that span requests (bodies being received, open WebSockets, per key)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.apis.contract import Services
from gateway.errors import RateLimitError, ServiceUnavailableError
from gateway.http.bodies import BodyBuffers


class SocketSlots:
    """The WebSockets open at once: ``total`` in all, ``per_key`` for one key. An upgraded
    connection holds a server connection place for as long as it is open, and nothing
    idle can be closed to make room for it, so one key's sockets must not take the places
    every other client (a load balancer's liveness probe included) needs."""

    def __init__(self, total: int, per_key: int) -> None:
        self.total = total
        self.per_key = per_key
        self.open = 0
        self._by_key: dict[str, int] = {}

    def take(self, key_id: str) -> None:
        """Count one more socket of ``key_id``; raise when a bound would be passed."""
        own = self._by_key.get(key_id, 0)
        if own >= self.per_key:
            raise RateLimitError(
                f"This key has {own} WebSockets open; at most {self.per_key} at once. "
                "Close one, or retry later.",
                code="too_many_sockets",
                retry_after=1.0,
            )
        if self.open >= self.total:
            raise ServiceUnavailableError(
                "This gateway has too many WebSockets open; retry shortly.",
                code="too_many_sockets",
                retry_after=1.0,
            )
        self._by_key[key_id] = own + 1
        self.open += 1

    def give_back(self, key_id: str) -> None:
        """One socket of ``key_id`` closed."""
        left = self._by_key.get(key_id, 0) - 1
        if left > 0:
            self._by_key[key_id] = left
        else:
            self._by_key.pop(key_id, None)
        self.open -= 1

    def of(self, key_id: str) -> int:
        """The sockets ``key_id`` holds now."""
        return self._by_key.get(key_id, 0)


@dataclass
class Spine:
    """One per app. ``send_timeout_s``: how long one write may wait for a client that
    stopped reading; ``protect_ops``: whether ``/metrics`` and readiness figures need the
    master key; ``socket_idle_s``: how long a WebSocket may stay silent."""

    services: Services
    bodies: BodyBuffers = field(default_factory=lambda: BodyBuffers(256_000_000, 64_000_000))
    sockets: SocketSlots = field(default_factory=lambda: SocketSlots(1024, 32))
    send_timeout_s: float = 30.0
    protect_ops: bool = False
    socket_idle_s: float = 600.0
