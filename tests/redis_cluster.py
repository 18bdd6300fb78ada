"""A real Redis Cluster for tests: three primaries and three replicas on loopback.

Six ``redis-server`` processes (no persistence, a short ``cluster-node-timeout`` so that a
failover takes a second or two), joined by ``redis-cli --cluster create --cluster-replicas
1``. :meth:`RedisCluster.kill` ends a node at once (SIGKILL), as a crash would;
:meth:`RedisCluster.wait_promoted` waits until every slot has a live primary again.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.redis_server import INSTALL_HINT, RedisServer

NODE_TIMEOUT_MS = 1000


@dataclass
class RedisCluster:
    """Six nodes in ``directory``; ``url`` is the gateway's ``redis+cluster://`` URL, which
    names them all (a process starting after one died still finds the cluster)."""

    directory: Path
    nodes: list[RedisServer] = field(default_factory=list)

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes) + "/0"

    def start(self, timeout_s: float = 60.0) -> RedisCluster:
        """Start six nodes, join them (three primaries, one replica each), and wait until
        every node says the cluster is ok and every replica has synced."""
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError(INSTALL_HINT)
        options = ["--cluster-node-timeout", str(NODE_TIMEOUT_MS)]
        for i in range(6):
            folder = self.directory / f"node{i}"
            folder.mkdir(parents=True, exist_ok=True)
            node = RedisServer(folder, cluster=True, own_slots=False, extra=options)
            self.nodes.append(node.start())
        addresses = [f"127.0.0.1:{n.port}" for n in self.nodes]
        subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "1", "--cluster-yes"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=True,
        )
        self._wait(self._healthy, timeout_s, "the cluster did not become ok")
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def primary_of(self, key: str) -> RedisServer:
        """The node that serves ``key``'s slot now."""
        slot = int(_value(self.nodes[0], "CLUSTER", "KEYSLOT", key))
        for node in self._alive():
            for line in _lines(node, "CLUSTER", "NODES"):
                parts = line.split()
                if "myself" in parts[2] and "master" in parts[2] and _holds(parts[8:], slot):
                    return node
        raise RuntimeError(f"no live primary holds slot {slot}")

    def kill(self, node: RedisServer) -> None:
        node.kill()

    def wait_promoted(self, timeout_s: float = 30.0) -> float:
        """Wait until the live nodes cover every slot again; the seconds it took."""
        started = time.monotonic()
        self._wait(self._covered, timeout_s, "no replica took over the lost primary's slots")
        return time.monotonic() - started

    def _alive(self) -> list[RedisServer]:
        return [n for n in self.nodes if n.process is not None]

    def _healthy(self) -> bool:
        for node in self.nodes:
            info = node.command("CLUSTER", "INFO") or ""
            if "cluster_state:ok" not in info:
                return False
            replication = node.command("INFO", "replication") or ""
            if "role:slave" in replication and "master_link_status:up" not in replication:
                return False
        return True

    def _covered(self) -> bool:
        live = self._alive()
        if not all("cluster_state:ok" in (n.command("CLUSTER", "INFO") or "") for n in live):
            return False
        ports = {n.port for n in live}
        slots = 0
        for line in _lines(live[0], "CLUSTER", "NODES"):
            parts = line.split()
            port = int(parts[1].split("@")[0].rsplit(":", 1)[1])
            if "master" in parts[2] and "fail" not in parts[2] and port in ports:
                slots += sum(_width(r) for r in parts[8:])
        return slots == 16384

    def _wait(self, ready: Callable[[], bool], timeout_s: float, failure: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            time.sleep(0.05)
        states = "\n".join(n.command("CLUSTER", "NODES") or "?" for n in self._alive()[:1])
        raise RuntimeError(f"{failure} in {timeout_s}s:\n{states}")


def _value(node: RedisServer, *command: str) -> str:
    reply = node.command(*command) or ""
    return reply.lstrip(":+").strip()


def _lines(node: RedisServer, *command: str) -> list[str]:
    """The lines of a bulk-string reply (its length line dropped)."""
    reply = node.command(*command) or ""
    return [line for line in reply.splitlines()[1:] if line.strip()]


def _width(spec: str) -> int:
    if spec.startswith("["):  # a slot being migrated
        return 0
    low, _, high = spec.partition("-")
    return int(high or low) - int(low) + 1


def _holds(specs: list[str], slot: int) -> bool:
    for spec in specs:
        if spec.startswith("["):
            continue
        low, _, high = spec.partition("-")
        if int(low) <= slot <= int(high or low):
            return True
    return False
