"""Secrets and internal addresses taken out of what an upstream says.

An upstream's error text can carry what the gateway sent it (an upstream that echoes the
request's ``Authorization`` in its 401) and where things live (its own host and port, its
base URL, addresses behind it). :class:`Redactor` is applied where upstream failures are
mapped onto the error tree (:mod:`backends.http.errors`):

* :meth:`Redactor.for_log` replaces secrets: the credentials sent to this upstream (every
  header whose name says key, token, auth, secret...; a ``Bearer`` token also alone), the
  password of its URL, the values of the process's secret-looking variables
  (``*_API_KEY``, ``*_TOKEN``, ``*_SECRET``, ``SHUNTER_MASTER_KEY``, ...), and anything
  shaped like a credential (``Bearer …``, ``sk-…``, ``hf_…``);
* :meth:`Redactor.for_client` does that, then replaces addresses: the upstream's URL,
  ``host:port`` and host name, and any URL, IP address or ``name.domain:port`` in the text.

The log keeps the detail with secrets out; a client gets neither secrets nor addresses.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

REDACTED = "[redacted]"
ADDRESS = "[upstream]"
_MIN_SECRET = 6  # shorter values are not secrets worth the false matches
_SECRET_HEADER = re.compile(r"auth|key|token|secret|cookie|signature|password|credential", re.I)
_SECRET_ENV = re.compile(r"(?:API_?KEY|TOKEN|SECRET|PASSWORD|MASTER_KEY)$", re.I)
_SCHEME_TOKEN = re.compile(r"(?i)\b(bearer|basic|token)\s+[^\s\"',;]+")
_KEY_SHAPED = re.compile(
    r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{8,}|\bhf_[A-Za-z0-9]{8,}|\bAIza[A-Za-z0-9_\-]{30,}"
)
_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s\"'<>]+")
_IPV4 = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?\b")
_IPV6 = re.compile(r"\[[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*\](?::\d{1,5})?")
_HOST_PORT = re.compile(r"(?i)\b(?:localhost|[a-z0-9-]+(?:\.[a-z0-9-]+)+):\d{1,5}\b")


class Redactor:
    """Takes known secrets and addresses (and anything shaped like them) out of text."""

    __slots__ = ("_addresses", "_secrets")

    def __init__(self, secrets: Iterable[str] = (), addresses: Iterable[str] = ()) -> None:
        self._secrets = _longest_first(s for s in secrets if len(s) >= _MIN_SECRET)
        self._addresses = _longest_first(a for a in addresses if a)

    @classmethod
    def for_upstream(
        cls,
        base_url: str,
        headers: Mapping[str, str],
        environ: Mapping[str, str] | None = None,
    ) -> Redactor:
        """What an upstream at ``base_url``, sent ``headers``, must never show anyone."""
        env = os.environ if environ is None else environ
        secrets = [v for name, v in env.items() if _SECRET_ENV.search(name)]
        for name, value in headers.items():
            if _SECRET_HEADER.search(name):
                secrets += [value, *value.split()[1:]]  # "Bearer <token>": the token alone too
        parts = urlsplit(base_url)
        secrets += [p for p in (parts.password, parts.username) if p]
        addresses = [base_url, base_url.rstrip("/"), f"{parts.scheme}://{parts.netloc}"]
        netloc = parts.netloc.rpartition("@")[2]
        addresses.append(netloc)
        host = parts.hostname or ""
        if host:
            default_port = 443 if parts.scheme == "https" else 80
            addresses.append(f"{host}:{parts.port or default_port}")
            if "." in host or ":" in host:  # a bare one-word name would mangle ordinary words
                addresses.append(host)
        return cls(secrets, addresses)

    def secrets_only(self, text: str) -> str:
        """``text`` without the known secrets, and nothing else changed (for what a
        server answers, whose addresses and key-shaped words may be its content)."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def for_log(self, text: str) -> str:
        """``text`` without secrets."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        text = _SCHEME_TOKEN.sub(rf"\1 {REDACTED}", text)
        return _KEY_SHAPED.sub(REDACTED, text)

    def for_client(self, text: str) -> str:
        """``text`` without secrets or addresses."""
        text = self.for_log(text)
        for address in self._addresses:
            if address in text:
                text = text.replace(address, ADDRESS)
        for pattern in (_URL, _IPV6, _IPV4, _HOST_PORT):
            text = pattern.sub(ADDRESS, text)
        return text


def secret_name(name: str) -> bool:
    """Whether a variable or header named ``name`` holds a secret by its name."""
    return bool(_SECRET_ENV.search(name) or _SECRET_HEADER.search(name))


def _longest_first(values: Iterable[str]) -> tuple[str, ...]:
    # a secret that contains another is replaced whole, before its part could be
    return tuple(sorted(set(values), key=len, reverse=True))
