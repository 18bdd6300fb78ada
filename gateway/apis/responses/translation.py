"""OpenAI Responses ⇄ the gateway's chat request and answer.

Request (Responses → chat): ``instructions`` become the first system message, then the
stored conversation of ``previous_response_id`` (its input and output, not its
instructions, as OpenAI does), then ``input`` (:mod:`gateway.apis.responses.input`).
``tools`` (:mod:`gateway.apis.responses.tools`), ``tool_choice``, ``parallel_tool_calls``,
``max_output_tokens``, ``temperature``, ``top_p``, ``presence_penalty``,
``frequency_penalty``, ``reasoning.effort`` (→ ``reasoning_effort``), ``text.format`` (→
``response_format``), ``text.verbosity`` (→ ``verbosity``), ``user``,
``safety_identifier``, ``prompt_cache_key`` and ``service_tier`` map one to one. The items
of a ``conversation`` come before ``input`` as a stored conversation does; ``background``,
``prompt`` (a stored template) and ``top_logprobs`` above 0 are refused.

Where each chat message and tool came from is kept (:mod:`gateway.apis.responses.names`),
so that a refusal of the chat request names the field as the client sent it.

Answer (chat → Responses): the upstream's reasoning (``reasoning_content``) becomes a
``reasoning`` item, text one ``message`` output item, each tool call a ``function_call``
(or ``custom_tool_call``) item; ``finish_reason`` ``length`` makes the response
``incomplete`` (``max_output_tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.apis.responses.conversations import ConversationStore
from gateway.apis.responses.input import input_messages, refuse_orphan_outputs
from gateway.apis.responses.names import (
    field_origin,
    response_names,
    tool_sites,
)
from gateway.apis.responses.store import ResponseStore
from gateway.apis.responses.tools import (
    ToolMap,
    chat_tool_fields,
    custom_input,
    tool_echo,
)
from gateway.errors import InvalidRequestError
from gateway.hosted.run import HostedRun
from gateway.protocol import ChatCompletion, ChatCompletionRequest, ChatMessage, Usage, now
from gateway.protocol.fieldnames import FieldNames
from gateway.protocol.responses import (
    CustomToolCallItem,
    FunctionCallItem,
    IncompleteDetails,
    ItemStatus,
    OutputItem,
    OutputMessage,
    OutputText,
    ReasoningItem,
    ReasoningText,
    ResponseObject,
    ResponsesRequest,
    ResponseUsage,
    TextFormat,
)


@dataclass
class ResponsesCall:
    """One ``POST /v1/responses``: the request, the chat request it became, and what the
    stored conversation needs (``history``: the chat messages before this turn, ``resumed``
    when they were at hand without the store; ``transcript``: all of them once the
    response is finished)."""

    body: ResponsesRequest
    owner: str
    response_id: str
    history: list[dict[str, Any]] = field(default_factory=list)
    resumed: bool = False
    transcript: list[dict[str, Any]] | None = None
    turn: list[ChatMessage] = field(default_factory=list)
    chat: ChatCompletionRequest | None = None
    names: FieldNames | None = None
    """The chat request's field names as the request names them, once it is translated."""
    tools: ToolMap = field(default_factory=ToolMap)
    store: ResponseStore | None = None
    conversations: ConversationStore | None = None
    created_at: int = field(default_factory=now)
    body_bytes: int = 0
    session: dict[str, str] | None = None
    """The session this turn belongs to (``id``, ``label``), kept with the stored response;
    before admission, the session of the response it continues."""
    earlier: list[dict[str, Any]] = field(default_factory=list)
    """The output items of ``previous_response_id``'s response (hosted tools read their
    listings and approval requests there)."""
    produced: list[dict[str, Any]] = field(default_factory=list)
    """The output items of this response once it is finished (a WebSocket turn that
    continues from it reads them as ``earlier``)."""
    leading: list[OutputItem] = field(default_factory=list)
    """Items the gateway added before the model's last answer (hosted tool calls)."""
    listed: list[OutputItem] = field(default_factory=list)
    """The listings of the hosted servers made for this request (its first items)."""
    hosted: HostedRun | None = None
    """The gateway's tool loop of the request (:mod:`gateway.hosted.run`), when it has
    hosted tools."""
    stopped: str | None = None
    """Why the gateway ended the response early (``max_tool_calls``), if it did."""
    generate: bool = True
    """False for a turn prepared without the model (a WebSocket's ``generate: false``,
    Codex's warm-up): its input may be empty."""

    @property
    def model(self) -> str:
        return self.body.model

    @property
    def conversation_id(self) -> str | None:
        """The id of the request's ``conversation`` (given as the id or ``{"id": ...}``)."""
        given = self.body.conversation
        named = given.get("id") if isinstance(given, dict) else given
        return named if isinstance(named, str) else None

    @property
    def stream(self) -> bool:
        return bool(self.body.stream)

    def include_usage(self) -> bool:
        return False

    def chat_request(self) -> ChatCompletionRequest:
        assert self.chat is not None, "the call is prepared before it is served"
        return self.chat


