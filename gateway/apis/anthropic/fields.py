"""The Messages fields a chat upstream has no place for, classified by the rule of
:mod:`gateway.protocol.fieldrules`: delivery and presentation are dropped and reported,
meaning is mapped or refused by name. A top-level field or block type not listed here and
not mapped by the translation is refused by name (``operator``: unless the deployment's
``messages_drop`` lists it)."""

from __future__ import annotations

from gateway.protocol.fieldrules import FieldRule, FieldRules


def messages_fields() -> FieldRules:
    """The Messages API's table."""
    return FieldRules(
        "messages",
        (
            FieldRule(
                "tool", "eager_input_streaming", "dropped", "how a tool's arguments are streamed"
            ),
            FieldRule("tool", "defer_loading", "dropped", "tool search: every tool is sent"),
            FieldRule("header", "anthropic-beta", "dropped", "beta flags of Anthropic's API"),
            FieldRule("request", "service_tier", "dropped", "which capacity serves it"),
            FieldRule("request", "cache_control", "mapped", "`prompt_cache_key`"),
            FieldRule("tool", "cache_control", "mapped", "`prompt_cache_key`"),
            FieldRule("block", "cache_control", "mapped", "`prompt_cache_key`"),
            *(
                FieldRule(
                    "block",
                    name,
                    "dropped",
                    "an earlier turn's reasoning: chat takes none back (OpenAI's chat API "
                    "refuses it in a message, chat templates leave it out)",
                )
                for name in ("thinking", "redacted_thinking")
            ),
            FieldRule("block", "citations", "unused", "citations asked of or made in a block"),
            FieldRule("block", "signature", "unused", "a thinking block's signature"),
            FieldRule("block", "caller", "unused", "`direct`: a call the model made itself"),
            FieldRule(
                "request",
                "metadata",
                "operator",
                "its `user_id` identifies a device; `messages_drop` drops it by default",
            ),
            FieldRule(
                "request",
                "context_management",
                "operator",
                "Anthropic's context editing; `messages_drop` drops it by default",
            ),
            FieldRule(
                "tool",
                "type",
                "operator",
                "a server tool (`web_search_20250305`...): refused unless `messages_drop` "
                "lists `server_tools`",
            ),
            FieldRule("request", "container", "refused", "a code execution container"),
            FieldRule("request", "output_config", "mapped", "`effort`, `format`; others refused"),
            FieldRule("request", "inference_geo", "refused", "where the model runs"),
        ),
    )
