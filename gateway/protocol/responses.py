"""OpenAI's Responses API: the request, the response object and its output items.

Requests are read leniently, as chat requests are: input items are one model whose
``type`` says which fields matter (a message, a ``function_call``, a
``function_call_output``), so a client's extra fields never fail and the translation
(:mod:`gateway.apis.responses.translation`) names the offending field itself. Answers follow the
``Response`` schema of OpenAI's OpenAPI document: required keys always written, ``null``
where the schema allows it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, JsonValue

from gateway.protocol.common import Omitted, RequestModel, ResponseModel, item_id, now
from gateway.protocol.toolschema import ToolSchema


class InputPart(RequestModel):
    """One part of a message's content: ``input_text`` / ``output_text`` / ``input_image``."""

    type: str
    text: str | None = None
    image_url: str | None = None
    detail: Literal["auto", "low", "high"] | None = None
    file_id: str | None = None


class FunctionTool(RequestModel):
    """A tool of the request: ``function``, ``custom`` (one free-form string input,
    ``format`` its grammar), ``namespace`` (a named group of ``tools``), or a hosted tool
    (``web_search``...) that only OpenAI itself runs."""

    type: str
    name: str | None = None
    description: str | None = None
    parameters: ToolSchema | None = None
    strict: bool | None = None
    format: dict[str, JsonValue] | None = None
    tools: list[FunctionTool] | None = None


class InputItem(RequestModel):
    """One item of ``input``: a message (``type`` ``message`` or absent), a
    ``function_call`` / ``custom_tool_call`` the model made, the ``function_call_output`` /
    ``custom_tool_call_output`` answering it, a ``reasoning`` item, ``additional_tools``
    (more tools offered from this point of the conversation on), or the items of hosted
    MCP tools (``mcp_list_tools``, whose ``tools`` are the server's, ``mcp_call``,
    ``mcp_approval_request``, ``mcp_approval_response``)."""

    type: str = "message"
    role: Literal["user", "assistant", "system", "developer"] | None = None
    content: str | list[InputPart] | None = None
    call_id: str | None = None
    name: str | None = None
    namespace: str | None = None
    arguments: str | None = None
    input: str | None = None
    output: str | list[InputPart] | None = None
    # left to right: ``additional_tools`` carries tools of the request's kind; only what is
    # not one (an ``mcp_list_tools`` item's server tools) stays plain JSON
    tools: list[FunctionTool] | list[dict[str, JsonValue]] | None = Field(
        default=None, union_mode="left_to_right"
    )
    encrypted_content: str | None = None
    id: str | None = None
    status: str | None = None


class ReasoningParam(RequestModel):
    effort: str | None = None
    summary: str | None = None
    generate_summary: str | None = None


class TextFormat(RequestModel):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    description: str | None = None
    schema_: ToolSchema | None = Field(default=None, alias="schema")
    strict: bool | None = None


class TextParam(RequestModel):
    format: TextFormat | None = None
    verbosity: str | None = None


ResponseToolChoice = Literal["none", "auto", "required"] | dict[str, JsonValue]


class ResponsesRequest(RequestModel):
    """``POST /v1/responses``, fields in OpenAI-doc order."""

    model: str
    input: str | list[InputItem] = Field(default_factory=list)
    """Optional, as OpenAI's: a turn may only continue ``previous_response_id``."""
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: ResponseToolChoice | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    text: TextParam | None = None
    reasoning: ReasoningParam | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    store: bool | None = True
    previous_response_id: str | None = None
    conversation: str | dict[str, JsonValue] | None = None
    stream: bool | None = False
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    max_tool_calls: int | None = Field(default=None, ge=1)
    background: bool | None = None
    service_tier: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    truncation: Literal["auto", "disabled"] | None = None


# --- answers ----------------------------------------------------------------------------


class OutputText(ResponseModel):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = Field(default_factory=list)
    logprobs: list[Any] = Field(default_factory=list)


ItemStatus = Literal["in_progress", "completed", "incomplete"]


class OutputMessage(ResponseModel):
    id: str = Field(default_factory=lambda: item_id("msg"))
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    status: ItemStatus = "completed"
    content: list[OutputText]


class FunctionCallItem(ResponseModel):
    id: str = Field(default_factory=lambda: item_id("fc"))
    type: Literal["function_call"] = "function_call"
    status: ItemStatus = "completed"
    call_id: str
    name: str
    namespace: Omitted[str] = None
    arguments: str


class CustomToolCallItem(ResponseModel):
    """A call of a ``custom`` (free-form) tool: its ``input`` is the text itself."""

    id: str = Field(default_factory=lambda: item_id("ctc"))
    type: Literal["custom_tool_call"] = "custom_tool_call"
    status: ItemStatus = "completed"
    call_id: str
    name: str
    namespace: Omitted[str] = None
    input: str


class ReasoningText(ResponseModel):
    type: Literal["reasoning_text"] = "reasoning_text"
    text: str