_PASSED = ("user", "presence_penalty", "frequency_penalty", "safety_identifier")
_PASSED_IF_SET = ("prompt_cache_key", "service_tier")
_EXTRAS = ("seed", "stop", "top_k")


def to_chat(
    body: ResponsesRequest,
    history: list[dict[str, Any]],
    tools: ToolMap,
    *,
    empty_ok: bool = False,
) -> tuple[ChatCompletionRequest, list[ChatMessage], FieldNames]:
    """The chat request for a Responses request after ``history`` (stored chat messages),
    the chat messages of this turn's input, and the chat request's field names as the
    Responses request names them; ``tools``: the request's, mapped (``empty_ok``: a turn
    that runs no model may have no messages)."""
    names = response_names()
    messages: list[ChatMessage] = []
    if body.instructions:
        messages.append(ChatMessage(role="system", content=body.instructions))
        names.messages.append(field_origin("instructions"))
    messages.extend(ChatMessage.model_validate(m) for m in history)
    stored = "previous_response_id" if body.previous_response_id else "conversation"
    names.messages.extend(field_origin(stored) for _ in history)
    turn = input_messages(body.input, tools, names.messages, report=True)
    messages.extend(turn)
    refuse_orphan_outputs(body.input, messages)
    if not messages:
        if not empty_ok:
            raise InvalidRequestError("The input is empty.", param="input")
        # never sent: only a chat request's shape for the spine (no message is stored)
        messages = [ChatMessage(role="user", content="")]
    fields: dict[str, Any] = {
        "model": body.model,
        "messages": messages,
        "max_tokens": body.max_output_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "parallel_tool_calls": body.parallel_tool_calls,
        "stream": body.stream,
        **{name: getattr(body, name) for name in _PASSED},
    }
    fields.update({k: getattr(body, k) for k in _PASSED_IF_SET if getattr(body, k) is not None})
    if body.reasoning is not None and body.reasoning.effort is not None:
        fields["reasoning_effort"] = body.reasoning.effort
    fields.update(chat_tool_fields(body.tool_choice, tools))
    names.tools = tool_sites(fields.get("tools") or [], tools)
    fmt = body.text.format if body.text is not None else None
    if fmt is not None and fmt.type != "text":
        fields["response_format"] = _response_format(fmt.model_dump(by_alias=True))
    if body.text is not None and body.text.verbosity is not None:
        fields["verbosity"] = body.text.verbosity
    extras = {k: v for k, v in (body.model_extra or {}).items() if k in _EXTRAS}
    return ChatCompletionRequest(**fields, **extras), turn, names


def refuse_unserved(body: ResponsesRequest) -> None:
    """Fields asking for what this gateway does not do, or not together: a 400 naming
    the field."""
    if body.background:
        raise InvalidRequestError(
            "Background responses are not supported by this gateway.", param="background"
        )
    if body.top_logprobs:
        raise InvalidRequestError(
            "Log probabilities are not supported by this gateway on /v1/responses.",
            param="top_logprobs",
        )
    if (body.model_extra or {}).get("prompt") is not None:
        raise InvalidRequestError(
            "Stored prompt templates are not supported by this gateway; send instructions "
            "and input.",
            param="prompt",
        )
    if body.conversation is not None and body.previous_response_id is not None:
        raise InvalidRequestError(
            "previous_response_id cannot be used together with conversation.",
            param="conversation",
        )


def _response_format(fmt: dict[str, Any]) -> dict[str, Any]:
    if fmt["type"] == "json_object":
        return {"type": "json_object"}
    if fmt.get("schema") is None:
        raise InvalidRequestError(
            "Missing required parameter: 'text.format.schema'.", param="text.format.schema"
        )
    schema = {k: fmt[k] for k in ("name", "description", "schema", "strict") if fmt.get(k)}
    return {"type": "json_schema", "json_schema": {"name": "response", **schema}}


# --- answers ----------------------------------------------------------------------------


def _format_echo(fmt: TextFormat) -> dict[str, Any]:
    """``text.format`` as the response echoes it: a ``json_schema`` format with each of its
    fields, as OpenAI writes them (``description`` null, ``strict`` false when not given)."""
    echoed = fmt.model_dump(by_alias=True, exclude_none=True)
    if fmt.type == "json_schema":
        echoed.update(description=fmt.description, schema=fmt.schema_, strict=bool(fmt.strict))
    return echoed


