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

    from gateway.models.packaged import InstalledModel
    from gateway.models.store import CachedModel, ModelCache, PullResult

PULL_EPILOG = """\
sources:
  hf://OWNER/REPO[@REVISION]/PATH/FILE.gguf   a file in a Hugging Face repository
  https://host/path/FILE.gguf                 any URL serving a GGUF file

The file goes to $SHUNTER_MODEL_DIR (default ~/.cache/shunter/models) as NAME.gguf; the
last line printed is its path. An interrupted pull resumes when run again.
HF_TOKEN is sent to Hugging Face for gated or private repositories.
"""
_DIR_HELP = "cache directory (default: $SHUNTER_MODEL_DIR, else ~/.cache/shunter/models)"


def register(sub: Any) -> None:
    """Add the ``pull`` and ``models`` subcommands to the ``shunter`` subparsers."""
    pull = sub.add_parser(
        "pull",
        help="download a GGUF model into the local cache",
        epilog=PULL_EPILOG,
    )
    pull.add_argument("source", help="hf://owner/repo/file.gguf or an http(s) URL")
    pull.add_argument("--name", help="cache name (default: the file name without .gguf)")
    pull.add_argument("--sha256", help="expected sha256 of the file (hex)")
    pull.add_argument("--endpoint", help="Hugging Face endpoint (env SHUNTER_HF_ENDPOINT)")
    pull.add_argument("--force", action="store_true", help="download again if already cached")
    pull.add_argument("--retries", type=int, default=3, help="resumes after a dropped transfer")
    pull.add_argument("--model-dir", type=Path, help=_DIR_HELP)
    pull.set_defaults(handler=_pull)

    models = sub.add_parser("models", help="list or remove cached models")
    verbs = models.add_subparsers(required=True, metavar="ACTION")
    listing = verbs.add_parser(
        "list",
        aliases=["ls"],
        help="list the models a deployment's model field can name",
        description="Models in the cache (pulled or generated) and models shipped in "
        "installed Python packages (package:NAME); a deployment's model takes the name.",
    )
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.add_argument("--model-dir", type=Path, help=_DIR_HELP)
    listing.set_defaults(handler=_list)
    remove = verbs.add_parser("rm", help="delete cached models")
    remove.add_argument("names", nargs="+", metavar="NAME", help="cache names to delete")
    remove.add_argument("--model-dir", type=Path, help=_DIR_HELP)
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
    from gateway.models.packaged import installed_models

    cache = _cache(args)
    rows = [_cached_row(m) for m in cache.list_models()]
    rows += [_packaged_row(m) for m in installed_models()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    title = f"models in {cache.root}, and in installed packages"
    table = Table(title=title, title_justify="left")
    table.add_column("name", no_wrap=True)  # what a config names: never cut
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("path", overflow="fold")
    table.add_column("last used")
    table.add_column("from")
    for row in rows:
        when = "-" if row["packaged"] else _ago(row["last_used"])
        table.add_row(row["name"], _size(row["size"]), row["path"], when, row["source"] or "")
    Console().print(table if rows else f"no models in {cache.root}", highlight=False)
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


def _cached_row(model: CachedModel) -> dict[str, Any]:
    generated = model.source is None and model.name.startswith("demo-")
    return {
        "name": model.name,
        "path": str(model.path),
        "size": model.size,
        "last_used": model.last_used,
        "pulled_at": model.pulled_at,
        "source": "generated (random weights)" if generated else model.source,
        "sha256": model.sha256,
        "packaged": False,
    }


def _packaged_row(found: InstalledModel) -> dict[str, Any]:
    model = found.model
    return {
        "name": model.reference,
        "path": str(found.path),
        "size": found.size,
        "last_used": None,
        "pulled_at": None,
        "source": f"package {model.distribution} {found.version} ({model.license})",
        "sha256": None,
        "packaged": True,
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
