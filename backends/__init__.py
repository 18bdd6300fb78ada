"""Backends: one package per engine or wire API, behind the contract in :mod:`backends.base`.

:class:`backends.base.Backend` is the base class every backend derives from: the methods
every deployment answers, and the optional abilities (embeddings, raw chat frames, native
Messages or Gemini, exact token counts, health probes) that refuse unless its
:class:`~backends.base.Capabilities` list them. :class:`backends.wrapper.WrapperBackend`
forwards all of it, for a backend that wraps another and changes a part.

* :mod:`backends.llamacpp`: a GGUF in this process (llama-cpp-python, continuous batching);
* :mod:`backends.vllm`: vLLM's async engine in this process;
* :mod:`backends.openai`: OpenAI and every OpenAI-compatible server;
* :mod:`backends.anthropic`: Anthropic's Messages API, translated both ways;
* :mod:`backends.gemini`: Google's Gemini API (``generateContent``), translated both ways;
* :mod:`backends.http`: what the remote backends share: their base class, the upstream
  HTTP client, SSE framing and the error mapping.

:mod:`backends.registry` maps each ``backend:`` kind to its settings and its backend.
Backends import the floor (:mod:`gateway.protocol`, :mod:`gateway.errors`,
:mod:`gateway.common`), the model files layer (:mod:`gateway.models`) and the memory
planner (:mod:`gateway.planner`); never the app.
"""
