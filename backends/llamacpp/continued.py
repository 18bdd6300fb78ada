"""The tokens of answers that stopped before their end, so that a continuation starts from
exactly those tokens.

A resumed stream (the gateway's mid-stream failover) asks a deployment to continue a
trailing assistant message: the delivered text, appended to the prompt with the assistant
turn left open. Tokenizing that text again need not give back the tokens the model chose
(a model may write ``" b" "afa"`` where the tokenizer reads ``" baf" "a"``), and a
different prompt gives a different continuation. So every llama.cpp engine of this process
notes the tokens it generated for a chat answer that did not finish (its engine failed or
stalled, its stream was cut off), by model file and prompt; a continuation of one of those
answers on any engine of the same model file appends the very tokens the first one
decoded, and greedy decoding then continues exactly as one uninterrupted engine would. On
the engine that generated them they are also its cached prefix (its KV is kept), so only
the few tokens past it are decoded again.

Bounded: the last :data:`KEPT` unfinished answers; a prompt is kept as its digest only.
"""

from __future__ import annotations

import hashlib
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable

KEPT = 32


def _digest(model: str, prompt: list[int]) -> bytes:
    tokens = array("i", prompt).tobytes()
    return hashlib.blake2b(model.encode() + b"\0" + tokens, digest_size=16).digest()


class Unfinished:
    """Generated tokens of unfinished chat answers, by model file and prompt."""

    def __init__(self, kept: int = KEPT) -> None:
        self._kept = kept
        self._answers: OrderedDict[bytes, list[int]] = OrderedDict()
        self._lock = threading.Lock()  # engines of several event loops may share a process

    def remember(self, model: str, prompt: list[int], generated: list[int]) -> None:
        """Note the tokens an answer to ``prompt`` got before it stopped short."""
        if not generated:
            return
        key = _digest(model, prompt)
        with self._lock:
            self._answers[key] = list(generated)
            self._answers.move_to_end(key)
            while len(self._answers) > self._kept:
                self._answers.popitem(last=False)

    def tokens(
        self, model: str, prompt: list[int], text: bytes, piece: Callable[[int], bytes]
    ) -> list[int] | None:
        """The generated tokens that spell ``text`` (the answer as delivered) after
        ``prompt``, or ``None`` when no noted answer does, up to a token boundary."""
        with self._lock:
            generated = self._answers.get(_digest(model, prompt))
        if generated is None:
            return None
        out: list[int] = []
        said = b""
        for token in generated:
            if len(said) >= len(text):
                break
            said += piece(token)
            out.append(token)
        return out if said == text else None


UNFINISHED = Unfinished()
"""The process's notes (every llama.cpp deployment of this process shares them)."""