class ReasoningItem(ResponseModel):
    """The model's reasoning, as the upstream gave it (its full text, no summary)."""

    id: str = Field(default_factory=lambda: item_id("rs"))
    type: Literal["reasoning"] = "reasoning"
    status: ItemStatus = "completed"
    summary: list[Any] = Field(default_factory=list)
    content: list[ReasoningText] = Field(default_factory=list)


class McpListedTool(ResponseModel):
    """One tool of an ``mcp_list_tools`` item, as its server describes it."""

    name: str
    description: str | None = None
    input_schema: dict[str, Any]
    annotations: dict[str, Any] | None = None


class McpListToolsItem(ResponseModel):
    """The tools of an MCP server the gateway listed for the model (``error``: why it
    could not)."""

    id: str = Field(default_factory=lambda: item_id("mcpl"))
    type: Literal["mcp_list_tools"] = "mcp_list_tools"
    server_label: str
    tools: list[McpListedTool] = Field(default_factory=list)
    error: str | None = None


McpCallStatus = Literal["in_progress", "completed", "incomplete", "calling", "failed"]


class McpCallItem(ResponseModel):
    """A tool call the gateway ran on an MCP server: ``output`` its result's text,
    ``error`` why it failed (``mcp_tool_execution_error``: the tool said so;
    ``http_error``: the server could not be reached or refused)."""

    id: str = Field(default_factory=lambda: item_id("mcp"))
    type: Literal["mcp_call"] = "mcp_call"
    status: McpCallStatus = "completed"
    server_label: str
    name: str
    arguments: str
    output: str | None = None
    error: dict[str, Any] | None = None
    approval_request_id: str | None = None


class McpApprovalRequestItem(ResponseModel):
    """A call the model made that waits for the client's ``mcp_approval_response``."""

    id: str = Field(default_factory=lambda: item_id("mcpr"))
    type: Literal["mcp_approval_request"] = "mcp_approval_request"
    server_label: str
    name: str
    arguments: str


OutputItem = (
    ReasoningItem
    | OutputMessage
    | FunctionCallItem
    | CustomToolCallItem
    | McpListToolsItem
    | McpCallItem
    | McpApprovalRequestItem
)


class InputTokensDetails(ResponseModel):
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokensDetails(ResponseModel):
    reasoning_tokens: int = 0


class ResponseUsage(ResponseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int

    @classmethod
    def of(cls, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> ResponseUsage:
        return cls(
            input_tokens=input_tokens,
            input_tokens_details=InputTokensDetails(cached_tokens=cached_tokens),
            output_tokens=output_tokens,
            output_tokens_details=OutputTokensDetails(),
            total_tokens=input_tokens + output_tokens,
        )


class IncompleteDetails(ResponseModel):
    reason: Literal["max_output_tokens", "content_filter", "max_tool_calls"]


class ResponseErrorBody(ResponseModel):
    code: str
    message: str


ResponseStatus = Literal["completed", "failed", "in_progress", "incomplete"]


class ResponseObject(ResponseModel):
    """The ``response`` object: the answer to ``POST``, what ``GET /v1/responses/{id}``
    returns, and the ``response`` of the lifecycle stream events."""

    id: str = Field(default_factory=lambda: item_id("resp"))
    object: Literal["response"] = "response"
    created_at: int = Field(default_factory=now)
    status: ResponseStatus = "completed"
    completed_at: int | None = None
    error: ResponseErrorBody | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    model: str
    output: list[OutputItem] = Field(default_factory=list)
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    reasoning: dict[str, Any] = Field(default_factory=lambda: {"effort": None, "summary": None})
    store: bool = True
    temperature: float = 1.0
    text: dict[str, Any] = Field(default_factory=lambda: {"format": {"type": "text"}})
    tool_choice: ResponseToolChoice = "auto"
    tools: list[dict[str, Any]] = Field(default_factory=list)
    top_p: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    top_logprobs: int = 0
    max_tool_calls: int | None = None
    background: bool = False
    service_tier: str = "default"
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    truncation: Literal["auto", "disabled"] = "disabled"
    usage: ResponseUsage | None = None
    user: str | None = None
    conversation: Omitted[dict[str, str]] = None
    metadata: dict[str, str] = Field(default_factory=dict)


class InputItemList(ResponseModel):
    """``GET /v1/responses/{id}/input_items``."""

    object: Literal["list"] = "list"
    data: list[dict[str, Any]]
    first_id: str
    last_id: str
    has_more: bool = False


# --- conversations ----------------------------------------------------------------------


class ConversationCreate(RequestModel):
    """``POST /v1/conversations``."""

    items: list[InputItem] | None = Field(default=None, max_length=20)
    metadata: dict[str, str] | None = None


class ConversationUpdate(RequestModel):
    """``POST /v1/conversations/{id}``."""

    metadata: dict[str, str]


class ConversationItemsCreate(RequestModel):
    """``POST /v1/conversations/{id}/items``."""

    items: list[InputItem] = Field(min_length=1, max_length=20)
