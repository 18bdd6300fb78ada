"""OpenAI chat → Gemini ``generateContent``: the request body.

Messages become ``contents`` (roles ``user`` and ``model``; consecutive turns of one role
merged), system and developer messages ``systemInstruction``. Text parts become ``text``
parts, images and files given as data URLs ``inlineData`` (http(s) image URLs
``fileData``), audio ``inlineData``. Tools become one ``functionDeclarations`` tool whose
``parametersJsonSchema`` is the function's JSON schema as it came; ``tool_choice``
becomes ``toolConfig.functionCallingConfig`` (auto/required/none/named → AUTO/ANY/NONE/ANY
with ``allowedFunctionNames``). An assistant's tool calls become ``functionCall`` parts,
each with its id and its thought signature (see :mod:`backends.gemini.calls`); a ``tool``
message becomes a ``functionResponse`` part named after the call it answers (a JSON object
as it is, other text as ``{"output": text}``, the key Google's documentation names).

``temperature``, ``top_p``, ``max_completion_tokens``/``max_tokens``, ``stop``, ``seed``
and the penalties go into ``generationConfig``; ``response_format`` json_object/json_schema
becomes ``responseMimeType: application/json`` (with ``responseJsonSchema``: the schema as
it came); ``reasoning_effort`` becomes ``thinkingConfig`` (:func:`thinking_config`).
``top_k``, ``safety_settings`` and ``cached_content`` pass through under Gemini's names.
What Gemini has no answer for (``n`` > 1, ``logprobs``) is refused with a 400.
"""

from __future__ import annotations

import json
import mimetypes
from typing import Any

from backends.gemini import calls
from backends.gemini.settings import GeminiSettings
from gateway.errors import InvalidRequestError
from gateway.protocol import ChatCompletionRequest, ChatMessage
from gateway.protocol.chat import ContentPart, ToolChoice

LEVELS = {"none": "minimal", "minimal": "minimal", "low": "low", "medium": "medium", "high": "high"}
"""``reasoning_effort`` → ``thinkingLevel`` (Gemini 3 cannot switch thinking off)."""

BUDGETS = {"none": 0, "minimal": 512, "low": 1024, "medium": 8192, "high": 24576}
"""``reasoning_effort`` → ``thinkingBudget`` in tokens (Gemini 2.5)."""

CHOICE_MODES = {"auto": "AUTO", "required": "ANY", "none": "NONE"}

PASSTHROUGH = {
    "top_k": ("generationConfig", "topK"),
    "safety_settings": (None, "safetySettings"),
    "cached_content": (None, "cachedContent"),
}
"""Extra chat fields sent on under Gemini's names: (the object they go in, the name)."""


def to_generate_request(request: ChatCompletionRequest, settings: GeminiSettings) -> dict[str, Any]:
    """The ``generateContent`` body for an OpenAI chat request (no ``model``: the URL
    names it)."""
    _refuse_unsupported(request)
    system, contents = map_messages(request.messages, settings)
    body: dict[str, Any] = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": [{"text": text} for text in system]}
    if request.tools:
        declarations = [_declaration(tool.function) for tool in request.tools]
        body["tools"] = [{"functionDeclarations": declarations}]
        config = _tool_config(request.tool_choice)
        if config is not None:
            body["toolConfig"] = {"functionCallingConfig": config}
    generation = _generation_config(request, settings)
    extras = request.model_extra or {}
    for name, (inside, key) in PASSTHROUGH.items():
        if name in extras:
            (generation if inside else body)[key] = extras[name]
    if generation:
        body["generationConfig"] = generation
    return body


def _refuse_unsupported(request: ChatCompletionRequest) -> None:
    if request.n is not None and request.n > 1:
        raise InvalidRequestError("this deployment returns one choice (n must be 1)", param="n")
    if request.logprobs:
        raise InvalidRequestError("this deployment does not return logprobs", param="logprobs")


def _generation_config(request: ChatCompletionRequest, settings: GeminiSettings) -> dict[str, Any]:
    config: dict[str, Any] = {}
    fields = (
        ("temperature", request.temperature),
        ("topP", request.top_p),
        ("maxOutputTokens", request.output_limit()),
        ("seed", request.seed),
        ("presencePenalty", request.presence_penalty),
        ("frequencyPenalty", request.frequency_penalty),
    )
    config.update((key, value) for key, value in fields if value is not None)
    if request.stop is not None:
        config["stopSequences"] = request.stop_list()
    fmt = request.response_format
    if fmt is not None and fmt.type != "text":
        config["responseMimeType"] = "application/json"
        if fmt.json_schema is not None and fmt.json_schema.schema_ is not None:
            config["responseJsonSchema"] = fmt.json_schema.schema_
    thinking = thinking_config(request.reasoning_effort, settings)
    if thinking:
        config["thinkingConfig"] = thinking
    return config


def thinking_config(effort: str | None, settings: GeminiSettings) -> dict[str, Any]:
    """``thinkingConfig`` for a ``reasoning_effort``: ``thinkingLevel`` or
    ``thinkingBudget`` as the model takes it (:data:`LEVELS`, :data:`BUDGETS`), and
    ``includeThoughts`` when the deployment asks for thought summaries."""
    config: dict[str, Any] = {"includeThoughts": True} if settings.include_thoughts else {}
    if effort is None:
        return config
    table: dict[str, Any] = LEVELS if settings.thinks_in_levels() else BUDGETS
    if effort not in table:
        raise InvalidRequestError(
            f"reasoning_effort must be one of {', '.join(table)}", param="reasoning_effort"
        )
    key = "thinkingLevel" if table is LEVELS else "thinkingBudget"
    return {**config, key: table[effort]}


