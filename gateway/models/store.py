"""The local model cache: pull GGUF files (URL or Hugging Face reference), list, remove, resolve.

A cached model is ``<cache>/<name>.gguf`` with a sidecar ``<name>.gguf.json`` (source, sha256,
pull time, last use), in ``$SHUNTER_MODEL_DIR`` or ``~/.cache/shunter/models`` (see
:func:`model_cache_dir`), beside the generated ``demo-*.gguf`` models. Models shipped inside
an installed Python package (``package:NAME``, see :mod:`gateway.models.packaged`) are
resolved in place, never copied.

A pull downloads into ``<name>.gguf.part`` (resumed with an HTTP ``Range`` request when that file
exists), checks the size against ``Content-Length``, the sha256 against the expected one (given,
or the sha256 ``X-Linked-ETag``/``ETag`` Hugging Face returns for LFS files) and the GGUF magic,
and only then renames the file into place.

``HF_TOKEN`` goes only to Hugging Face sources, and only over https (or to a loopback
endpoint, for tests): a pull that would send it over plain http is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit

from gateway.models.demo import ensure_demo_model
from gateway.models.packaged import PackagedModelError, is_packaged, packaged_path

if TYPE_CHECKING:
    import httpx

GGUF_MAGIC = b"GGUF"
HF_ENDPOINT = "https://huggingface.co"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
DEMO_PREFIX = "demo:"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")

ProgressCallback = Callable[[int, "int | None"], None]  # (bytes on disk, total if known)


class PullError(RuntimeError):
    """A pull that failed; the message says why and what to do."""


class UnknownModelError(LookupError):
    """A name that is neither a cached model nor an existing file."""


@dataclass(frozen=True)
class Source:
    """Where a pull downloads from: the resolved ``url`` and the remote ``filename``."""

    url: str
    filename: str
    hugging_face: bool


def parse_source(source: str, endpoint: str | None = None) -> Source:
    """Resolve ``hf://owner/repo[@revision]/path/file.gguf`` (against ``endpoint``, else
    ``$SHUNTER_HF_ENDPOINT``, else huggingface.co) or a plain http(s) URL."""
    if source.startswith("hf://"):
        parts = source.removeprefix("hf://").strip("/").split("/")
        if len(parts) < 3 or not all(parts):
            raise PullError(f"bad Hugging Face reference {source!r}: use hf://owner/repo/file.gguf")
        owner, (repo, _, revision), path = parts[0], parts[1].partition("@"), parts[2:]
        base = (endpoint or os.environ.get("SHUNTER_HF_ENDPOINT") or HF_ENDPOINT).rstrip("/")
        url = f"{base}/{owner}/{repo}/resolve/{quote(revision or 'main', safe='')}/"
        return Source(url + "/".join(quote(p) for p in path), path[-1], hugging_face=True)
    split = urlsplit(source)
    if split.scheme not in ("http", "https") or not split.netloc:
        raise PullError(f"bad source {source!r}: give an http(s) URL or hf://owner/repo/file.gguf")
    hugging_face = split.netloc == "huggingface.co" or split.netloc.endswith(".huggingface.co")
    if hugging_face and "/blob/" in split.path:  # a page URL: download from .../resolve/...
        source = source.replace("/blob/", "/resolve/", 1)
    return Source(source, unquote(split.path.rstrip("/").rsplit("/", 1)[-1]), hugging_face)


def model_name(filename: str) -> str:
    """The cache name of a downloaded file: its name without ``.gguf``."""
    name = filename[:-5] if filename.lower().endswith(".gguf") else filename
    check_name(name)
    return name


def check_name(name: str) -> None:
    """Raise ``ValueError`` unless ``name`` is a safe cache name (letters, digits, ``._-``)."""
    if not _NAME.match(name) or name.endswith(".part"):
        raise ValueError(f"bad model name {name!r}: use letters, digits, '.', '_' and '-'")


@dataclass(frozen=True)
class CachedModel:
    """One model in the cache."""

    name: str
    path: Path
    size: int
    last_used: float | None = None
    pulled_at: float | None = None
    source: str | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class PullResult:
    """What a pull did: bytes ``downloaded``, ``resumed`` a ``.part`` or ``already`` cached."""

    model: CachedModel
    downloaded: int = 0
    resumed: bool = False
    already: bool = False


class ModelCache:
    """The model cache directory, with last-used bookkeeping for LRU decisions."""

    def __init__(self, root: Path | None = None, clock: Callable[[], float] = time.time) -> None:
        self._root = Path(root) if root is not None else None
        self._clock = clock

    @property
    def root(self) -> Path:
        """The cache directory (the environment is read on first use, not at construction)."""
        if self._root is None:
            self._root = model_cache_dir()
        return self._root

    def path(self, name: str) -> Path:
        """Where the model ``name`` is (or would be) stored."""
        check_name(name)
        return self.root / f"{name}.gguf"

    def resolve(self, name: str) -> Path:
        """The GGUF file for ``name``: a cached model (its use is recorded), ``demo:tiny`` or
        ``demo:bench`` (generated into the cache on first use), ``package:NAME`` (a model
        shipped in an installed Python package) or an existing file path."""
        if name in ("demo:tiny", "demo:bench"):
            size = name.removeprefix(DEMO_PREFIX)
            ensure_demo_model(self.path(f"demo-{size}"), size)  # type: ignore[arg-type]
            name = f"demo-{size}"
        path = self.locate(name)
        if not is_packaged(name) and _NAME.match(name) and path == self.path(name):
            with contextlib.suppress(OSError):  # a read-only cache still serves its models
                self.touch(name)
        return path

    def locate(self, name: str) -> Path:
        """Where the GGUF file ``name`` names is, changing nothing: a ``package:NAME``, a
        cached model or a file path (a demo model only once generated). Raises
        :class:`UnknownModelError` saying where it looked."""
        if is_packaged(name):
            try:
                return packaged_path(name)
            except PackagedModelError as exc:
                raise UnknownModelError(str(exc)) from None
        if name.startswith(DEMO_PREFIX):
            name = f"demo-{name.removeprefix(DEMO_PREFIX)}"
        if _NAME.match(name) and self.path(name).is_file():
            return self.path(name)
        if Path(name).expanduser().is_file():
            return Path(name).expanduser()
        raise UnknownModelError(
            f"model {name!r} is neither in the cache ({self.root}) nor a file; "
            "fetch it with: shunter pull SOURCE"
        )

    def touch(self, name: str, when: float | None = None) -> None:
        """Record a use of ``name`` now (or at ``when``)."""
        when = self._clock() if when is None else when
        self._write_meta(name, {**self._meta(name), "last_used": when})

    def last_used(self, name: str) -> float | None:
        """When ``name`` was last resolved or touched, or ``None``."""
        return _float(self._meta(name).get("last_used"))

    def get(self, name: str) -> CachedModel:
        """The cached model ``name``; :class:`UnknownModelError` when it is not cached."""
        path = self.path(name)
        if not path.is_file():
            raise UnknownModelError(f"model {name!r} is not in the cache ({self.root})")
        meta = self._meta(name)
        last_used, pulled_at = _float(meta.get("last_used")), _float(meta.get("pulled_at"))
        size = path.stat().st_size
        return CachedModel(
            name, path, size, last_used, pulled_at, meta.get("source"), meta.get("sha256")
        )

    def list_models(self) -> list[CachedModel]:
        """Every cached model, by name."""
        paths = self.root.glob("*.gguf") if self.root.is_dir() else []
        return [self.get(p.stem) for p in sorted(paths) if p.is_file() and _NAME.match(p.stem)]

    def remove(self, name: str) -> CachedModel:
        """Delete a cached model (with its sidecar and any partial download)."""
        model = self.get(name)
        for path in (self._file(name, ".json"), self._file(name, ".part"), model.path):
            path.unlink(missing_ok=True)
        return model

    def pull(
        self,
        source: str,
        *,
        name: str | None = None,
        sha256: str | None = None,
        endpoint: str | None = None,
        force: bool = False,
        retries: int = 3,
        client: httpx.Client | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> PullResult:
        """Download ``source`` into the cache as ``name`` (default: the file name without
        ``.gguf``); a model already cached is kept unless ``force``. Dropped transfers are
        resumed up to ``retries`` times; after that the partial file waits for the next pull."""
        src = parse_source(source, endpoint)
        name = name or model_name(src.filename)
        check_name(name)
        if sha256 is not None and not _SHA256.match(sha256.lower()):
            raise PullError(f"--sha256 must be 64 hex digits, got {sha256!r}")
        if self.path(name).is_file() and not force:
            return PullResult(self.get(name), already=True)
        self.root.mkdir(parents=True, exist_ok=True)
        token = os.environ.get("HF_TOKEN") if src.hugging_face else None
        if token and not _private_channel(src.url):
            raise PullError(
                f"refusing to send HF_TOKEN over plain http to {urlsplit(src.url).netloc}: "
                "use an https endpoint, or unset HF_TOKEN for a public file"
            )
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        part = self._file(name, ".part")
        expected = sha256.lower() if sha256 else None
        done = download(src.url, part, expected, headers, retries, client, on_progress)
        os.replace(part, self.path(name))
        meta = {"source": source, "url": src.url, "sha256": done.sha256}
        self._write_meta(name, {**meta, "pulled_at": self._clock()})
        return PullResult(self.get(name), done.downloaded, done.resumed)

    def _file(self, name: str, suffix: str) -> Path:
        return self.root / f"{name}.gguf{suffix}"

    def _meta(self, name: str) -> dict[str, Any]:
        try:
            meta = json.loads(self._file(name, ".json").read_text())
        except (OSError, ValueError):
            return {}
        return meta if isinstance(meta, dict) else {}

    def _write_meta(self, name: str, meta: dict[str, Any]) -> None:
        target = self._file(name, ".json")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(meta, indent=2))
        os.replace(tmp, target)  # readers never see half a sidecar


def _private_channel(url: str) -> bool:
    """Whether a credential may travel to ``url``: https, or plain http on loopback."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        return True
    host = parts.hostname or ""
    try:
        return parts.scheme == "http" and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return parts.scheme == "http" and host == "localhost"


