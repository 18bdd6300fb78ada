"""The chat request's field names as a Gemini request names them
(:mod:`gateway.protocol.fieldnames`): each chat message came from ``systemInstruction``
or one of ``contents`` (a ``functionResponse`` part became a chat ``tool`` message of its
own, a ``functionCall`` part one of an assistant message's ``tool_calls``), each tool from
one of ``tools[k].functionDeclarations``, and chat's top-level fields from
``generationConfig`` and ``toolConfig``."""

from __future__ import annotations

from gateway.protocol.fieldnames import FieldNames, Origin, Site

CONTENT = {"content": ".parts", "role": ".role"}
PART = {"type": "", "text": ".text", "image_url": ".inlineData", "file": ".inlineData"}
PART.update(input_audio=".inlineData")
RESPONSE = {"content": ".functionResponse.response", "tool_call_id": ".functionResponse.id"}
CALL = {
    "id": ".functionCall.id",
    "function.name": ".functionCall.name",
    "function.arguments": ".functionCall.args",
}
TOOL = {
    "function": "",
    "function.name": ".name",
    "function.description": ".description",
    "function.parameters": ".parameters",
}
_GENERATION = {
    "temperature": "temperature",
    "top_p": "topP",
    "top_k": "topK",
    "max_tokens": "maxOutputTokens",
    "max_completion_tokens": "maxOutputTokens",
    "seed": "seed",
    "presence_penalty": "presencePenalty",
    "frequency_penalty": "frequencyPenalty",
    "n": "candidateCount",
    "reasoning_effort": "thinkingConfig",
    "response_format": "responseSchema",
}


def gemini_names(origins: list[Origin], tools: list[Site]) -> FieldNames:
    """The names of a translated Gemini request (``origins``: its chat messages',
    ``tools``: its chat tools')."""
    top = {"messages": Site("contents"), "tools": Site("tools")}
    for chat, name in _GENERATION.items():
        top[chat] = Site(f"generationConfig.{name}")
    top["stop"] = Site("generationConfig.stopSequences", alike=True)
    top["tool_choice"] = Site("toolConfig.functionCallingConfig")
    top["parallel_tool_calls"] = Site("toolConfig.functionCallingConfig")
    return FieldNames(top, origins, tools)


def system_origin() -> Origin:
    return Origin(Site("systemInstruction", CONTENT))


def content_origin(i: int, parts: list[Site | None] | None = None) -> Origin:
    """A chat message made of ``contents[i]`` (``parts``: the site of each of its parts)."""
    return Origin(Site(f"contents[{i}]", CONTENT), parts or [])


def part_site(i: int, j: int, names: dict[str, str] | None = None) -> Site:
    return Site(f"contents[{i}].parts[{j}]", names or PART)


def tool_site(k: int, m: int) -> Site:
    return Site(f"tools[{k}].functionDeclarations[{m}]", TOOL, frozenset({"function.parameters"}))
