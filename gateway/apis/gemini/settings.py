"""A Gemini request's tools, tool choice and generation settings as chat's fields.

* ``tools[k].functionDeclarations`` → chat functions (``parameters`` in Gemini's OpenAPI
  subset → JSON Schema: :mod:`~.schema`; ``parametersJsonSchema`` as it came); any other
  tool (``googleSearch``, ``codeExecution``, ``urlContext``...) runs only on Google's
  servers: dropped and named (``tools[1].googleSearch``), or refused, by the
  ``responses.hosted_tools`` setting;
* ``toolConfig.functionCallingConfig``: ``AUTO`` (and ``VALIDATED``) → ``auto``, ``ANY`` →
  ``required`` (one ``allowedFunctionNames``: that function; several: only those are
  offered), ``NONE`` → ``none``;
* ``generationConfig``: ``temperature``, ``topP``, ``topK``, ``maxOutputTokens``,
  ``stopSequences``, ``seed``, ``presencePenalty``, ``frequencyPenalty`` one to one;
  ``candidateCount`` above 1 is refused (one answer per call); ``responseMimeType``
  ``application/json`` → ``response_format`` (``json_schema`` with ``responseSchema`` or
  ``responseJsonSchema``, else ``json_object``); ``thinkingConfig`` → ``reasoning_effort``
  (``thinkingLevel`` as it is; ``thinkingBudget`` 0 → ``none``, up to 4095 → ``low``, up
  to 16383 → ``medium``, more → ``high``, -1: the model's own choice);
  ``responseModalities`` other than text only, and any other setting, are refused by name.
"""

from __future__ import annotations

from typing import Any

from gateway.apis.gemini.names import tool_site
from gateway.apis.gemini.protocol import GenerateContentRequest, GenerationConfig
from gateway.apis.gemini.schema import json_schema
from gateway.apis.gemini.turns import refuse
from gateway.errors import InvalidRequestError
from gateway.protocol.fieldnames import Site
from gateway.protocol.messages_codec import EFFORT_BUDGETS

_MODES = {"AUTO": "auto", "VALIDATED": "auto", "MODE_UNSPECIFIED": "auto", "NONE": "none"}
_LEVELS = frozenset({"minimal", "low", "medium", "high"})


def tooling(
    body: GenerateContentRequest,
    lenient: bool,
    hosted: str,
    dropped: set[str],
    sites: list[Site],
) -> dict[str, Any]:
    """Chat's ``tools`` and ``tool_choice`` (``sites``: where each chat tool came from)."""
    tools: list[dict[str, Any]] = []
    for k, tool in enumerate(body.tools or []):
        for name in tool.model_extra or {}:
            param = f"tools[{k}].{name}"
            if hosted == "drop" or lenient:
                dropped.add(param)
            else:
                refuse(param, "this tool runs only on Google's servers", lenient)
        for m, declaration in enumerate(tool.function_declarations or []):
            where = f"tools[{k}].functionDeclarations[{m}]"
            for extra in declaration.model_extra or {}:
                refuse(f"{where}.{extra}", "chat functions have no such field", lenient)
            schema: Any = declaration.parameters_json_schema
            if schema is None and declaration.parameters is not None:
                schema = json_schema(declaration.parameters, f"{where}.parameters")
            function: dict[str, Any] = {"name": declaration.name}
            function["parameters"] = schema if schema is not None else {"type": "object"}
            if declaration.description:
                function["description"] = declaration.description
            tools.append({"type": "function", "function": function})
            sites.append(tool_site(k, m))
    out: dict[str, Any] = {}
    if tools:
        out["tools"] = tools
    config = body.tool_config
    calling = config.function_calling_config if config is not None else None
    if calling is not None and tools:
        out.update(_choice(calling.mode, calling.allowed_function_names, tools, lenient))
    return out


