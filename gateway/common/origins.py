"""What ``Host`` and ``Origin`` values name: this machine's loopback, or elsewhere."""

from __future__ import annotations

_LOOPBACK_NAMES = frozenset({b"localhost", b"127.0.0.1", b"::1"})


def loopback_host(host: bytes) -> bool:
    """Whether a ``Host`` value names this machine's loopback: a name, then maybe a port."""
    if host.startswith(b"["):
        name, bracket, port = host[1:].partition(b"]")
        if not bracket:
            return False
        if port:
            if not port.startswith(b":"):
                return False
            port = port[1:]
    else:
        name, _, port = host.partition(b":")
    return name.lower() in _LOOPBACK_NAMES and (not port or port.isdigit())


def loopback_origin(origin: bytes) -> bool:
    """Whether an ``Origin`` is a page served from this machine's loopback."""
    scheme, sep, rest = origin.partition(b"://")
    return bool(sep) and scheme.lower() in (b"http", b"https") and loopback_host(rest)