def response_object(call: ResponsesCall, model: str | None = None, **fields: Any) -> ResponseObject:
    """The response object of ``call`` with its request's settings echoed; ``model``: the
    model that answered (the public name the client asked for until one has)."""
    body = call.body
    fmt = body.text.format if body.text is not None and body.text.format is not None else None
    text = {"format": _format_echo(fmt)} if fmt else None
    echoed: dict[str, Any] = {
        "id": call.response_id,
        "created_at": call.created_at,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "model": model or body.model,
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "previous_response_id": body.previous_response_id,
        "store": body.store is not False,
        "tool_choice": body.tool_choice if body.tool_choice is not None else "auto",
        "tools": tool_echo(body.tools or []),
        "user": body.user,
        "metadata": body.metadata or {},
        "max_tool_calls": body.max_tool_calls,
        "safety_identifier": body.safety_identifier,
        "prompt_cache_key": body.prompt_cache_key,
        "reasoning": _reasoning_echo(body),
        **{k: getattr(body, k) for k in _DEFAULTED if getattr(body, k) is not None},
    }
    if text is not None:
        echoed["text"] = text
    if call.conversation_id is not None:
        echoed["conversation"] = {"id": call.conversation_id}
    return ResponseObject(**{**echoed, **fields})


# echoed when the request set them, else the response object's defaults (OpenAI's)
_DEFAULTED = (
    "temperature",
    "top_p",
    "presence_penalty",
    "frequency_penalty",
    "top_logprobs",
    "service_tier",
)


def _reasoning_echo(body: ResponsesRequest) -> dict[str, Any]:
    given = body.reasoning
    if given is None:
        return {"effort": None, "summary": None}
    return {"effort": given.effort, "summary": given.summary or given.generate_summary}


def completed(call: ResponsesCall, answer: ChatCompletion) -> ResponseObject:
    """The finished response for a whole chat answer."""
    choice = answer.choices[0]
    output: list[OutputItem] = list(call.leading)
    status: ItemStatus = (
        "incomplete" if choice.finish_reason in ("length", "content_filter") else "completed"
    )
    reasoning = reasoning_of(choice.message)
    if reasoning:
        output.append(ReasoningItem(status=status, content=[ReasoningText(text=reasoning)]))
    if choice.message.content:
        text = OutputText(text=choice.message.content)
        output.append(OutputMessage(status=status, content=[text]))
    for tool_call in choice.message.tool_calls or []:
        fn = tool_call.function
        output.append(tool_call_item(call.tools, tool_call.id, fn.name, fn.arguments, status))
    ended = call.stopped or choice.finish_reason
    return finished(call, output, ended, answer.usage, answer.model)


def reasoning_of(message: Any) -> str:
    """The upstream's reasoning in a chat message or delta (``reasoning_content``, or
    ``reasoning`` as some servers name it)."""
    given = message.reasoning_content or (message.model_extra or {}).get("reasoning")
    return given if isinstance(given, str) else ""


def tool_call_item(
    tools: ToolMap, call_id: str, flat: str, arguments: str, status: ItemStatus, **ids: str
) -> FunctionCallItem | CustomToolCallItem:
    """The output item of the upstream's call of ``flat``: a ``custom_tool_call`` for a
    custom tool, a ``function_call`` (with its ``namespace``) otherwise."""
    named = tools.of(flat)
    if named.custom:
        given = custom_input(arguments)
        return CustomToolCallItem(
            status=status,
            call_id=call_id,
            name=named.name,
            namespace=named.namespace,
            input=given,
            **ids,
        )
    return FunctionCallItem(
        status=status,
        call_id=call_id,
        name=named.name,
        namespace=named.namespace,
        arguments=arguments,
        **ids,
    )


def finished(
    call: ResponsesCall,
    output: list[OutputItem],
    finish_reason: str | None,
    usage: Usage | None,
    model: str | None = None,
) -> ResponseObject:
    """The response once generation ended: status, incomplete details, usage, and the
    model that answered."""
    fields: dict[str, Any] = {"output": output, "usage": response_usage(usage)}
    if finish_reason == "length":
        fields.update(status="incomplete", incomplete_details=_incomplete("max_output_tokens"))
    elif finish_reason in ("content_filter", "max_tool_calls"):
        fields.update(status="incomplete", incomplete_details=_incomplete(finish_reason))
    else:
        fields.update(status="completed", completed_at=now())
    return response_object(call, model, **fields)


def _incomplete(reason: str) -> IncompleteDetails:
    return IncompleteDetails.model_validate({"reason": reason})


def response_usage(usage: Usage | None) -> ResponseUsage:
    if usage is None:
        return ResponseUsage.of(0, 0)
    details = usage.prompt_tokens_details
    cached = details.cached_tokens if details is not None else 0
    return ResponseUsage.of(usage.prompt_tokens, usage.completion_tokens, cached)


def dump_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    return [m.model_dump(mode="json", exclude_none=True) for m in messages]