def model_cache_dir() -> Path:
    """``$SHUNTER_MODEL_DIR``, else ``$XDG_CACHE_HOME/shunter/models`` (``~/.cache``)."""
    base = os.environ.get("SHUNTER_MODEL_DIR")
    if base:
        return Path(base).expanduser()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "shunter" / "models"


def resolve_model_path(model: str) -> Path:
    """The GGUF file ``model`` names: a model-cache name (``shunter models list``),
    ``demo:tiny`` / ``demo:bench`` (generated into the cache on first use), ``package:NAME``
    (shipped in an installed Python package) or a file path.
    Raises :class:`FileNotFoundError` saying where it looked."""
    if model.startswith(DEMO_PREFIX) and model.removeprefix(DEMO_PREFIX) not in ("tiny", "bench"):
        raise ValueError(f"unknown demo model {model!r}: use demo:tiny or demo:bench")
    try:
        return ModelCache(model_cache_dir()).resolve(model)
    except UnknownModelError as exc:
        raise FileNotFoundError(str(exc)) from None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


@dataclass
class Transfer:
    """What :func:`download` did, across its attempts."""

    total: int | None = None
    remote_sha256: str | None = None
    sha256: str | None = None
    downloaded: int = 0
    resumed: bool = False


def download(
    url: str,
    part: Path,
    expected_sha256: str | None = None,
    headers: dict[str, str] | None = None,
    retries: int = 3,
    client: httpx.Client | None = None,
    on_progress: ProgressCallback | None = None,
) -> Transfer:
    """Download ``url`` into ``part``, resuming what is there and retrying dropped transfers,
    then check size, sha256 and GGUF magic. A bad file is deleted; a dropped one is kept."""
    import httpx

    state = Transfer()
    fresh = client is None
    session = httpx.Client(follow_redirects=True, timeout=30.0) if client is None else client
    with session if fresh else contextlib.nullcontext():
        for attempt in range(retries + 1):
            try:
                _fetch(session, url, part, headers or {}, state, on_progress)
                break
            except httpx.TransportError as exc:
                if attempt == retries:
                    have = part.stat().st_size if part.exists() else 0
                    kept = f"{have} bytes kept in {part}: " if have else ""
                    if isinstance(exc, httpx.ConnectError):  # no transfer began: nothing cut
                        raise PullError(f"{_unreachable(url, exc)}; {kept}run the same pull "
                                        "again once it is reachable") from None  # fmt: skip
                    raise PullError(
                        f"download of {url} interrupted ({type(exc).__name__}: {exc}); "
                        f"{have} bytes kept in {part}: run the same pull again to resume"
                    ) from None
    problem = _check(part, state, expected_sha256 or state.remote_sha256)
    if problem is not None:
        part.unlink(missing_ok=True)
        raise PullError(f"{problem}; the download was discarded")
    return state


