"""A Gemini ``generateContent`` request → the gateway's chat request, and the native path.

The body is read once, as sent. A deployment whose backend speaks the Gemini API itself
(``gemini`` in ``capabilities.native_apis``) gets those bytes as they came (the model is
in the path, which the backend writes). Every other deployment gets a chat request,
translated when it is chosen; routing and admission read a lenient translation that never
refuses (:meth:`GeminiCall.routed`).

The translation loses nothing silently: each field maps, or is refused with a 400 naming
it as Gemini does (``contents[0].parts[1].fileData``), or is dropped and named in
``x-shunter-dropped``: ``safetySettings`` always (thresholds of Google's own content
filters, which no other upstream has), Google's hosted tools (``googleSearch``,
``codeExecution``, ``urlContext``...) under the ``responses.hosted_tools`` setting
(``drop``; ``refuse`` makes them a 400). Turns: :mod:`~.turns`; tools, tool choice and
the generation settings: :mod:`~.settings`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from gateway.apis.gemini.names import gemini_names
from gateway.apis.gemini.protocol import GenerateContentRequest
from gateway.apis.gemini.settings import generation, tooling
from gateway.apis.gemini.turns import Said, TurnReader, refuse
from gateway.errors import InvalidRequestError
from gateway.protocol import ChatCompletionRequest, ChatMessage
from gateway.protocol.fieldnames import FieldNames, Site
from gateway.protocol.rawbody import RawBody
from gateway.protocol.validation import request_error

NATIVE = "gemini"
_KNOWN = frozenset(
    {
        "model",
        "contents",
        "systemInstruction",
        "system_instruction",
        "tools",
        "toolConfig",
        "tool_config",
        "generationConfig",
        "generation_config",
        "safetySettings",
        "safety_settings",
        "cachedContent",
        "cached_content",
    }
)


@dataclass(frozen=True)
class Translated:
    """A Gemini request as a chat request: what it dropped, and the chat request's field
    names as the Gemini request names them."""

    chat: ChatCompletionRequest
    dropped: list[str]
    names: FieldNames


@dataclass
class GeminiCall:
    """One ``generateContent`` / ``streamGenerateContent`` / ``countTokens`` call: the body
    as sent, the model of its path, how it streams, and the chat requests it becomes.
    ``hosted``: what Google's hosted tools get (``drop`` or ``refuse``)."""

    raw: RawBody
    body: GenerateContentRequest
    model: str
    stream: bool = False
    sse: bool = False
    hosted: str = "drop"
    names: FieldNames | None = None
    _routed: ChatCompletionRequest | None = field(default=None, repr=False)

    @classmethod
    def read(cls, raw: bytes, model: str, **how: Any) -> GeminiCall:
        """The call for ``raw``; a 400 naming the field when it is not a request."""
        body = RawBody.read(raw)
        try:
            parsed = GenerateContentRequest.model_validate(body.data)
        except ValidationError as exc:
            raise request_error(exc) from exc
        return cls(body, parsed, model, **how)

    def routed(self) -> ChatCompletionRequest:
        """The chat request routing, admission and the cache read: translated leniently."""
        if self._routed is None:
            try:
                done = translate(self.body, self.model, stream=self.stream, lenient=True)
                self._routed, self.names = done.chat, done.names
            except InvalidRequestError:  # malformed for chat: a native upstream may judge it
                self._routed = _bare(self.body, self.model)
                self.names = gemini_names([], [])
        return self._routed

    def translated(self, *, files: bool = False) -> Translated:
        """The chat request for a deployment (``files``: it reads ``file`` parts), what it
        dropped and its field names (a 400 naming a field it can neither map nor drop)."""
        return translate(self.body, self.model, stream=self.stream, files=files, hosted=self.hosted)

    def native(self) -> bytes:
        """The body a Gemini upstream gets: as sent."""
        return self.raw.text.encode("utf-8")


def translate(
    body: GenerateContentRequest,
    model: str,
    *,
    stream: bool = False,
    lenient: bool = False,
    files: bool = False,
    hosted: str = "drop",
) -> Translated:
    """The chat request for ``body``, for ``model`` (see the module docstring)."""
    dropped: set[str] = set()
    _top_level(body, lenient, dropped)
    reader = TurnReader(lenient=lenient, files=files)
    said: list[Said] = reader.system(body.system_instruction)
    for i, content in enumerate(body.contents):
        said.extend(reader.content(content, i))
    fields: dict[str, Any] = {
        "model": model,
        "messages": [message for message, _ in said],
        "stream": stream,
    }
    tool_sites: list[Site] = []
    fields.update(tooling(body, lenient, hosted, dropped, tool_sites))
    fields.update(generation(body.generation_config, lenient))
    names = gemini_names([origin for _, origin in said], tool_sites)
    try:
        chat = ChatCompletionRequest(**fields)
    except ValidationError as exc:
        error = request_error(exc)
        names.rename(error)
        raise error from exc
    return Translated(chat, sorted(dropped), names)


def _top_level(body: GenerateContentRequest, lenient: bool, dropped: set[str]) -> None:
    for name in (body.model_extra or {}).keys() - _KNOWN:
        refuse(name, "this field has no counterpart outside Google's API", lenient)
    if body.cached_content is not None:
        refuse(
            "cachedContent",
            "cached contents live on Google's servers; only a deployment that speaks the "
            "Gemini API itself can use them",
            lenient,
        )
    if body.safety_settings is not None:
        dropped.add("safetySettings")


def _bare(body: GenerateContentRequest, model: str) -> ChatCompletionRequest:
    """A request that even a lenient translation cannot read, as one user message of its
    JSON: enough for routing to weigh it."""
    text = json.dumps([c.model_dump(mode="json") for c in body.contents], ensure_ascii=False)
    return ChatCompletionRequest(model=model, messages=[ChatMessage(role="user", content=text)])
