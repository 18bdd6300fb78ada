"""In-process llama.cpp (llama-cpp-python): the backend and its settings
(:mod:`~backends.llamacpp.backend`), the event-loop face of the engine
(:mod:`~backends.llamacpp.engine`), the continuous-batching scheduler thread
(:mod:`~backends.llamacpp.batch`), per-request sampling (:mod:`~backends.llamacpp.sampling`),
chat templates and text assembly (:mod:`~backends.llamacpp.text`), tool calls (what a
request asks, :mod:`~backends.llamacpp.tools`; how tools reach the prompt,
:mod:`~backends.llamacpp.tool_prompt`; how calls are read from the output,
:mod:`~backends.llamacpp.tool_parsers`) and embeddings (:mod:`~backends.llamacpp.embed`)."""

from backends.llamacpp.backend import LlamaCppBackend, LlamaCppSettings

__all__ = ["LlamaCppBackend", "LlamaCppSettings"]
