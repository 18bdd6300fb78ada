"""Gemini ``contents`` (and ``systemInstruction``) as chat messages, each with where it
came from.

* ``user`` turns (and ``function`` turns, an older form of a turn of function
  responses): ``text`` parts → text (a turn of text only: one string, its parts
  joined by a blank line); ``inlineData`` images → ``image_url`` data URLs, WAV and MP3
  audio → ``input_audio``, PDFs → ``file`` parts where the deployment reads them;
  ``functionResponse`` parts → ``tool`` messages (before the rest of the turn), whose text
  is the ``response`` object as JSON;
* ``model`` turns: text → the assistant's content (the parts of one answer, joined as they
  are: a stream's pieces); ``functionCall`` parts → ``tool_calls``;
* ids: a ``functionCall`` without an ``id`` gets ``call_<turn>_<part>``; a
  ``functionResponse`` without one answers the oldest unanswered call of its name;
* ``thought`` parts (the model's reasoning, shown back) are left out, as chat takes no
  reasoning back, and so is a ``thoughtSignature`` (only Google's models read one);
* ``fileData`` (a file on Google's servers), ``executableCode``, ``codeExecutionResult``
  and any other part are refused by name.
"""

from __future__ import annotations

import json
from collections import defaultdict, deque

from gateway.apis.gemini.names import CALL, RESPONSE, content_origin, part_site, system_origin
from gateway.apis.gemini.protocol import Content, Part
from gateway.errors import InvalidRequestError
from gateway.protocol import ChatMessage
from gateway.protocol.chat import ContentPart, FunctionCall, ImageURL, ToolCall
from gateway.protocol.fieldnames import Origin, Site

Said = tuple[ChatMessage, Origin]
"""A chat message of the translation, and where it came from."""

_AUDIO = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/mp3": "mp3", "audio/mpeg": "mp3"}
_PART_FIELDS = frozenset({"thoughtSignature", "thought_signature"})
_ROLES = {"user": "user", None: "user", "function": "user", "model": "assistant"}


def refuse(param: str, why: str, lenient: bool) -> None:
    """A 400 naming ``param`` (nothing for a lenient translation)."""
    if not lenient:
        raise InvalidRequestError(f"{param}: {why}.", param=param)


