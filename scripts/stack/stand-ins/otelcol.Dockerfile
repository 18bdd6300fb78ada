# NOT the collector: a Python OTLP/HTTP receiver that counts what it gets (Debian 12 has no collector)
# stand-in for: otel/opentelemetry-collector-contrib
# Stand-in for otel/opentelemetry-collector-contrib: no collector exists among Debian 12's
# packages, so this one only receives OTLP over HTTP on :4318 (any signal, answered 200),
# prints one line per batch it got, and answers the health_check extension's port :13133
# and the collector's two metrics ports (:8888, :8889) with its own counts.
FROM shunter-stand-in/debian:12
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 \
 && rm -rf /var/lib/apt/lists/*
COPY otlp_receiver.py /otlp_receiver.py
EXPOSE 4318 13133 8888 8889
ENTRYPOINT ["python3", "-u", "/otlp_receiver.py"]
