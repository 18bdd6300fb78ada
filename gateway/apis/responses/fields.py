"""The Responses fields a chat upstream has no place for, classified by the rule of
:mod:`gateway.protocol.fieldrules`: delivery and presentation are dropped and reported,
meaning is mapped or refused by name."""

from __future__ import annotations

from gateway.protocol.fieldrules import FieldRule, FieldRules


def responses_fields() -> FieldRules:
    """The Responses API's table."""
    return FieldRules(
        "responses",
        (
            FieldRule("tool", "defer_loading", "dropped", "tool search: every tool is sent"),
            FieldRule(
                "tool",
                "type",
                "operator",
                "a tool only OpenAI runs (`web_search`, `file_search`...): dropped and "
                "reported under `responses.hosted_tools: drop` (the default), else refused",
            ),
            FieldRule("request", "background", "refused", "background responses"),
            FieldRule("request", "top_logprobs", "refused", "log probabilities (above 0)"),
            FieldRule("request", "prompt", "refused", "a stored prompt template"),
            FieldRule(
                "item",
                "reasoning",
                "mapped",
                "its text: the next assistant message's `reasoning_content`; one with only "
                "`encrypted_content` (which only OpenAI reads) is dropped and reported",
            ),
            FieldRule(
                "item",
                "mcp_list_tools",
                "mapped",
                "read by the gateway's own `mcp` tool (a listing it reuses); refused without one",
            ),
            FieldRule(
                "item",
                "mcp_approval_request",
                "mapped",
                "read by the gateway's own `mcp` tool; refused without one",
            ),
            FieldRule(
                "item",
                "mcp_approval_response",
                "mapped",
                "the gateway's own `mcp` tool runs the approved call; refused without one",
            ),
        ),
    )
