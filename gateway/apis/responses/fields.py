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
                "dropped",
                "an earlier turn's reasoning: chat takes none back (OpenAI's chat API "
                "refuses it in a message, chat templates leave it out)",
            ),
            *(
                FieldRule(
                    "item",
                    name,
                    "operator",
                    "read by the gateway when it runs the request's `mcp` tool; else as "
                    "hosted tools go: dropped and reported, or refused",
                )
                for name in ("mcp_list_tools", "mcp_approval_request", "mcp_approval_response")
            ),
        ),
    )