class TurnReader:
    """Reads one request's turns in order (calls and their responses pair up across them)."""

    def __init__(self, *, lenient: bool, files: bool) -> None:
        self.lenient = lenient
        self.files = files
        self._unanswered: dict[str, deque[str]] = defaultdict(deque)

    def system(self, content: Content | None) -> list[Said]:
        if content is None:
            return []
        texts = []
        for j, part in enumerate(content.parts):
            if part.text is None or part.thought:
                param = f"systemInstruction.parts[{j}]"
                refuse(param, "a system instruction takes text parts only", self.lenient)
                continue
            texts.append(part.text)
        if not texts:
            return []
        return [(ChatMessage(role="system", content="\n\n".join(texts)), system_origin())]

    def content(self, content: Content, i: int) -> list[Said]:
        role = _ROLES.get(content.role)
        if role is None:
            why = f"'{content.role}' is not a role (user or model)"
            refuse(f"contents[{i}].role", why, self.lenient)
            role = "user"
        if not content.parts:
            refuse(f"contents[{i}].parts", "a content needs at least one part", self.lenient)
            return []
        if role == "assistant":
            return self._model(content.parts, i)
        return self._user(content.parts, i)

    def _user(self, parts: list[Part], i: int) -> list[Said]:
        said: list[Said] = []
        chat: list[ContentPart] = []
        sites: list[Site | None] = []
        for j, part in enumerate(parts):
            param = f"contents[{i}].parts[{j}]"
            if not self._plain(part, param):
                continue
            if part.function_response is not None:
                said.append(self._response(part, i, j))
            elif part.function_call is not None:
                refuse(f"{param}.functionCall", "only a model turn calls functions", self.lenient)
            else:
                piece = self._piece(part, param)
                if piece is not None:
                    chat.append(piece)
                    sites.append(part_site(i, j))
        if chat:
            if all(p.type == "text" for p in chat):
                text = "\n\n".join(p.text or "" for p in chat)
                message = ChatMessage(role="user", content=text)
            else:
                message = ChatMessage(role="user", content=chat)
            said.append((message, content_origin(i, sites)))
        return said

    def _model(self, parts: list[Part], i: int) -> list[Said]:
        texts: list[str] = []
        calls: list[ToolCall] = []
        sites: list[Site] = []
        for j, part in enumerate(parts):
            param = f"contents[{i}].parts[{j}]"
            if not self._plain(part, param):
                continue
            call = part.function_call
            if call is not None:
                call_id = call.id or f"call_{i}_{j}"
                self._unanswered[call.name].append(call_id)
                arguments = json.dumps(call.args or {}, ensure_ascii=False)
                calls.append(
                    ToolCall(id=call_id, function=FunctionCall(name=call.name, arguments=arguments))
                )
                sites.append(part_site(i, j, CALL))
            elif part.text is not None:
                texts.append(part.text)
            else:
                why = "a model turn takes text and functionCall parts only"
                refuse(_kind(part, param), why, self.lenient)
        text = "".join(texts) or None
        message = ChatMessage(role="assistant", content=text, tool_calls=calls or None)
        origin = Origin(content_origin(i).site, calls=sites)
        return [(message, origin)]

    def _plain(self, part: Part, param: str) -> bool:
        """Whether ``part`` is to be read: not reasoning shown back, no field of its own
        that chat cannot carry (refused by name)."""
        if part.thought:
            return False
        for name in (part.model_extra or {}).keys() - _PART_FIELDS:
            refuse(f"{param}.{name}", "chat upstreams take no such part", self.lenient)
            return False
        if part.file_data is not None:
            why = "files stored on Google's servers reach only Google's API; send inlineData"
            refuse(f"{param}.fileData", why, self.lenient)
            return False
        return True

    def _response(self, part: Part, i: int, j: int) -> Said:
        response = part.function_response
        assert response is not None
        waiting = self._unanswered[response.name]
        call_id = response.id
        if call_id is not None and call_id in waiting:
            waiting.remove(call_id)
        elif call_id is None and waiting:
            call_id = waiting.popleft()
        elif call_id is None:
            param = f"contents[{i}].parts[{j}].functionResponse.name"
            why = f"no earlier functionCall of '{response.name}' is left to answer"
            refuse(param, why, self.lenient)
            call_id = f"call_{i}_{j}"
        text = json.dumps(response.response or {}, ensure_ascii=False)
        message = ChatMessage(role="tool", tool_call_id=call_id, content=text)
        return message, Origin(part_site(i, j, RESPONSE))

    def _piece(self, part: Part, param: str) -> ContentPart | None:
        if part.text is not None:
            return ContentPart(type="text", text=part.text)
        blob = part.inline_data
        if blob is None:
            refuse(
                param,
                "a part needs text, inlineData, functionCall or functionResponse",
                self.lenient,
            )
            return None
        mime, url = blob.mime_type.lower(), f"data:{blob.mime_type};base64,{blob.data}"
        if mime.startswith("image/"):
            return ContentPart(type="image_url", image_url=ImageURL(url=url))
        if mime in _AUDIO:
            audio = {"data": blob.data, "format": _AUDIO[mime]}
            return ContentPart.model_validate({"type": "input_audio", "input_audio": audio})
        if mime == "application/pdf" and self.files:
            file = {"file_data": url, "filename": "document.pdf"}
            return ContentPart.model_validate({"type": "file", "file": file})
        why = (
            "this deployment reads no PDF files"
            if mime == "application/pdf"
            else f"inline data of type '{blob.mime_type}' has no chat counterpart"
        )
        refuse(f"{param}.inlineData", why, self.lenient)
        if self.lenient:  # routing weighs it as text
            return ContentPart(type="text", text=f"[{blob.mime_type}]")
        return None


def _kind(part: Part, param: str) -> str:
    """The name of ``part``'s field that is not text nor a call."""
    for name in ("inline_data", "function_response"):
        if getattr(part, name) is not None:
            return f"{param}.{'inlineData' if name == 'inline_data' else 'functionResponse'}"
    return param
