"""Parsing the wire models keeps nothing of a body once its model is gone: the short strings
of one request (its ids, a short prompt, an answer's text) are not held in pydantic-core's
process-wide string cache, which would fill with them request by request."""

from __future__ import annotations

from gateway.protocol import ChatCompletion, ChatCompletionRequest, jsonio

REQUEST = b'{"model": "m", "messages": [{"role": "user", "content": "question 7: 3f9a"}]}'
ANSWER = (
    b'{"id": "chatcmpl-1f2e", "object": "chat.completion", "created": 1, "model": "m", '
    b'"choices": [{"index": 0, "message": {"role": "assistant", "content": "answer 7: 3f9a"}, '
    b'"finish_reason": "stop"}]}'
)


def test_a_request_bodys_strings_are_not_cached_across_requests() -> None:
    first, second = (jsonio.validate_json(ChatCompletionRequest, REQUEST) for _ in range(2))
    assert first.messages[0].content == second.messages[0].content
    assert first.messages[0].content is not second.messages[0].content


def test_an_upstream_answers_strings_are_not_cached_across_answers() -> None:
    first, second = (jsonio.validate_json(ChatCompletion, ANSWER) for _ in range(2))
    assert first.id == second.id and first.id is not second.id
