"""A chat request's prefix chain: what of it an engine's KV cache may already hold, by hash.

Routing wants to send a request where the longest part of its prompt is cached, without
tokenizing it. Both sides compute the same chain from the same request: the gateway when it
describes the request, the engine when it takes the job (and records the chain of the
request whose KV a sequence holds). A link is a hash chained over the request's canonical
content in order: the tools, then each message (role, text, tool calls, tool call id),
long pieces cut into blocks of :data:`BLOCK_CHARS` characters; each link carries the
characters it covers from the start. Two requests share a link exactly when their content
up to that link is the same, so a follow-up turn shares every link of the turn before.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from gateway.protocol.chat import ChatCompletionRequest, ChatMessage

BLOCK_CHARS = 1024
"""Characters per link within a long piece (a message or the tools)."""

MAX_LINKS = 4096
"""Links per chain at most; past it, one last link covers the rest of the request."""

PrefixLink = tuple[str, int]
"""A link: its hash (16 hex digits) and the characters from the start it covers."""

_SEP = b"\x1e"


def prefix_chain(request: ChatCompletionRequest) -> tuple[PrefixLink, ...]:
    """The request's chain of links, shortest prefix first (empty for no content)."""
    return describe_prefix(request)[0]


def describe_prefix(request: ChatCompletionRequest) -> tuple[tuple[PrefixLink, ...], int]:
    """The request's chain, and how many of its first links cover the tools and the first
    message: the start many conversations share (an agent's tools and system prompt)."""
    links: list[PrefixLink] = []
    hasher = hashlib.blake2b(digest_size=8)
    chars = shared = 0
    last: PrefixLink | None = None
    for number, piece in enumerate(_pieces(request)):
        if number == (2 if request.tools else 1):
            shared = len(links)
        for start in range(0, max(len(piece), 1), BLOCK_CHARS):
            block = piece[start : start + BLOCK_CHARS]
            hasher.update(_SEP + block.encode("utf-8", "surrogatepass"))
            chars += len(block)
            if len(links) < MAX_LINKS - 1:
                links.append((hasher.hexdigest(), chars))
                last = None
            else:
                last = hasher.hexdigest(), chars
    if last is not None:
        links.append(last)
    return tuple(links), shared or len(links)


def _pieces(request: ChatCompletionRequest) -> Iterator[str]:
    """The canonical content in order: the tools (one piece), then one piece per message."""
    if request.tools:
        yield "tools\x1f" + "\x1f".join(t.model_dump_json() for t in request.tools)
    for message in request.messages:
        yield _message(message)


def _message(message: ChatMessage) -> str:
    calls = message.tool_calls or ()
    parts = [message.role, message.text(), message.tool_call_id or ""]
    parts.extend(f"{c.id}\x1d{c.function.name}\x1d{c.function.arguments}" for c in calls)
    return "\x1f".join(parts)
