# Debian 12's busybox-static
# stand-in for: busybox
# Stand-in for busybox:*-musl: Debian 12's static busybox at /bin/busybox.
FROM shunter-stand-in/debian:12
RUN apt-get update \
 && apt-get install -y --no-install-recommends busybox-static \
 && rm -rf /var/lib/apt/lists/*
CMD ["/bin/busybox", "sh"]