def _unreachable(url: str, exc: Exception) -> str:
    """Why a connection to ``url``'s host was never made, in words that say where to look."""
    import httpx

    host = httpx.URL(url).host
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, socket.gaierror):
        cause = cause.__cause__ or cause.__context__
    if cause is not None:
        return (
            f"cannot reach {host}: its name does not resolve ({cause.strerror or cause}): "
            "a network or DNS failure, or a misspelt host name"
        )
    return f"cannot connect to {host} ({exc})"


def _fetch(
    client: httpx.Client,
    url: str,
    part: Path,
    headers: dict[str, str],
    state: Transfer,
    on_progress: ProgressCallback | None,
) -> None:
    offset = part.stat().st_size if part.exists() else 0
    request = {**headers, "Range": f"bytes={offset}-"} if offset else headers
    with client.stream("GET", url, headers=request) as response:
        for hop in (*response.history, response):  # HF puts the LFS sha256 on the redirect
            for header in ("x-linked-etag", "etag"):
                tag = hop.headers.get(header, "").removeprefix("W/").strip('"').lower()
                if state.remote_sha256 is None and _SHA256.match(tag):
                    state.remote_sha256 = tag
        status = response.status_code
        start, total = _content_range(response.headers.get("content-range", ""))
        if status == 416 and offset and total == offset:  # the part file is already whole
            state.total, state.sha256 = total, _hash_file(part).hexdigest()
            return
        if status not in (200, 206) or (status == 206 and start != offset):
            if status in (206, 416):  # a range the server will not honour: start over
                part.unlink(missing_ok=True)
            raise PullError(_http_error(url, status))
        if status == 206:
            state.total, state.resumed = total, True
            digest = _hash_file(part)
        else:
            length = response.headers.get("content-length", "")
            state.total = int(length) if length.isdigit() else None
            digest, offset = hashlib.sha256(), 0
        head, bad_head = b"" if status == 200 else GGUF_MAGIC, None
        with part.open("ab" if status == 206 else "wb") as handle:
            for block in response.iter_bytes():  # as received: a drop loses nothing
                if len(head) < len(GGUF_MAGIC):
                    head += block[: len(GGUF_MAGIC) - len(head)]
                    if not GGUF_MAGIC.startswith(head):
                        bad_head = head
                        break
                handle.write(block)
                digest.update(block)
                offset += len(block)
                state.downloaded += len(block)
                if on_progress is not None:
                    on_progress(offset, state.total)
    if bad_head is not None:
        part.unlink(missing_ok=True)
        raise PullError(f"{url} is not a GGUF file (it starts with {bad_head!r}); nothing kept")
    state.sha256 = digest.hexdigest()


