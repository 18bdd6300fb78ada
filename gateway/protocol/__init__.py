"""The wire formats, in one place: OpenAI's models (chat, completions, embeddings,
responses), Anthropic's Messages (:mod:`~gateway.protocol.messages`) and the mappings
between Messages and chat that both the ingress and the anthropic backend use
(:mod:`~gateway.protocol.messages_codec`); streams as SSE frames
(:mod:`~gateway.protocol.frames`, :mod:`~gateway.protocol.sse`)."""

from gateway.protocol.chat import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatLogprobs,
    ChatMessage,
    Choice,
    ChoiceDelta,
    ChunkChoice,
    ToolCall,
    ToolCallDelta,
)
from gateway.protocol.common import Model, ModelList, Usage, item_id, new_id, now
from gateway.protocol.completions import Completion, CompletionChoice, CompletionRequest
from gateway.protocol.embeddings import (
    Embedding,
    EmbeddingRequest,
    EmbeddingResponse,
    EmbeddingUsage,
)

__all__ = [
    "AssistantMessage",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatCompletionRequest",
    "ChatLogprobs",
    "ChatMessage",
    "Choice",
    "ChoiceDelta",
    "ChunkChoice",
    "Completion",
    "CompletionChoice",
    "CompletionRequest",
    "Embedding",
    "EmbeddingRequest",
    "EmbeddingResponse",
    "EmbeddingUsage",
    "Model",
    "ModelList",
    "ToolCall",
    "ToolCallDelta",
    "Usage",
    "item_id",
    "new_id",
    "now",
]
