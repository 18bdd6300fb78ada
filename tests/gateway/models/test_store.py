"""The model cache: pulls from a loopback HTTP server (Range, drops, corruption), list, rm
and resolve."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.models.demo import write_demo_model
from gateway.models.store import (
    ModelCache,
    PullError,
    UnknownModelError,
    parse_source,
)

FILE = "/models/tiny-demo.gguf"
HF_PATH = "/acme/tiny-GGUF/resolve/main/sub/tiny-demo.gguf"


@dataclass
class Files:
    """What the loopback server serves, how it misbehaves, and what it was asked."""

    body: bytes
    sha256: str
    drop_at: list[int] = field(default_factory=list)  # cut the next responses at these bytes
    corrupt: bool = False
    etag: bool = True
    ignore_range: bool = False
    requests: list[dict[str, str]] = field(default_factory=list)

    def served(self) -> bytes:
        if not self.corrupt:
            return self.body
        middle = len(self.body) // 2
        return self.body[:middle] + bytes([self.body[middle] ^ 0xFF]) + self.body[middle + 1 :]


def _handler(files: Files) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            files.requests.append(
                {"path": self.path, **{k.lower(): v for k, v in self.headers.items()}}
            )
            if self.path == HF_PATH:  # Hugging Face answers LFS files with a redirect to a CDN
                self.send_response(302)
                self.send_header("Location", FILE)
                self.send_header("X-Linked-Etag", f'"{files.sha256}"')
                self.send_header("X-Linked-Size", str(len(files.body)))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.path == "/page.html":
                return self._send(200, b"<html>not a model</html>" * 10)
            if self.path != FILE:
                return self._send(404, b"not found")
            data, start = files.served(), 0
            ranged = self.headers.get("Range")
            if ranged and not files.ignore_range:
                start = int(ranged.removeprefix("bytes=").rstrip("-"))
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
            self.send_response(206 if start else 200)
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            if files.etag:
                self.send_header("ETag", f'"{files.sha256}"')
            self.send_header("Content-Length", str(len(data) - start))
            self.end_headers()
            end = files.drop_at.pop(0) if files.drop_at else len(data)
            self.wfile.write(data[start:end])
            self.wfile.flush()
            self.close_connection = True  # a drop: the rest of the promised body never comes

        def _send(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@pytest.fixture(scope="module")
def model_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return write_demo_model(tmp_path_factory.mktemp("src") / "tiny.gguf", "tiny").read_bytes()


@pytest.fixture
def files(model_bytes: bytes) -> Files:
    return Files(model_bytes, hashlib.sha256(model_bytes).hexdigest())


@pytest.fixture
def origin(files: Files) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(files))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def cache(tmp_path: Path) -> ModelCache:
    return ModelCache(tmp_path / "models", clock=lambda: 1_000.0)


def test_full_pull(cache: ModelCache, origin: str, files: Files) -> None:
    progress: list[tuple[int, int | None]] = []
    result = cache.pull(f"{origin}{FILE}", on_progress=lambda d, t: progress.append((d, t)))
    model = result.model
    assert model.name == "tiny-demo" and model.path == cache.root / "tiny-demo.gguf"
    assert model.path.read_bytes() == files.body
    assert model.sha256 == files.sha256 and model.size == len(files.body)
    assert model.pulled_at == 1_000.0 and model.source == f"{origin}{FILE}"
    assert result.downloaded == len(files.body) and not result.resumed and not result.already
    assert progress[-1] == (len(files.body), len(files.body))
    assert [r.get("range") for r in files.requests] == [None]
    assert sorted(p.name for p in cache.root.iterdir()) == ["tiny-demo.gguf", "tiny-demo.gguf.json"]
    again = cache.pull(f"{origin}{FILE}")
    assert again.already and len(files.requests) == 1
    forced = cache.pull(f"{origin}{FILE}", force=True, name="copy")
    assert forced.model.name == "copy" and len(files.requests) == 2


def test_interrupted_pull_resumes(cache: ModelCache, origin: str, files: Files) -> None:
    cut = len(files.body) // 3
    files.drop_at = [cut]
    with pytest.raises(PullError, match="run the same pull again to resume"):
        cache.pull(f"{origin}{FILE}", retries=0)
    part = cache.root / "tiny-demo.gguf.part"
    assert part.stat().st_size == cut
    assert not (cache.root / "tiny-demo.gguf").exists()
    result = cache.pull(f"{origin}{FILE}")
    assert [r.get("range") for r in files.requests] == [None, f"bytes={cut}-"]
    assert result.resumed and result.downloaded == len(files.body) - cut
    assert hashlib.sha256(result.model.path.read_bytes()).hexdigest() == files.sha256
    assert result.model.sha256 == files.sha256
    assert not part.exists()


def test_a_host_whose_name_does_not_resolve_is_not_an_interrupted_pull(
    cache: ModelCache,
) -> None:
    # .invalid never resolves (RFC 2606), with or without a network
    with pytest.raises(PullError) as refused:
        cache.pull("https://models.example.invalid/tiny.gguf", retries=0)
    message = str(refused.value)
    assert message.startswith("cannot reach models.example.invalid: its name does not resolve")
    assert "network or DNS failure" in message and "interrupted" not in message
    assert not cache.root.exists() or list(cache.root.iterdir()) == []


def test_a_refused_connection_is_not_an_interrupted_pull(cache: ModelCache) -> None:
    with socket.socket() as unused:  # bound, never listening: connections are refused
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
        with pytest.raises(PullError) as refused:
            cache.pull(f"http://127.0.0.1:{port}/tiny.gguf", retries=0)
    assert str(refused.value).startswith("cannot connect to 127.0.0.1 (")
    assert "interrupted" not in str(refused.value)


def test_dropped_transfer_is_retried_within_one_pull(
    cache: ModelCache, origin: str, files: Files
) -> None:
    files.drop_at = [1000, 5000]
    result = cache.pull(f"{origin}{FILE}")
    ranges = [r.get("range") for r in files.requests]
    assert ranges == [None, "bytes=1000-", "bytes=5000-"]
    assert result.resumed and result.model.path.read_bytes() == files.body


def test_resume_when_the_part_is_already_whole(
    cache: ModelCache, origin: str, files: Files
) -> None:
    cache.root.mkdir(parents=True)
    (cache.root / "tiny-demo.gguf.part").write_bytes(files.body)
    result = cache.pull(f"{origin}{FILE}")
    assert files.requests[0]["range"] == f"bytes={len(files.body)}-"  # answered 416
    assert result.model.sha256 == files.sha256 and result.downloaded == 0


def test_server_ignoring_range_restarts(cache: ModelCache, origin: str, files: Files) -> None:
    cache.root.mkdir(parents=True)
    (cache.root / "tiny-demo.gguf.part").write_bytes(b"stale bytes")
    files.ignore_range = True
    result = cache.pull(f"{origin}{FILE}")
    assert files.requests[0]["range"] == "bytes=11-"
    assert not result.resumed and result.model.path.read_bytes() == files.body


def test_corrupted_download_is_rejected(cache: ModelCache, origin: str, files: Files) -> None:
    files.corrupt = True  # the ETag still names the true sha256
    with pytest.raises(PullError, match=r"sha256 mismatch.*discarded"):
        cache.pull(f"{origin}{FILE}")
    assert list(cache.root.iterdir()) == []


def test_wrong_sha256_is_rejected(cache: ModelCache, origin: str, files: Files) -> None:
    files.etag = False
    with pytest.raises(PullError, match=f"expected {'0' * 64}, got {files.sha256}"):
        cache.pull(f"{origin}{FILE}", sha256="0" * 64)
    assert list(cache.root.iterdir()) == []
    with pytest.raises(PullError, match="64 hex digits"):
        cache.pull(f"{origin}{FILE}", sha256="abc")
    assert cache.pull(f"{origin}{FILE}", sha256=files.sha256.upper()).model.sha256 == files.sha256


def test_not_gguf_and_http_errors(cache: ModelCache, origin: str) -> None:
    with pytest.raises(PullError, match="not a GGUF file"):
        cache.pull(f"{origin}/page.html", name="page")
    with pytest.raises(PullError, match="HTTP 404"):
        cache.pull(f"{origin}/missing.gguf")
    assert list(cache.root.iterdir()) == []


def test_hugging_face_reference(
    cache: ModelCache, origin: str, files: Files, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHUNTER_HF_ENDPOINT", origin)
    files.etag, files.corrupt = False, True  # only the redirect's X-Linked-Etag can tell
    with pytest.raises(PullError, match="sha256 mismatch"):
        cache.pull("hf://acme/tiny-GGUF/sub/tiny-demo.gguf")
    files.corrupt = False
    result = cache.pull("hf://acme/tiny-GGUF/sub/tiny-demo.gguf")
    assert files.requests[-2]["path"] == HF_PATH and files.requests[-1]["path"] == FILE
    assert result.model.sha256 == files.sha256


def test_parse_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHUNTER_HF_ENDPOINT", raising=False)
    hf = parse_source("hf://Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q8_0.gguf")
    assert hf.url == (
        "https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct-GGUF/resolve/main/"
        "qwen2.5-0.5b-instruct-q8_0.gguf"
    )
    assert hf.filename == "qwen2.5-0.5b-instruct-q8_0.gguf" and hf.hugging_face
    pinned = parse_source("hf://o/r@v1.0/a/b.gguf", endpoint="http://mirror:9/")
    assert pinned.url == "http://mirror:9/o/r/resolve/v1.0/a/b.gguf"
    monkeypatch.setenv("SHUNTER_HF_ENDPOINT", "http://env-mirror")
    assert parse_source("hf://o/r/f.gguf").url == "http://env-mirror/o/r/resolve/main/f.gguf"
    page = parse_source("https://huggingface.co/o/r/blob/main/f.gguf")
    assert page.url == "https://huggingface.co/o/r/resolve/main/f.gguf"
    plain = parse_source("https://example.com/blob/x%20y.gguf?download=1")
    assert plain.url.endswith("/blob/x%20y.gguf?download=1") and plain.filename == "x y.gguf"
    assert not plain.hugging_face
    for bad in ("hf://only/two", "ftp://host/f.gguf", "model.gguf"):
        with pytest.raises(PullError):
            parse_source(bad)


def test_cli_pull_list_rm(
    tmp_path: Path, origin: str, files: Files, capsys: pytest.CaptureFixture[str]
) -> None:
    cache_dir = str(tmp_path / "cli-models")
    assert main(["pull", f"{origin}{FILE}", "--model-dir", cache_dir]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == str(Path(cache_dir) / "tiny-demo.gguf")
    assert "pulled tiny-demo" in err and files.sha256 in err
    assert main(["pull", f"{origin}{FILE}", "--model-dir", cache_dir, "--sha256", "1" * 64]) == 0
    assert "already cached" in capsys.readouterr().err
    bad = ["pull", f"{origin}{FILE}", "--name", "bad", "--sha256", "1" * 64]
    assert main([*bad, "--model-dir", cache_dir]) == 1
    assert "sha256 mismatch" in capsys.readouterr().err

    assert main(["models", "list", "--json", "--model-dir", cache_dir]) == 0
    [entry] = [e for e in json.loads(capsys.readouterr().out) if not e["packaged"]]
    assert entry["name"] == "tiny-demo" and entry["size"] == len(files.body)
    assert entry["sha256"] == files.sha256 and entry["last_used"] is None
    assert main(["models", "list", "--model-dir", cache_dir]) == 0
    table = capsys.readouterr().out
    assert "tiny-demo" in table and "never" in table

    assert main(["models", "rm", "tiny-demo", "nope", "--model-dir", cache_dir]) == 1
    out, err = capsys.readouterr()
    assert "deleted tiny-demo" in out and "'nope' is not in the cache" in err
    assert list(Path(cache_dir).iterdir()) == []
    assert main(["models", "list", "--model-dir", cache_dir]) == 0
    assert "tiny-demo" not in capsys.readouterr().out


def test_resolve_and_last_used(tmp_path: Path, model_bytes: bytes) -> None:
    now = [100.0]
    cache = ModelCache(tmp_path / "models", clock=lambda: now[0])
    cache.root.mkdir()
    (cache.root / "a.gguf").write_bytes(model_bytes)
    assert cache.last_used("a") is None
    assert cache.resolve("a") == cache.root / "a.gguf"
    assert cache.last_used("a") == 100.0
    now[0] = 250.0
    cache.resolve("a")
    assert cache.get("a").last_used == 250.0
    outside = tmp_path / "elsewhere.gguf"
    outside.write_bytes(model_bytes)
    assert cache.resolve(str(outside)) == outside
    demo = cache.resolve("demo:tiny")
    assert demo == cache.root / "demo-tiny.gguf" and demo.read_bytes()[:4] == b"GGUF"
    assert [m.name for m in cache.list_models()] == ["a", "demo-tiny"]
    with pytest.raises(UnknownModelError, match="shunter pull"):
        cache.resolve("missing")
    with pytest.raises(UnknownModelError):
        cache.get("missing")
    with pytest.raises(ValueError, match="bad model name"):
        cache.path("../escape")


def test_cache_dir_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHUNTER_MODEL_DIR", str(tmp_path / "env-models"))
    assert ModelCache().root == tmp_path / "env-models"
    assert ModelCache().list_models() == []
