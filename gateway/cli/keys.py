"""``shunter keys create|list|revoke``: manage virtual keys in the shared Redis.

Keys live where the gateway's state lives: the Redis named by ``--redis-url`` or
``SHUNTER_REDIS_URL``. Without Redis a gateway keeps its state in its own memory, which
this command cannot reach, so it refuses and says so (use ``SHUNTER_MASTER_KEY`` for a
single-process gateway instead).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit

from gateway.admission.keys import KeyRecord, KeyRing, KeySessionLimits
from gateway.common.durations import UNIT_SECONDS, split_duration
from gateway.state import REDIS_URL_ENV, StateSettings, StateStore, StateUnavailable, open_store

NO_REDIS = (
    "virtual keys need shared state, and no Redis is configured. Pass --redis-url or set "
    f"{REDIS_URL_ENV} to the Redis your gateway uses. A gateway without Redis keeps its "
    "state in its own memory, which this command cannot reach: protect it with "
    "SHUNTER_MASTER_KEY instead."
)


def parse_duration(text: str) -> int:
    """``90s``, ``15m``, ``12h``, ``30d``, ``2w`` as whole seconds (the unit is required)."""
    number, unit = split_duration(text) or (0.0, None)
    if unit is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 30d, 12h, 15m, 90s")
    seconds = round(number * UNIT_SECONDS[unit])
    if seconds < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is shorter than one second")
    return seconds


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``keys create|list|revoke`` to the ``shunter`` command."""
    keys = sub.add_parser("keys", help="manage virtual API keys (needs Redis)")
    actions = keys.add_subparsers(required=True, metavar="ACTION")

    create = actions.add_parser("create", help="create a key; prints its secret once")
    create.add_argument("--name", required=True, help="a label for the key (shown by list)")
    create.add_argument("--budget", type=float, metavar="USD", help="spend limit per window")
    create.add_argument(
        "--budget-window",
        type=parse_duration,
        default="30d",
        metavar="DUR",
        help="the budget's window, e.g. 1d or 30d",
    )
    create.add_argument("--rpm", type=_positive, help="requests per minute")
    create.add_argument("--tpm", type=_positive, help="tokens per minute")
    create.add_argument("--models", type=_models, help="allowed models, comma-separated")
    create.add_argument(
        "--mcp",
        action="append",
        type=_mcp_entry,
        metavar="SERVER[:TOOL]",
        help="an MCP server (all its tools) or one tool of it the key may use; repeat for "
        "more (default: every server)",
    )
    create.add_argument("--expires", type=parse_duration, metavar="DUR", help="e.g. 30d")
    create.add_argument(
        "--session-budget-usd", type=_dollars, metavar="USD", help="spend limit per session"
    )
    create.add_argument("--session-max-tokens", type=_positive, help="tokens per session, in all")
    create.add_argument("--session-rpm", type=_positive, help="requests per minute per session")
    create.add_argument("--session-tpm", type=_positive, help="tokens per minute per session")
    create.add_argument(
        "--session-loop-repeats",
        type=_at_least_two,
        metavar="N",
        help="refuse a session's request after N identical tool calls in a row",
    )
    create.set_defaults(handler=_run(_create))

    listing = actions.add_parser("list", help="list keys (never their secrets)")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.set_defaults(handler=_run(_list))

    revoke = actions.add_parser("revoke", help="revoke a key by id")
    revoke.add_argument("id", help="the key's id, as list shows it")
    revoke.set_defaults(handler=_run(_revoke))

    for parser in (create, listing, revoke):
        parser.add_argument(
            "--redis-url", help=f"default: ${REDIS_URL_ENV} (a Cluster: redis+cluster://...)"
        )


_AsyncAction = Callable[[KeyRing, StateStore, argparse.Namespace], Awaitable[int]]


