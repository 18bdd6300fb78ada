"""Shunter's app for granian, for ``bench/http_server.py``: ``granian --interface asgi
--factory bench.granian_app:app`` builds the same app ``shunter serve`` builds, from the
config named by ``SHUNTER_CONFIG``, with the process tuning ``shunter serve`` applies
(start-up objects frozen out of collection, the young generation collected every 10,000
allocations, large buffers kept). The edge below the app is granian's own.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any


def app() -> Any:
    from gateway.cli.startup import preflight
    from gateway.dispatch import Gateway
    from gateway.http.app import AppSettings, create_app
    from gateway.http.server import _GC_THRESHOLDS, keep_large_buffers
    from gateway.state import StateSettings
    from gateway.telemetry.logs import configure_logging

    configure_logging(os.environ.get("SHUNTER_LOG_LEVEL", "warning"))
    path = Path(os.environ["SHUNTER_CONFIG"])
    loaded = preflight(path)
    if loaded is None:
        raise SystemExit(2)
    gateway = Gateway.from_config(loaded.config)
    settings = AppSettings(config=loaded.config, config_path=path, state=StateSettings.from_env())
    built = create_app(settings, gateway)
    gc.collect()
    gc.freeze()
    gc.set_threshold(*_GC_THRESHOLDS)
    keep_large_buffers()
    return built
