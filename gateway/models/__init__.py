"""Model files: the local model cache (pull, list, remove, resolve a name to a GGUF), models
shipped inside installed Python packages (``package:smollm2``) and the generated
random-weight demo models.

The llama.cpp backend and the app both use this layer; it imports only the floor
(:mod:`gateway.errors`, :mod:`gateway.common`), never a backend or the app.
"""