def _choice(
    mode: str | None, allowed: list[str] | None, tools: list[dict[str, Any]], lenient: bool
) -> dict[str, Any]:
    param = "toolConfig.functionCallingConfig"
    mode = (mode or "AUTO").upper()
    if mode != "ANY":
        if mode not in _MODES:
            refuse(f"{param}.mode", f"'{mode}' is not a mode (AUTO, ANY, NONE)", lenient)
            return {}
        if allowed:
            why = "allowedFunctionNames goes with mode ANY only"
            refuse(f"{param}.allowedFunctionNames", why, lenient)
        return {"tool_choice": _MODES[mode]}
    if not allowed:
        return {"tool_choice": "required"}
    names = {tool["function"]["name"] for tool in tools}
    for name in allowed:
        if name not in names:
            why = f"'{name}' is not a declared function"
            refuse(f"{param}.allowedFunctionNames", why, lenient)
    if len(allowed) == 1:
        return {"tool_choice": {"type": "function", "function": {"name": allowed[0]}}}
    offered = [tool for tool in tools if tool["function"]["name"] in allowed]
    return {"tools": offered or tools, "tool_choice": "required"}


def generation(config: GenerationConfig | None, lenient: bool) -> dict[str, Any]:
    """Chat's sampling, budget, format and reasoning fields for ``generationConfig``."""
    if config is None:
        return {}
    param = "generationConfig"
    for name in config.model_extra or {}:
        refuse(f"{param}.{name}", "this setting has no chat counterpart", lenient)
    if config.candidate_count is not None and config.candidate_count != 1:
        why = "one candidate is generated per call; send candidateCount 1 or leave it out"
        refuse(f"{param}.candidateCount", why, lenient)
    modalities = [m.upper() for m in config.response_modalities or []]
    if any(m != "TEXT" for m in modalities):
        refuse(f"{param}.responseModalities", "only TEXT is generated here", lenient)
    fields: dict[str, Any] = {
        "temperature": config.temperature,
        "top_p": config.top_p,
        "max_tokens": config.max_output_tokens,
        "stop": config.stop_sequences or None,
        "seed": config.seed,
        "presence_penalty": config.presence_penalty,
        "frequency_penalty": config.frequency_penalty,
    }
    if config.top_k is not None:
        fields["top_k"] = config.top_k
    fields["response_format"] = _format(config, lenient)
    fields["reasoning_effort"] = _effort(config, lenient)
    return {name: value for name, value in fields.items() if value is not None}


def _format(config: GenerationConfig, lenient: bool) -> dict[str, Any] | None:
    param = "generationConfig"
    mime = (config.response_mime_type or "text/plain").lower()
    schema: Any = config.response_json_schema
    if schema is None and config.response_schema is not None:
        try:
            schema = json_schema(config.response_schema, f"{param}.responseSchema")
        except InvalidRequestError:
            if not lenient:
                raise
            schema = None
    if mime == "application/json":
        if schema is None:
            return {"type": "json_object"}
        return {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}
    if mime != "text/plain":
        why = (
            f"'{config.response_mime_type}' is not generated here (text/plain or application/json)"
        )
        refuse(f"{param}.responseMimeType", why, lenient)
    elif schema is not None:
        refuse(
            f"{param}.responseSchema", "a schema needs responseMimeType application/json", lenient
        )
    return None


def _effort(config: GenerationConfig, lenient: bool) -> str | None:
    thinking = config.thinking_config
    if thinking is None:
        return None
    param = "generationConfig.thinkingConfig"
    for name in thinking.model_extra or {}:
        refuse(f"{param}.{name}", "this setting has no chat counterpart", lenient)
    level = thinking.thinking_level
    if level is not None:
        if level.lower() in _LEVELS:
            return level.lower()
        if level.upper() != "THINKING_LEVEL_UNSPECIFIED":
            refuse(f"{param}.thinkingLevel", f"'{level}' is not a thinking level", lenient)
    budget = thinking.thinking_budget
    if budget is None or budget < 0:
        return None
    if budget == 0:
        return "none"
    return next((name for bound, name in EFFORT_BUDGETS if budget < bound), "high")