def _declaration(function: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": function.name}
    if function.description:
        out["description"] = function.description
    if function.parameters is not None:
        out["parametersJsonSchema"] = function.parameters
    return out


def _tool_config(choice: ToolChoice | None) -> dict[str, Any] | None:
    if choice is None:
        return None
    if isinstance(choice, str):
        return {"mode": CHOICE_MODES[choice]}
    return {"mode": "ANY", "allowedFunctionNames": [choice.function.name]}


# --- messages ---------------------------------------------------------------------------


def map_messages(
    messages: list[ChatMessage], settings: GeminiSettings
) -> tuple[list[str], list[dict[str, Any]]]:
    """``(system texts, contents)``: one content per run of same-role messages."""
    system: list[str] = []
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # each call's chat id → its function's name
    for i, message in enumerate(messages):
        if message.role in ("system", "developer"):
            if text := message.text():
                system.append(text)
            continue
        role, parts = _turn(message, i, names, settings)
        if not parts:
            continue
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})
    return system, contents


def _turn(
    message: ChatMessage, i: int, names: dict[str, str], settings: GeminiSettings
) -> tuple[str, list[dict[str, Any]]]:
    if message.role == "user":
        return "user", _content_parts(message, i)
    if message.role == "assistant":
        calls_ = _function_calls(message, i, names, settings)
        return "model", _content_parts(message, i) + calls_
    if message.role == "tool":
        return "user", [_function_response(message, i, names, settings)]
    raise InvalidRequestError(
        f"role {message.role!r} is not supported here; use tool messages",
        param=f"messages[{i}].role",
    )


def _content_parts(message: ChatMessage, i: int) -> list[dict[str, Any]]:
    content = message.content
    if not content:
        return []
    if isinstance(content, str):
        return [{"text": content}]
    return [part for j, block in enumerate(content) if (part := _part(block, i, j)) is not None]


def _part(part: ContentPart, i: int, j: int) -> dict[str, Any] | None:
    param = f"messages[{i}].content[{j}]"
    extra = part.model_extra or {}
    if part.type == "text":
        return {"text": part.text} if part.text else None
    if part.type == "image_url" and part.image_url is not None:
        return _media(part.image_url.url, f"{param}.image_url.url")
    if part.type == "file" and isinstance(file := extra.get("file"), dict):
        data_url = file.get("file_data")
        if not isinstance(data_url, str) or not data_url.startswith("data:"):
            raise InvalidRequestError(
                "file parts need file_data (a data URL) here", param=f"{param}.file.file_data"
            )
        return _media(data_url, f"{param}.file.file_data")
    if part.type == "input_audio" and isinstance(audio := extra.get("input_audio"), dict):
        data, kind = audio.get("data"), audio.get("format")
        if not isinstance(data, str) or not isinstance(kind, str):
            raise InvalidRequestError("input_audio needs data and format", param=param)
        return {"inlineData": {"mimeType": f"audio/{kind}", "data": data}}
    raise InvalidRequestError(f"content part {part.type!r} is not supported here", param=param)


def _media(url: str, param: str) -> dict[str, Any]:
    """A data URL as ``inlineData``; an http(s) URL as ``fileData``."""
    if url.startswith("data:"):
        header, _, data = url.partition(",")
        mime = header.removeprefix("data:").split(";")[0]
        if ";base64" not in header or not mime or not data:
            raise InvalidRequestError("data URLs must be data:<type>;base64,<data>", param=param)
        return {"inlineData": {"mimeType": mime, "data": data}}
    if url.startswith(("http://", "https://")):
        file: dict[str, Any] = {"fileUri": url}
        guessed, _ = mimetypes.guess_type(url.split("?")[0])
        if guessed:
            file["mimeType"] = guessed
        return {"fileData": file}
    raise InvalidRequestError("the URL must be a data URL or an http(s) URL", param=param)


def _function_calls(
    message: ChatMessage, i: int, names: dict[str, str], settings: GeminiSettings
) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for call in message.tool_calls or []:
        try:
            args = json.loads(call.function.arguments or "{}")
        except ValueError:
            args = None
        if not isinstance(args, dict):
            raise InvalidRequestError(
                f"tool call {call.id} has arguments that are not a JSON object",
                param=f"messages[{i}].tool_calls",
            )
        names[call.id] = call.function.name
        call_id, signature = calls.split(call.id)
        signature = signature or calls.extra_signature(call.model_extra)
        function: dict[str, Any] = {"name": call.function.name, "args": args}
        if settings.call_ids:
            function["id"] = call_id
        part: dict[str, Any] = {"functionCall": function}
        if signature is None and not parts:  # Gemini 3 checks a turn's first call
            signature = settings.missing_signature
        if signature is not None:
            part["thoughtSignature"] = signature
        parts.append(part)
    return parts


def _function_response(
    message: ChatMessage, i: int, names: dict[str, str], settings: GeminiSettings
) -> dict[str, Any]:
    chat_id = message.tool_call_id or ""
    name = names.get(chat_id) or message.name
    if not name:
        raise InvalidRequestError(
            f"no earlier assistant message has a tool call with id {chat_id!r}",
            param=f"messages[{i}].tool_call_id",
        )
    text = message.text()
    value = None
    if text.lstrip().startswith("{"):  # most tool output is plain text: no failed parse
        try:
            value = json.loads(text)
        except ValueError:
            value = None
    response: dict[str, Any] = {
        "name": name,
        "response": value if isinstance(value, dict) else {"output": text},
    }
    if settings.call_ids:
        response["id"] = calls.split(chat_id)[0]
    return {"functionResponse": response}
