"""In-process vLLM: the backend (:mod:`~backends.vllm.backend`), its settings
(:mod:`~backends.vllm.settings`), the engine runtime contract (:mod:`~backends.vllm.engine`),
the one module that touches vLLM's own API (:mod:`~backends.vllm.compat`), whether it is
installed (:mod:`~backends.vllm.install`), why a start failed (:mod:`~backends.vllm.startup`)
and the wire steps (:mod:`~backends.vllm.wire`).

Importing this package does not import vLLM: that waits for a deployment's ``start()``.
"""

from typing import TYPE_CHECKING, Any

from backends.vllm.settings import VLLMSettings

if TYPE_CHECKING:
    from backends.vllm.backend import VLLMBackend


def __getattr__(name: str) -> Any:
    # the backend's modules load with the first deployment of this kind (see
    # backends.registry), not with the config schema that names every kind
    if name == "VLLMBackend":
        from backends.vllm.backend import VLLMBackend

        return VLLMBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["VLLMBackend", "VLLMSettings"]
