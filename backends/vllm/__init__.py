"""In-process vLLM: the backend (:mod:`~backends.vllm.backend`), its settings
(:mod:`~backends.vllm.settings`), the engine runtime contract (:mod:`~backends.vllm.engine`),
the one module that touches vLLM's own API (:mod:`~backends.vllm.compat`), whether it is
installed (:mod:`~backends.vllm.install`), why a start failed (:mod:`~backends.vllm.startup`)
and the wire steps (:mod:`~backends.vllm.wire`).

Importing this package does not import vLLM: that waits for a deployment's ``start()``.
"""

from backends.vllm.backend import VLLMBackend
from backends.vllm.settings import VLLMSettings

__all__ = ["VLLMBackend", "VLLMSettings"]
