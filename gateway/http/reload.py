"""Hot reload: watch the config file and apply valid edits without a restart.

The file is polled (content hash, every ``interval_s``), which also follows Kubernetes
ConfigMap updates, where the mounted file is swapped through a symlink. An invalid edit is
logged with file, line and field, and the running config keeps serving.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import structlog

from gateway.common.periodic import Periodic
from gateway.config import ConfigError, parse_config
from gateway.dispatch import Gateway

log = structlog.get_logger("shunter.reload")


class ConfigWatcher:
    def __init__(self, path: Path, gateway: Gateway, interval_s: float = 1.0) -> None:
        self.path = path
        self.gateway = gateway
        self._digest = _digest(path)
        self._ticker = Periodic(interval_s, self.check)

    def start(self) -> None:
        self._ticker.start()

    async def stop(self) -> None:
        await self._ticker.stop()

    async def check(self) -> bool:
        """Apply the file if it changed and is valid; True when a new config took effect."""
        digest = _digest(self.path)
        if digest is None or digest == self._digest:
            return False
        self._digest = digest
        try:
            config = parse_config(self.path.read_text(encoding="utf-8"), str(self.path))
        except (ConfigError, OSError) as exc:
            issues = [str(i) for i in exc.issues] if isinstance(exc, ConfigError) else [str(exc)]
            log.error("config_rejected", issues=issues, active=self.gateway.config_version)
            return False
        try:
            await self.gateway.apply(config)
        except Exception as exc:
            log.error("config_not_applied", error=str(exc), active=self.gateway.config_version)
            return False
        log.info("config_reloaded", version=self.gateway.config_version, path=str(self.path))
        return True


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
