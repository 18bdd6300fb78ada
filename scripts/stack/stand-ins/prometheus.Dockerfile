# Debian 12's prometheus (2.42)
# stand-in for: prom/prometheus
# Stand-in for prom/prometheus: Debian 12's Prometheus (2.42), run as the official image runs
# it (entrypoint the server, data in /prometheus owned by nobody), with wget for the
# compose healthcheck.
FROM shunter-stand-in/debian:12
RUN apt-get update \
 && apt-get install -y --no-install-recommends prometheus wget \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /prometheus \
 && chown nobody:nogroup /prometheus
USER nobody
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
