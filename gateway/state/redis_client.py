"""The redis-py client the Redis store talks through: one Redis, or a Redis Cluster."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

Client = Redis | RedisCluster
CLUSTER_SUFFIX = "+cluster"
# redis-py's Cluster client caps each node's pool (100 by default) and raises when it is
# full, which would read as an outage under load, as a capped single-node pool would
_UNBOUNDED = 2**31


def connect(url: str, *, cluster: bool = False, timeout_s: float = 0.5) -> Client:
    """A redis-py asyncio client with short timeouts and one immediate retry (which also
    replaces a pooled connection that a restarted server closed). The pool is unbounded:
    a bounded one fails fast when full, which would read as an outage under load.

    A ``redis+cluster://`` (or ``rediss+cluster://``) URL, or ``cluster``, gives a Redis
    Cluster client. The URL names one node or several, comma-separated
    (``redis+cluster://:pw@10.0.0.1:6379,10.0.0.2:6379/0``): the client asks the first that
    answers for the others, then follows the slots as they move (MOVED, ASK, a replica
    promoted). Name more than one, so that a process starting while one is down finds
    the cluster."""
    url, in_url = cluster_url(url)
    options: dict[str, Any] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "retry": Retry(NoBackoff(), 1),
    }
    if not (cluster or in_url):
        return Redis.from_url(url, **options)
    parts = urlsplit(url)
    login, at, hosts = parts.netloc.rpartition("@")
    first, *others = hosts.split(",")
    nodes = [ClusterNode(*_host_port(node)) for node in others]
    url = urlunsplit(parts._replace(netloc=f"{login}{at}{first}"))
    return RedisCluster.from_url(url, startup_nodes=nodes, max_connections=_UNBOUNDED, **options)


def cluster_url(url: str) -> tuple[str, bool]:
    """``url`` with its ``+cluster`` scheme suffix taken off, and whether it had one."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme.lower().endswith(CLUSTER_SUFFIX):
        return f"{scheme[: -len(CLUSTER_SUFFIX)]}://{rest}", True
    return url, False


def _host_port(node: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port``, or a host alone (port 6379)."""
    parsed = urlsplit(f"//{node}")
    return parsed.hostname or node, parsed.port or 6379