def _check(part: Path, state: Transfer, expected_sha256: str | None) -> str | None:
    size = part.stat().st_size
    if state.total is not None and size != state.total:
        return f"size mismatch: expected {state.total} bytes, got {size}"
    if expected_sha256 and state.sha256 != expected_sha256:
        return f"sha256 mismatch: expected {expected_sha256}, got {state.sha256}"
    with part.open("rb") as handle:
        head = handle.read(len(GGUF_MAGIC))
    return None if head == GGUF_MAGIC else f"not a GGUF file (it starts with {head!r})"


def _hash_file(path: Path) -> Any:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256")


def _content_range(value: str) -> tuple[int | None, int | None]:
    """(first byte, total size) of ``bytes 100-199/1000`` or ``bytes */1000``."""
    match = re.fullmatch(r"bytes (?:(\d+)-\d+|\*)/(\d+|\*)", value.strip())
    start, total = match.groups() if match else (None, None)
    return (int(start) if start else None), (int(total) if total and total.isdigit() else None)


def _http_error(url: str, status: int) -> str:
    hints = {401: "credentials needed (HF_TOKEN)", 403: "access denied (gated repo? HF_TOKEN)"}
    hints.update({404: "not found", 206: "resumed at the wrong byte", 416: "cannot resume"})
    hint = f": {hints[status]}" if status in hints else ""
    return f"GET {url} answered HTTP {status}{hint}"
