"""Upstream text scrubbed where it becomes an error: secrets out of everything, internal
addresses out of what a client sees."""

from __future__ import annotations

import json

from structlog.testing import capture_logs

from backends.http import h1
from backends.http.errors import error_for_status, error_for_transport
from backends.http.redact import Redactor

KEY = "prov_0123456789abcdef"
SENT = {"authorization": f"Bearer {KEY}", "x-api-key": KEY, "user-agent": "shunter/0.1"}
BASE = "http://vllm-0.internal.svc:8000/v1"


def redactor() -> Redactor:
    return Redactor.for_upstream(BASE, SENT, environ={"SHUNTER_MASTER_KEY": "sk-master-xyz"})


def test_secrets_leave_the_log_and_addresses_leave_the_client_text() -> None:
    text = (
        f"bad header 'Bearer {KEY}' (token {KEY}), master sk-master-xyz, other Bearer abc.def,"
        f" calling {BASE}/chat at vllm-0.internal.svc:8000 via 10.1.2.3:5432 and [fd00::1]:80"
    )
    logged = redactor().for_log(text)
    assert KEY not in logged and "sk-master-xyz" not in logged and "abc.def" not in logged
    assert "vllm-0.internal.svc:8000" in logged  # the operator's log keeps where
    shown = redactor().for_client(text)
    for gone in (KEY, "sk-master-xyz", "vllm-0", "internal.svc", "10.1.2.3", "fd00", "5432"):
        assert gone not in shown
    assert "calling [upstream]" in shown


def test_a_google_key_is_taken_out_by_its_header_and_by_its_shape() -> None:
    google = "AIzaSyA0123456789abcdefghijklmnopqrstu"
    sent = Redactor.for_upstream("https://g.example", {"x-goog-api-key": google}, environ={})
    assert google not in sent.for_log(f"key {google} refused")
    other = "AIzaSyB9876543210zyxwvutsrqponmlkjihgf"  # one never sent: its shape gives it away
    assert sent.for_log(f"key {other} refused") == "key [redacted] refused"


def test_ordinary_words_and_headers_are_left_alone() -> None:
    scrub = Redactor.for_upstream("http://worker:8080/v1", SENT, environ={})
    text = "the worker is overloaded; retry at 12:30 with shunter/0.1"
    assert scrub.for_client(text) == text


def test_a_rejected_credential_tells_the_client_nothing_the_upstream_said() -> None:
    body = json.dumps({"error": {"message": f"Incorrect API key provided: {KEY} at {BASE}"}})
    with capture_logs() as logs:
        error = error_for_status("gpt", 401, body, {}, redactor())
    assert error.status_code == 502 and error.should_retry is False
    assert KEY not in error.message and "internal" not in error.message
    assert "rejected the gateway's credentials" in error.message
    assert error.upstream_body is not None and KEY not in error.upstream_body
    (line,) = [entry for entry in logs if entry["event"] == "upstream_error"]
    assert KEY not in line["body"] and "Incorrect API key provided" in line["body"]


def test_a_server_error_keeps_its_message_without_secrets_or_addresses() -> None:
    body = json.dumps({"error": {"message": f"db at 10.9.8.7:5432 refused Bearer {KEY}"}})
    error = error_for_status("gpt", 500, body, {}, redactor())
    assert "db at [upstream] refused [redacted]" in error.message
    request_error = error_for_status("gpt", 400, json.dumps({"error": "see " + BASE}), {})
    assert "internal" not in request_error.message and request_error.status_code == 400


def test_a_connect_error_names_no_address() -> None:
    failure = h1.ConnectError("cannot connect to 10.0.0.5:8000: [Errno 111] Connection refused")
    with capture_logs() as logs:
        error = error_for_transport("gpt", failure, redactor())
    assert error.status_code == 503
    assert error.message == "cannot connect to upstream gpt (ConnectError)"
    (line,) = [entry for entry in logs if entry["event"] == "upstream_unreachable"]
    assert "10.0.0.5:8000" in line["detail"]
