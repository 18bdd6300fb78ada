"""In-process llama.cpp (llama-cpp-python): the backend (:mod:`~backends.llamacpp.backend`),
its settings (:mod:`~backends.llamacpp.settings`), requests read for the engine and its answers
read back (:mod:`~backends.llamacpp.jobs`), the event-loop face of the engine
(:mod:`~backends.llamacpp.engine`), the continuous-batching scheduler thread
(:mod:`~backends.llamacpp.batch`), per-request sampling (:mod:`~backends.llamacpp.sampling`),
chat templates and text assembly (:mod:`~backends.llamacpp.text`), tool calls (what a
request asks, :mod:`~backends.llamacpp.tools`; how tools reach the prompt,
:mod:`~backends.llamacpp.tool_prompt`; how calls are read from the output,
:mod:`~backends.llamacpp.tool_parsers`) and embeddings (:mod:`~backends.llamacpp.embed`)."""

from backends.llamacpp.backend import LlamaCppBackend
from backends.llamacpp.settings import LlamaCppSettings

__all__ = ["LlamaCppBackend", "LlamaCppSettings"]
