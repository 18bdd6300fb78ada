"""``HF_TOKEN`` travels only over https (or to loopback): a pull refuses plain http."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gateway.models.demo import write_demo_model
from gateway.models.store import ModelCache, PullError

TOKEN = "hf_pulltokentest0123456789"


@pytest.fixture
def origin(tmp_path: Path) -> Iterator[tuple[str, list[str | None]]]:
    """A loopback Hugging Face stand-in serving one GGUF; it records each Authorization."""
    body = write_demo_model(tmp_path / "src.gguf", "tiny").read_bytes()
    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_the_token_is_not_sent_over_plain_http(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    cache = ModelCache(tmp_path / "cache")
    for source, endpoint in (
        ("hf://acme/tiny-GGUF/tiny.gguf", "http://hf-mirror.example.invalid"),
        ("http://huggingface.co/acme/tiny-GGUF/resolve/main/tiny.gguf", None),
    ):
        with pytest.raises(PullError, match="refusing to send HF_TOKEN over plain http"):
            cache.pull(source, endpoint=endpoint, retries=0)
    assert not (tmp_path / "cache" / "tiny.gguf").exists()


def test_the_token_goes_to_a_loopback_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, origin: tuple[str, list[str | None]]
) -> None:
    url, seen = origin
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    result = ModelCache(tmp_path / "cache").pull("hf://acme/tiny-GGUF/tiny.gguf", endpoint=url)
    assert result.model.path.is_file()
    assert seen == [f"Bearer {TOKEN}"]
