"""The collector stand-in of scripts/test-stack.sh: receives OTLP/HTTP and counts it.

POST /v1/traces (or /v1/metrics, /v1/logs) on :4318 is answered 200 with an empty export
response and printed as one line (signal, bytes), as the collector's debug exporter prints
one line per batch. GET on :13133 answers as the health_check extension does; GET on :8888
and :8889 answers Prometheus text with what was received. Command-line arguments (the
collector's --config) are accepted and ignored. Standard library only.
"""

from __future__ import annotations

import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RECEIVED: Counter[str] = Counter()
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        size = int(self.headers.get("content-length") or 0)
        self.rfile.read(size)
        signal = self.path.rsplit("/", 1)[-1]
        with LOCK:
            RECEIVED[signal] += 1
            RECEIVED[f"{signal}_bytes"] += size
        print(f"otlp {signal}: {size} bytes from {self.client_address[0]}", flush=True)
        self._send(200, "application/x-protobuf", b"")

    def do_GET(self) -> None:
        port = self.server.server_address[1]
        if port == 13133:
            self._send(200, "application/json", b'{"status":"Server available"}')
            return
        with LOCK:
            lines = [
                f'standin_otlp_received_total{{signal="{name}"}} {count}'
                for name, count in sorted(RECEIVED.items())
            ]
        self._send(200, "text/plain; version=0.0.4", ("\n".join(lines) + "\n").encode())

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return None


def main() -> None:
    ports = (4318, 13133, 8888, 8889)
    servers = [ThreadingHTTPServer(("0.0.0.0", port), Handler) for port in ports]
    for server in servers[1:]:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    print("otlp receiver stand-in: OTLP/HTTP on :4318, health on :13133", flush=True)
    servers[0].serve_forever()


if __name__ == "__main__":
    main()
