"""RawBody: a request body kept as sent, with only the members the gateway changes spliced."""

from __future__ import annotations

import json

import pytest

from gateway.errors import InvalidRequestError
from gateway.protocol.rawbody import RawBody

SENT = (
    b'{ "model" : "sonnet",\n  "max_tokens":1e3, "messages": [{"role": "user",'
    b' "content": "caf\\u00e9 \xc3\xa9t\xc3\xa9 \\"q\\""}], "x": [1.50, {"model": "inner"}] }\n'
)


def test_members_are_decoded_and_located() -> None:
    body = RawBody.read(SENT)
    assert body.data["model"] == "sonnet" and body.data["max_tokens"] == 1000.0
    member = body.members["model"]
    assert body.text[member.value_start : member.end] == '"sonnet"'
    assert body.text[member.start : member.start + 7] == '"model"'


def test_a_splice_changes_only_what_it_names() -> None:
    body = RawBody.read(SENT)
    out = body.spliced({"model": "claude-up"})
    assert out == SENT.replace(b'"sonnet"', b'"claude-up"')
    assert json.loads(out)["x"][1] == {"model": "inner"}


@pytest.mark.parametrize("key", ["model", "max_tokens", "x"])
def test_a_dropped_member_leaves_valid_json(key: str) -> None:
    body = RawBody.read(SENT)
    out = json.loads(body.spliced({}, (key,)))
    assert key not in out and set(out) == set(body.data) - {key}


def test_an_absent_member_is_added_at_the_end() -> None:
    assert json.loads(RawBody.read(b"{}").spliced({"stream": True})) == {"stream": True}
    out = RawBody.read(b'{"a": 1}').spliced({"stream": True}, ("missing",))
    assert out == b'{"a": 1,"stream":true}'
    only = RawBody.read(b'{"max_tokens": 5}').spliced({}, ("max_tokens",))
    assert json.loads(only) == {}


@pytest.mark.parametrize(
    "raw",
    [
        b"[1]",
        b'{"a": 1} x',
        b'{"a" 1}',
        b'{"a": 1,}',
        b"\xff",
        b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}",
    ],
)
def test_what_is_not_one_json_object_is_a_400(raw: bytes) -> None:
    with pytest.raises(InvalidRequestError, match="JSON"):
        RawBody.read(raw)
