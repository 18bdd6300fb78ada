"""In-process llama.cpp (llama-cpp-python): the backend (:mod:`~backends.llamacpp.backend`),
its settings (:mod:`~backends.llamacpp.settings`), requests read for the engine and its answers
read back (:mod:`~backends.llamacpp.jobs`), the event-loop face of the engine
(:mod:`~backends.llamacpp.engine`), the continuous-batching scheduler thread
(:mod:`~backends.llamacpp.batch`), per-request sampling (:mod:`~backends.llamacpp.sampling`),
chat templates and text assembly (:mod:`~backends.llamacpp.text`), tool calls (what a
request asks, :mod:`~backends.llamacpp.tools`; how tools reach the prompt,
:mod:`~backends.llamacpp.tool_prompt`; how calls are read from the output,
:mod:`~backends.llamacpp.tool_parsers`) and embeddings (:mod:`~backends.llamacpp.embed`)."""

from typing import TYPE_CHECKING, Any

from backends.llamacpp.settings import LlamaCppSettings

if TYPE_CHECKING:
    from backends.llamacpp.backend import LlamaCppBackend


def __getattr__(name: str) -> Any:
    # the engine's modules (its scheduler, chat templates) load with the first llama.cpp
    # deployment, not with the config schema that names every backend kind
    if name == "LlamaCppBackend":
        from backends.llamacpp.backend import LlamaCppBackend

        return LlamaCppBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["LlamaCppBackend", "LlamaCppSettings"]
