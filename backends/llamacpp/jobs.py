"""An OpenAI request read for a :class:`GenerationJob`, and its :class:`Finished` read back.

In: the checks of what the engine does not do (``n``, ``best_of``, logprob counts), the
prompt of a text completion, vLLM-style extra sampling fields, the start token an empty
prompt is generated from. Out: the answer's ``finish_reason`` and ``usage``.
"""

from __future__ import annotations

from typing import Any, Literal

from backends.llamacpp.sampling import Finished
from gateway.errors import InvalidRequestError
from gateway.protocol import ChatCompletionRequest, CompletionRequest, Usage

MAX_TOP_LOGPROBS = 20


def start_of_text(bos: int, param: str) -> list[int]:
    """What an empty prompt is generated from: the BOS token alone, as OpenAI's completions
    answer an empty prompt as if from the start of a document. A model without a BOS token
    (``bos`` < 0) has nothing to start from: 400 naming ``param``."""
    if bos < 0:
        raise InvalidRequestError(
            "the prompt is empty and this model has no BOS token to start from", param=param
        )
    return [bos]


def extra_sampling(extra: dict[str, Any]) -> dict[str, Any]:
    """vLLM-style extra body fields: ``top_k`` (-1 or 0: off), ``min_p``, ``repetition_penalty``
    (alias ``repeat_penalty``)."""
    out: dict[str, Any] = {}
    top_k = extra.get("top_k")
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < -1:
            raise InvalidRequestError("top_k must be an integer >= -1", param="top_k")
        out["top_k"] = max(0, top_k)
    min_p = extra.get("min_p")
    if min_p is not None:
        if isinstance(min_p, bool) or not isinstance(min_p, int | float) or not 0 <= min_p <= 1:
            raise InvalidRequestError("min_p must be a number in [0, 1]", param="min_p")
        out["min_p"] = float(min_p)
    for name in ("repetition_penalty", "repeat_penalty"):
        value = extra.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 10:
            raise InvalidRequestError(f"{name} must be a number in (0, 10]", param=name)
        out["repeat_penalty"] = float(value)
    return out


def usage_of(finished: Finished) -> Usage:
    return Usage.of(
        finished.prompt_tokens, finished.completion_tokens, cached_tokens=finished.cached_tokens
    )


def reject_unsupported(*, n: int | None) -> None:
    if n not in (None, 1):
        raise InvalidRequestError("n > 1 is not supported; send separate requests", param="n")


def chat_top_logprobs(request: ChatCompletionRequest) -> int | None:
    """How many alternatives per token, or ``None`` when the request wants no logprobs."""
    top = request.top_logprobs
    if top is not None and not 0 <= top <= MAX_TOP_LOGPROBS:
        raise InvalidRequestError(
            f"'top_logprobs' must be between 0 and {MAX_TOP_LOGPROBS}", param="top_logprobs"
        )
    if not request.logprobs:
        if top is not None:
            raise InvalidRequestError(
                "'top_logprobs' needs 'logprobs' set to true", param="top_logprobs"
            )
        return None
    return top or 0


def finish_reason(finished: Finished, called: bool) -> Literal["stop", "length", "tool_calls"]:
    if finished.reason == "length":
        return "length"
    return "tool_calls" if called else "stop"


def prompt_text(request: CompletionRequest) -> str:
    if isinstance(request.prompt, str):
        return request.prompt
    if len(request.prompt) != 1:
        raise InvalidRequestError("send one prompt per request", param="prompt")
    return request.prompt[0]
