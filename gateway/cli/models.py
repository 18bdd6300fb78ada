"""``shunter pull`` and ``shunter models list|rm``: the local model cache from the shell.

Nothing heavy is imported here until a command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from gateway.models.store import CachedModel, ModelCache, PullResult

PULL_EPILOG = """\
sources:
  hf://OWNER/REPO[@REVISION]/PATH/FILE.gguf   a file in a Hugging Face repository
  https://host/path/FILE.gguf                 any URL serving a GGUF file

The file goes to $SHUNTER_MODEL_DIR (default ~/.cache/shunter/models) as NAME.gguf; the
last line printed is its path. An interrupted pull resumes when run again.
HF_TOKEN is sent to Hugging Face for gated or private repositories.
"""


def register(sub: Any) -> None:
    """Add the ``pull`` and ``models`` subcommands to the ``shunter`` subparsers."""
    pull = sub.add_parser(
        "pull",
        help="download a GGUF model into the local cache",
        epilog=PULL_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    pull.add_argument("source", help="hf://owner/repo/file.gguf or an http(s) URL")
    pull.add_argument("--name", help="cache name (default: the file name without .gguf)")
    pull.add_argument("--sha256", help="expected sha256 of the file (hex)")
    pull.add_argument("--endpoint", help="Hugging Face endpoint (env SHUNTER_HF_ENDPOINT)")
    pull.add_argument("--force", action="store_true", help="download again if already cached")
    pull.add_argument("--retries", type=int, default=3, help="resumes after a dropped transfer")
    pull.add_argument("--model-dir", type=Path, help="cache directory (env SHUNTER_MODEL_DIR)")
    pull.set_defaults(handler=_pull)

    models = sub.add_parser("models", help="list or remove cached models")
    verbs = models.add_subparsers(required=True, metavar="ACTION")
    listing = verbs.add_parser("list", aliases=["ls"], help="list cached models")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.add_argument("--model-dir", type=Path)
    listing.set_defaults(handler=_list)
    remove = verbs.add_parser("rm", help="delete cached models")
    remove.add_argument("names", nargs="+", metavar="NAME")
    remove.add_argument("--model-dir", type=Path)
    remove.set_defaults(handler=_remove)


def _cache(args: argparse.Namespace) -> ModelCache:
    from gateway.models.store import ModelCache

    return ModelCache(args.model_dir)


def _pull(args: argparse.Namespace) -> int:
    from rich.console import Console

    from gateway.models.store import PullError

    err = Console(stderr=True)
    try:
        result = _pull_with_progress(args, _cache(args), err)
    except (PullError, ValueError) as exc:
        err.print(f"[red]error:[/] {exc}", highlight=False)
        return 1
    model = result.model
    if result.already:
        err.print(f"{model.name} is already cached at {model.path} (--force to download again)")
    else:
        how = "resumed, " if result.resumed else ""
        err.print(f"pulled {model.name} ({how}{_size(model.size)}, sha256 {model.sha256})")
    print(model.path)
    return 0


def _pull_with_progress(args: argparse.Namespace, cache: ModelCache, err: Console) -> PullResult:
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    options: dict[str, Any] = {
        "name": args.name,
        "sha256": args.sha256,
        "endpoint": args.endpoint,
        "force": args.force,
        "retries": args.retries,
    }
    if not err.is_terminal:
        return cache.pull(args.source, **options)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task(args.name or args.source.rsplit("/", 1)[-1], total=None)

        def advance(done: int, total: int | None) -> None:
            progress.update(task, completed=done, total=total)

        return cache.pull(args.source, on_progress=advance, **options)


def _list(args: argparse.Namespace) -> int:
    models = _cache(args).list_models()
    if args.json:
        print(json.dumps([_as_json(m) for m in models], indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"models in {_cache(args).root}", title_justify="left")
    for column in ("name", "size", "path", "last used"):
        table.add_column(column, justify="right" if column == "size" else "left")
    for m in models:
        table.add_row(m.name, _size(m.size), str(m.path), _ago(m.last_used))
    Console().print(table if models else f"no models in {_cache(args).root}")
    return 0


def _remove(args: argparse.Namespace) -> int:
    from gateway.models.store import UnknownModelError

    cache, code = _cache(args), 0
    for name in args.names:
        try:
            model = cache.remove(name)
        except (UnknownModelError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            code = 1
            continue
        print(f"deleted {model.name} ({_size(model.size)}, {model.path})")
    return code


def _as_json(model: CachedModel) -> dict[str, Any]:
    return {
        "name": model.name,
        "path": str(model.path),
        "size": model.size,
        "last_used": model.last_used,
        "pulled_at": model.pulled_at,
        "source": model.source,
        "sha256": model.sha256,
    }


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"


def _ago(when: float | None, now: float | None = None) -> str:
    if when is None:
        return "never"
    seconds = max(0.0, (time.time() if now is None else now) - when)
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count > 1 else ''} ago"
    return "just now"
