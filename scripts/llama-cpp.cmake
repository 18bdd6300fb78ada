# Read by llama.cpp's CMake project when scripts/setup.sh builds llama-cpp-python (through
# CMAKE_PROJECT_llama.cpp_INCLUDE): build only what the gateway loads. llama-cpp-python
# switches on llama.cpp's `common` library (its tools' argument parsing, chat templates,
# HTTP client: about as many sources as libllama itself, and nothing the Python package
# loads); the gateway uses libllama and ggml through ctypes, so it is switched off again.
# Tools, examples, tests and the server are off already in a sub-project build, and
# scripts/setup.sh passes LLAVA_BUILD=OFF (no multimodal library: the gateway serves text).
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama.cpp: build the common utils library" FORCE)
