"""Which agent session a request belongs to.

A session is one conversation of one key. Its id comes from, first match wins:

1. a header: ``x-shunter-session``, ``session-id`` (Codex sends it), ``session_id``,
   ``x-session-id`` or ``x-claude-code-session-id`` (Claude Code sends it);
2. what the API's body says (:class:`SessionHint`, read by each endpoint): Responses'
   ``prompt_cache_key``, the session of the stored response ``previous_response_id``
   continues, its ``conversation``; chat's ``prompt_cache_key``; Messages'
   ``metadata.user_id`` as Claude Code writes it (``user_<hash>_account_<uuid>_session_<uuid>``,
   or the JSON string ``{"device_id": ..., "session_id": ...}`` of newer versions);
3. the conversation itself: a digest of the model, the system prompt and the first user
   message, which every turn of a conversation resends, so a multi-turn conversation with
   no id at all is still one session. A part over 32 K characters is read as its length,
   its first and its last 16 K characters: an agent's turn that resends a long history
   costs the same to name whatever its size.

Ids are scoped per key: the same id sent with two keys names two sessions.

For routing (a hint that keeps a session on one deployment)::

    session = session_of(key.id, header=..., hint=endpoint.session_hint(body), chat=routed)
    session.id    # opaque, stable, per key
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import orjson

from gateway.protocol import ChatCompletionRequest, ChatMessage

SESSION_HEADERS = (
    "x-shunter-session",
    "session-id",
    "session_id",
    "x-session-id",
    "x-claude-code-session-id",
)
LABEL_CHARS = 128  # what is kept of a client's id, for display
_SAMPLED_CHARS = 16_384
"""Characters read from each end of a long part of a derived session (see :func:`derived`);
parts up to twice this are read whole, as JSON, and keep the ids of earlier versions."""
_CLAUDE_SESSION = re.compile(r"_session_([0-9A-Za-z-]{8,64})$")


@dataclass(frozen=True)
class SessionHint:
    """What a request's body says of its session: where it was read (``prompt_cache_key``,
    ``previous_response_id``, ``conversation``, ``metadata.user_id``) and the id. A
    continued stored response carries its session's own ``id`` (``resolved``)."""

    source: str
    value: str
    resolved: str | None = None


@dataclass(frozen=True)
class SessionId:
    """One session of one key: ``id`` is opaque and stable (a digest that includes the
    key), ``label`` what to show (the client's id, bounded, or ``~`` and a digest for a
    derived one), ``source`` where it was found."""

    key_id: str
    id: str
    label: str
    source: str

    @property
    def scope(self) -> str:
        """The state scope of this session's books and limits."""
        return f"session:{self.key_id}:{self.id}"


def session_header(headers: Mapping[str, str]) -> str | None:
    """The first session header a client sent (see :data:`SESSION_HEADERS`); ``headers``
    by lower-case name."""
    for name in SESSION_HEADERS:
        value = headers.get(name)
        if value:
            return value
    return None


def session_of(
    key_id: str,
    *,
    header: str | None = None,
    hint: SessionHint | None = None,
    chat: ChatCompletionRequest | None = None,
) -> SessionId | None:
    """The session of a request of key ``key_id``: from its session ``header``, else the
    body's ``hint``, else derived from the conversation in ``chat``; ``None`` when there
    is nothing to go by (a text completion without an id)."""
    if header and header.strip():
        return _given(key_id, "header", header.strip())
    if hint is not None and hint.value:
        if hint.resolved is not None:
            return SessionId(key_id, hint.resolved, hint.value[:LABEL_CHARS], hint.source)
        return _given(key_id, hint.source, hint.value)
    if chat is not None:
        return derived(key_id, chat)
    return None


def derived(key_id: str, chat: ChatCompletionRequest) -> SessionId:
    """The session of a conversation without an id: its model, system prompt and first
    user message (what every later turn resends unchanged)."""
    system = [m for m in _leading(chat.messages, ("system", "developer"))]
    first_user = next((m for m in chat.messages if m.role == "user"), None)
    parts = [chat.model, *(_text(m) for m in system), _text(first_user) if first_user else ""]
    if any(len(part) > 2 * _SAMPLED_CHARS for part in parts):
        digest = _digest(key_id, "derived-sampled", _sampled(parts))
    else:
        digest = _digest(key_id, "derived", _json_list(parts))
    return SessionId(key_id, digest, f"~{digest[:12]}", "derived")


def claude_session(user_id: str | None) -> str | None:
    """The session id in Claude Code's ``metadata.user_id``: the legacy
    ``..._session_<uuid>`` string, or a JSON string holding ``session_id``."""
    if not user_id:
        return None
    if user_id.startswith("{"):
        try:
            data = json.loads(user_id)
        except ValueError:
            return None
        found = data.get("session_id") if isinstance(data, dict) else None
        return found if isinstance(found, str) and found else None
    match = _CLAUDE_SESSION.search(user_id)
    return match.group(1) if match else None


def _given(key_id: str, source: str, value: str) -> SessionId:
    # one id space per key, whatever field carried it: a client sending the same id in a
    # header and in prompt_cache_key means the same session
    return SessionId(key_id, _digest(key_id, "given", value), value[:LABEL_CHARS], source)


def _json_list(parts: list[str]) -> list[bytes]:
    """``json.dumps(parts, ensure_ascii=False)`` in UTF-8, byte for byte (a conversation
    keeps its derived id across versions), in pieces written by orjson: a 1 MB first
    message cost 4 ms in the standard library's encoder, and the pieces are hashed as
    they are, never joined."""
    try:
        pieces = [b"["]
        for part in parts:
            pieces += (orjson.dumps(part), b", ")
        if parts:
            pieces.pop()  # the last separator
        pieces.append(b"]")
        return pieces
    except orjson.JSONEncodeError:  # a lone surrogate, which orjson refuses
        return [json.dumps(parts, ensure_ascii=False).encode("utf-8", "surrogatepass")]


def _sampled(parts: list[str]) -> list[bytes]:
    """Each part as its length, its first and its last :data:`_SAMPLED_CHARS` characters,
    in UTF-8. Two conversations whose long parts agree in length, start and end are named
    alike (one session: the same affinity and limits); a part is never walked whole."""
    pieces: list[bytes] = []
    for part in parts:
        size = len(part)
        if size > 2 * _SAMPLED_CHARS:
            part = part[:_SAMPLED_CHARS] + part[-_SAMPLED_CHARS:]
        pieces += (f"{size}\0".encode(), part.encode("utf-8", "surrogatepass"), b"\0")
    return pieces


def _digest(key_id: str, kind: str, value: str | list[bytes]) -> str:
    """The first 32 hex digits of SHA-256 over ``key_id``, ``kind`` and ``value``, NUL apart
    (``value`` given as pieces of its UTF-8: fed as they are)."""
    hasher = hashlib.sha256(f"{key_id}\0{kind}\0".encode("utf-8", "surrogatepass"))
    if isinstance(value, str):
        hasher.update(value.encode("utf-8", "surrogatepass"))
    else:
        for piece in value:
            hasher.update(piece)
    return hasher.hexdigest()[:32]


def _leading(messages: Iterable[ChatMessage], roles: tuple[str, ...]) -> list[ChatMessage]:
    out = []
    for message in messages:
        if message.role not in roles:
            break
        out.append(message)
    return out


def _text(message: ChatMessage) -> str:
    if isinstance(message.content, list):
        return json.dumps([p.model_dump(mode="json", exclude_none=True) for p in message.content])
    return message.content or ""
