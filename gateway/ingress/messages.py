"""Anthropic Messages ⇄ the gateway's chat request and answer, and the native path.

Request (Messages → chat): ``system`` (a string or text blocks) becomes the system message;
``text`` blocks become text, ``image`` blocks (base64 or url source) image parts,
``tool_use`` blocks the assistant's ``tool_calls`` (input serialised to JSON) and
``tool_result`` blocks ``tool`` messages (before the rest of their user turn, as Anthropic
orders them; ``is_error`` results are prefixed ``Error:``); ``thinking`` blocks are
skipped. ``tools`` (``input_schema`` → ``parameters``), ``tool_choice`` (``auto`` /
``any`` → ``required`` / ``tool`` → a named function / ``none``;
``disable_parallel_tool_use`` → ``parallel_tool_calls: false``), ``stop_sequences``,
``temperature``, ``top_p``, ``top_k``, ``max_tokens`` and ``metadata.user_id`` (→ ``user``)
map one to one.

Answer (chat → Messages): text becomes one ``text`` block, each tool call a ``tool_use``
block (arguments parsed back into ``input``); ``finish_reason`` ``stop`` → ``end_turn``
(``stop_sequence`` when the backend says which stop string ended it), ``length`` →
``max_tokens``, ``tool_calls`` → ``tool_use``. What the two formats call by different
names is mapped in :mod:`gateway.protocol.messages_codec`, which the ``anthropic`` backend
reads for the opposite direction.

A deployment whose backend speaks Messages itself (``capabilities.native_messages``: the
``anthropic`` backend) gets the client's request as it came, with only ``model`` (and
``stream``) set to the deployment's; its answer and events are passed back untouched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.errors import InvalidRequestError
from gateway.protocol import ChatCompletion, ChatCompletionRequest, ChatMessage, Usage
from gateway.protocol.chat import ContentPart, FunctionCall, ImageURL, ToolCall
from gateway.protocol.messages import Block, MessageParam, MessageResponse, MessagesRequest
from gateway.protocol.messages_codec import (
    chat_tool,
    chat_tool_choice,
    image_url,
    message_usage,
    stop_reason,
    tool_arguments,
    tool_input,
)


@dataclass(frozen=True)
class NativeMessage:
    """A whole answer of a deployment that speaks Messages itself, ready to be written."""

    body: bytes
    usage: Usage


@dataclass
class MessagesCall:
    """One ``POST /v1/messages``: the request and the chat request it becomes elsewhere."""

    body: MessagesRequest
    chat: ChatCompletionRequest
    streams: dict[str, Any] = field(default_factory=dict)

    @property
    def model(self) -> str:
        return self.body.model

    @property
    def stream(self) -> bool:
        return bool(self.body.stream)

    def include_usage(self) -> bool:
        return False

    def chat_request(self) -> ChatCompletionRequest:
        return self.chat

    def native(self, *, stream: bool) -> dict[str, Any]:
        """The request as a Messages upstream gets it: as it came (the backend sets its
        own ``model``)."""
        body = self.body.model_dump(mode="json", by_alias=True, exclude_unset=True)
        body.pop("stream", None)
        if stream:
            body["stream"] = True
        return body


def to_chat(body: MessagesRequest, *, stream: bool | None = None) -> ChatCompletionRequest:
    """The chat request for a Messages request."""
    messages: list[ChatMessage] = []
    system = body.system_text()
    if system:
        messages.append(ChatMessage(role="system", content=system))
    for i, message in enumerate(body.messages):
        messages.extend(_turn(message, i))
    if not messages:
        raise InvalidRequestError("messages: at least one message is required", param="messages")
    fields: dict[str, Any] = {
        "model": body.model,
        "messages": messages,
        "max_tokens": body.max_tokens,
        "stop": body.stop_sequences or None,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "stream": body.stream if stream is None else stream,
    }
    if body.top_k is not None:
        fields["top_k"] = body.top_k
    user = (body.metadata or {}).get("user_id")
    if isinstance(user, str):
        fields["user"] = user
    if body.tools:
        fields["tools"] = [
            chat_tool(tool.name, tool.description, tool.input_schema) for tool in body.tools
        ]
    choice = body.tool_choice
    if choice is not None:
        fields.update(_tool_choice(choice.type, choice.name, body))
        if choice.disable_parallel_tool_use:
            fields["parallel_tool_calls"] = False
    return ChatCompletionRequest(**fields)


def _turn(message: MessageParam, i: int) -> list[ChatMessage]:
    content = message.content
    if isinstance(content, str):
        return [ChatMessage(role=message.role, content=content)]
    if message.role == "assistant":
        return [_assistant(content, i)]
    out: list[ChatMessage] = []
    parts: list[ContentPart] = []
    for j, block in enumerate(content):
        if block.type == "tool_result":
            out.append(_tool_result(block, i, j))
        elif block.type == "text":
            parts.append(ContentPart(type="text", text=block.text or ""))
        elif block.type == "image":
            parts.append(_image(block, i, j))
        elif block.type not in ("thinking", "redacted_thinking"):
            raise _unsupported(block, i, j)
    if parts:
        if all(p.type == "text" for p in parts):
            out.append(ChatMessage(role="user", content="".join(p.text or "" for p in parts)))
        else:
            out.append(ChatMessage(role="user", content=parts))
    return out


def _assistant(content: list[Block], i: int) -> ChatMessage:
    texts: list[str] = []
    calls: list[ToolCall] = []
    for j, block in enumerate(content):
        if block.type == "text":
            texts.append(block.text or "")
        elif block.type == "tool_use":
            if not block.id or not block.name:
                raise InvalidRequestError(
                    "tool_use blocks need an id and a name", param=f"messages[{i}].content[{j}]"
                )
            function = FunctionCall(name=block.name, arguments=tool_arguments(block.input))
            calls.append(ToolCall(id=block.id, function=function))
        elif block.type not in ("thinking", "redacted_thinking"):
            raise _unsupported(block, i, j)
    text = "".join(texts)
    return ChatMessage(role="assistant", content=text or None, tool_calls=calls or None)


def _tool_result(block: Block, i: int, j: int) -> ChatMessage:
    if not block.tool_use_id:
        raise InvalidRequestError(
            "tool_result blocks need a tool_use_id",
            param=f"messages[{i}].content[{j}].tool_use_id",
        )
    content = block.content
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:
        text = "".join(b.text or "" for b in content if b.type == "text")
    if block.is_error:
        text = f"Error: {text}"
    return ChatMessage(role="tool", tool_call_id=block.tool_use_id, content=text)


def _image(block: Block, i: int, j: int) -> ContentPart:
    source = block.source
    param = f"messages[{i}].content[{j}].source"
    if source is None:
        raise InvalidRequestError("image blocks need a source", param=param)
    return ContentPart(type="image_url", image_url=ImageURL(url=image_url(source, param)))


def _unsupported(block: Block, i: int, j: int) -> InvalidRequestError:
    return InvalidRequestError(
        f"content blocks of type '{block.type}' are not supported by this gateway",
        param=f"messages[{i}].content[{j}].type",
    )


def _tool_choice(kind: str, name: str | None, body: MessagesRequest) -> dict[str, Any]:
    if kind == "tool":
        if not name:
            raise InvalidRequestError(
                "tool_choice of type tool needs a name", param="tool_choice.name"
            )
        if not any(tool.name == name for tool in body.tools or []):
            raise InvalidRequestError(
                f"tool_choice names the tool '{name}', which is not in tools",
                param="tool_choice.name",
            )
    elif kind in ("any", "auto") and not body.tools:
        return {}
    return {"tool_choice": chat_tool_choice(kind, name)}


# --- answers ----------------------------------------------------------------------------


def message_answer(answer: ChatCompletion) -> MessageResponse:
    """The ``message`` for a whole chat answer."""
    choice = answer.choices[0]
    content: list[dict[str, Any]] = []
    if choice.message.content:
        content.append({"type": "text", "text": choice.message.content})
    for call in choice.message.tool_calls or []:
        content.append(
            {
                "type": "tool_use",
                "id": call.id,
                "name": call.function.name,
                "input": tool_input(call.function.arguments),
            }
        )
    matched = (choice.model_extra or {}).get("stop_reason")
    reason = stop_reason(choice.finish_reason)
    sequence = matched if reason == "end_turn" and isinstance(matched, str) else None
    return MessageResponse(
        model=answer.model,
        content=content,
        stop_reason="stop_sequence" if sequence is not None else reason,
        stop_sequence=sequence,
        usage=message_usage(answer.usage),
    )
