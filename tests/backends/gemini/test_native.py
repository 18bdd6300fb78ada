"""What the pass-through changes in a Gemini request: the ``model`` member, and the thought
signature Gemini 3 needs on a call of the current turn that another model made; every
other byte stays as the client wrote it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from backends.gemini.native import as_sent, signed
from backends.gemini.settings import SKIP_SIGNATURE

CALL = {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}
ANSWER = {"functionResponse": {"name": "get_weather", "response": {"temp_c": 21}}}
ASK = {"role": "user", "parts": [{"text": "Weather?"}]}


def _body(*contents: Any, tail: str = ', "generationConfig": {"temperature": 1.0E0}') -> bytes:
    return ('{"contents": ' + json.dumps(contents) + tail + "}").encode()


def test_a_call_made_elsewhere_in_the_current_turn_gets_the_marker() -> None:
    older = {"role": "model", "parts": [CALL]}  # an earlier turn: Gemini 3 checks it not
    made = {"role": "model", "parts": [{"text": "Let me look."}, CALL, CALL]}
    body = _body(ASK, older, {"role": "user", "parts": [ANSWER]}, ASK, made)
    sent = as_sent(body, "gemini-3-pro-preview", SKIP_SIGNATURE)
    assert sent.endswith(b', "generationConfig": {"temperature": 1.0E0}}')  # as written
    contents = json.loads(sent)["contents"]
    assert contents[1] == older and contents[:4] == json.loads(body)["contents"][:4]
    parts = contents[4]["parts"]
    assert parts[0] == {"text": "Let me look."}
    assert parts[1] == {**CALL, "thoughtSignature": SKIP_SIGNATURE}
    assert parts[2] == CALL  # a turn's first call is the one Gemini signs


def test_function_responses_do_not_end_the_current_turn() -> None:
    step = {"role": "model", "parts": [CALL]}
    answered = {"role": "user", "parts": [ANSWER]}
    contents = signed([ASK, step, answered, step, answered], SKIP_SIGNATURE)
    assert contents is not None
    assert [c["parts"][0].get("thoughtSignature") for c in contents[1::2]] == [
        SKIP_SIGNATURE,
        SKIP_SIGNATURE,
    ]


@pytest.mark.parametrize(
    "made",
    [
        {"role": "model", "parts": [{**CALL, "thoughtSignature": "c2lnbmVk"}, CALL]},
        {"role": "model", "parts": [{"function_call": {"name": "f"}, "thought_signature": "c2ln"}]},
        {"role": "model", "parts": [{"text": "no calls"}]},
        {"role": "model", "parts": "not a list"},
        "not a turn",
    ],
)
def test_a_body_that_needs_nothing_goes_as_written(made: Any) -> None:
    body = _body(ASK, made)
    assert as_sent(body, "gemini-3-pro-preview", SKIP_SIGNATURE) == body


def test_without_a_marker_nothing_is_added_and_the_model_is_the_deployments() -> None:
    body = _body(ASK, {"role": "model", "parts": [CALL]}, tail=', "model": "models/mine"')
    assert as_sent(body, "gemini-x", None) == body.replace(b"models/mine", b"models/gemini-x")
    assert signed({"contents": "odd"}, SKIP_SIGNATURE) is None
