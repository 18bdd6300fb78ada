# Debian 12's python3 (3.11) with venv, as `python`
# stand-in for: python
# Stand-in for python:3.11-slim-bookworm: the official image's `python` on the PATH. pip in
# the images built on it trusts the certificate authorities of the machine that built the
# stand-in (host-ca-certificates.crt, copied in by stand-ins.sh): a machine whose traffic
# to PyPI passes a TLS-inspecting proxy reaches it only so.
FROM shunter-stand-in/debian:12
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s /usr/bin/python3 /usr/local/bin/python
COPY host-ca-certificates.crt /usr/local/share/shunter-stand-in/ca-certificates.crt
ENV LANG=C.UTF-8 \
    PIP_CERT=/usr/local/share/shunter-stand-in/ca-certificates.crt
CMD ["python3"]
