# Debian 12's redis-server (7.0)
# stand-in for: redis
# Stand-in for redis:7.4-alpine: Debian 12's redis-server (7.0). Like the official image, a
# `redis-server` started without a config file leaves protected mode, so that the other
# containers of its network can connect; its working directory (where the append-only file
# goes) is /data.
FROM shunter-stand-in/debian:12
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data \
 && printf '%s\n' '#!/bin/sh' \
    'if [ "$1" = redis-server ]; then set -- "$@" --protected-mode no; fi' \
    'exec "$@"' > /usr/local/bin/redis-entrypoint \
 && chmod +x /usr/local/bin/redis-entrypoint
WORKDIR /data
EXPOSE 6379
ENTRYPOINT ["/usr/local/bin/redis-entrypoint"]
CMD ["redis-server"]
