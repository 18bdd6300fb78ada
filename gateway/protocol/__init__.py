"""OpenAI wire models, in one place."""

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
from gateway.protocol.common import Model, ModelList, Usage, new_id, now
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
    "new_id",
    "now",
]