class _Action:
    """Runs one async key action against the configured store, mapping failures to exit codes."""

    def __init__(self, action: _AsyncAction) -> None:
        self.action = action

    def __call__(self, args: argparse.Namespace) -> int:
        settings = StateSettings.from_env(redis_url=args.redis_url)
        if settings.redis_url is None:
            print(f"error: {NO_REDIS}", file=sys.stderr)
            return 2
        return asyncio.run(self._main(settings, args))

    async def _main(self, settings: StateSettings, args: argparse.Namespace) -> int:
        store = open_store(settings)
        try:
            return await self.action(KeyRing(store), store, args)
        except StateUnavailable as exc:
            print(
                f"error: cannot reach Redis at {safe_url(settings.redis_url)}: {exc}",
                file=sys.stderr,
            )
            return 1
        finally:
            await store.aclose()


def _run(action: _AsyncAction) -> _Action:
    return _Action(action)


async def _create(ring: KeyRing, _: StateStore, args: argparse.Namespace) -> int:
    secret, record = await ring.create(
        args.name,
        models=args.models,
        mcp=tuple(args.mcp) if args.mcp else None,
        rpm=args.rpm,
        tpm=args.tpm,
        budget_usd=args.budget,
        budget_window_s=args.budget_window,
        expires_in_s=args.expires,
        session=_session_limits(args),
    )
    print(f"created {record.id} ({_describe(record)})", file=sys.stderr)
    print("the secret below is shown only now; store it somewhere safe:", file=sys.stderr)
    print(secret)
    return 0


async def _list(ring: KeyRing, store: StateStore, args: argparse.Namespace) -> int:
    now = time.time()
    records = await ring.list_keys()
    for record in records:
        spent = None
        if record.budget_usd is not None:
            spent = (await store.spend_get(f"key:{record.id}", record.budget_window_s)).usd
        if args.json:
            row = record.model_dump(exclude={"secret_hash"})
            print(json.dumps({**row, "status": record.status(now), "spent_usd": spent}))
        else:
            print(f"{record.id}  {record.status(now):8}  {_describe(record, spent)}")
    if not records and not args.json:
        print("no keys", file=sys.stderr)
    return 0


async def _revoke(ring: KeyRing, _: StateStore, args: argparse.Namespace) -> int:
    record = await ring.revoke(args.id)
    if record is None:
        print(f"error: no key with id {args.id!r}", file=sys.stderr)
        return 1
    print(f"revoked {record.id} ({record.name})")
    return 0


def _describe(record: KeyRecord, spent: float | None = None) -> str:
    parts = [f"name={record.name}"]
    if record.models is not None:
        parts.append(f"models={','.join(record.models)}")
    if record.mcp is not None:
        parts.append(f"mcp={','.join(record.mcp)}")
    if record.rpm is not None:
        parts.append(f"rpm={record.rpm}")
    if record.tpm is not None:
        parts.append(f"tpm={record.tpm}")
    if record.budget_usd is not None:
        used = "" if spent is None else f"{spent:.4f}/"
        parts.append(f"budget=${used}{record.budget_usd:.2f} per {record.budget_window_s}s")
    if record.session is not None:
        parts.extend(record.session.described())
    if record.expires_at is not None:
        parts.append(f"expires={datetime.fromtimestamp(record.expires_at, UTC):%Y-%m-%dT%H:%MZ}")
    return " ".join(parts)


def safe_url(url: str | None) -> str:
    """The URL with any password replaced by ``***``."""
    if url is None:
        return "<none>"
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + netloc))


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _dollars(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


def _at_least_two(text: str) -> int:
    value = int(text)
    if value < 2:
        raise argparse.ArgumentTypeError("must be at least 2")
    return value


def _session_limits(args: argparse.Namespace) -> KeySessionLimits | None:
    limits = KeySessionLimits(
        budget_usd=args.session_budget_usd,
        max_tokens=args.session_max_tokens,
        rpm=args.session_rpm,
        tpm=args.session_tpm,
        loop_repeats=args.session_loop_repeats,
    )
    return limits if limits.described() else None


def _models(text: str) -> tuple[str, ...]:
    models = tuple(m.strip() for m in text.split(",") if m.strip())
    if not models:
        raise argparse.ArgumentTypeError("name at least one model")
    return models


def _mcp_entry(text: str) -> str:
    server, colon, tool = text.strip().partition(":")
    if not server or (colon and not tool) or ":" in tool:
        raise argparse.ArgumentTypeError("write SERVER or SERVER:TOOL")
    return f"{server}:{tool}" if colon else server
