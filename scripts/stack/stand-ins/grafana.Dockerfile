# NOT Grafana: busybox httpd answering GET /api/health only (Debian 12 has no Grafana)
# stand-in for: grafana/grafana
# Stand-in for grafana/grafana: no Grafana exists among Debian 12's packages, so this one
# only answers the compose healthcheck (GET /api/health) on :3000. Dashboards are not drawn.
FROM shunter-stand-in/debian:12
RUN apt-get update \
 && apt-get install -y --no-install-recommends busybox-static \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s /bin/busybox /usr/local/bin/wget \
 && mkdir -p /srv/api \
 && echo '{"database": "ok", "version": "stand-in"}' > /srv/api/health
EXPOSE 3000
ENTRYPOINT ["/bin/busybox", "httpd", "-f", "-p", "3000", "-h", "/srv"]
