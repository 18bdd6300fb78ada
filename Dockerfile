# syntax=docker/dockerfile:1
# Shunter gateway, CPU image: the gateway with its in-process llama.cpp engine.
#   docker build -t shunter:cpu .
#   docker run --rm -p 127.0.0.1:8000:8000 -e SHUNTER_MASTER_KEY=sk-... shunter:cpu
#       (embedded default: the demo model; without a key the gateway runs in open mode, which
#       is meant for loopback only)
#   docker run --rm -e SHUNTER_MASTER_KEY=sk-... shunter:cpu worker --model /models/m.gguf \
#       --host 0.0.0.0   # any subcommand; beyond loopback a worker needs a key
# The same image runs `shunter worker` (docker-compose.yml's llama.cpp worker).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: compile llama-cpp-python and install Shunter into a venv -------------------
FROM ${PYTHON_IMAGE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake \
 && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/shunter/bin:$PATH
RUN python -m venv /opt/shunter
WORKDIR /src

# Dependencies first, exactly as requirements.lock pins them (written from pyproject.toml by
# scripts/lock.sh), each file checked against its sha256: llama.cpp compiles for minutes, so
# this layer is rebuilt only when the lock changes, not on a source or pyproject.toml edit.
# Portable llama.cpp (no -march=native): the image runs on any x86-64 CPU, and the native
# build crashes on q8_0 models on AMX CPUs.
ENV CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF"
COPY requirements.lock ./
RUN pip install --require-hashes -r requirements.lock

COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY backends ./backends
COPY policies ./policies
RUN pip install --no-deps . && shunter --help > /dev/null

# ---- runtime -------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
# libgomp1: llama.cpp's OpenMP runtime (the build stage had it through gcc)
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --create-home --home-dir /home/shunter shunter \
 && mkdir -p /models /etc/shunter \
 && chown shunter:shunter /models
COPY --from=build /opt/shunter /opt/shunter
ENV PATH=/opt/shunter/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    SHUNTER_MODEL_DIR=/models
USER 10001
WORKDIR /home/shunter
EXPOSE 8000
# Readiness, not liveness: 503 while the engine loads and while draining on SIGTERM.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health/readiness', timeout=4)"]
# SIGTERM: readiness turns 503 and in-flight streams drain for up to 30 s; give the container
# a longer stop timeout (compose: stop_grace_period; Kubernetes: terminationGracePeriodSeconds).
STOPSIGNAL SIGTERM
ENTRYPOINT ["shunter"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
