"""Backends: one package per engine or wire API, behind the contract in :mod:`backends.base`.

* :mod:`backends.llamacpp`: a GGUF in this process (llama-cpp-python, continuous batching);
* :mod:`backends.vllm`: vLLM's async engine in this process;
* :mod:`backends.openai`: OpenAI and every OpenAI-compatible server;
* :mod:`backends.anthropic`: Anthropic's Messages API, translated both ways;
* :mod:`backends.http`: the upstream HTTP client the remote backends share.

:mod:`backends.registry` maps each ``backend:`` kind to its settings and its backend.
Backends import the floor (:mod:`gateway.protocol`, :mod:`gateway.errors`,
:mod:`gateway.common`), the model files layer (:mod:`gateway.models`) and the memory
planner (:mod:`gateway.planner`); never the app.
"""
