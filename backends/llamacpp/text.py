"""Engine-independent text steps of local generation: chat templates, UTF-8 and stops.

These are shared by every llama.cpp execution strategy (one sequence per context, or many
sequences batched in one context), so that streaming text, stop strings and token counts
behave the same whichever runs the model.
"""

from __future__ import annotations

import codecs
import json
from dataclasses import dataclass, field
from typing import Any

from jinja2.sandbox import ImmutableSandboxedEnvironment

from gateway.errors import InvalidRequestError

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + (message['content'] or '') + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class ChatTemplate:
    """A model's Jinja chat template, rendered in a sandbox as Hugging Face does."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "") -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.filters["tojson"] = _tojson
        self._template = env.from_string(source)
        self._bos_token = bos_token
        self._eos_token = eos_token

    def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> str:
        """The prompt for ``messages`` (as Hugging Face templates take them) and ``tools``."""
        try:
            return self._template.render(
                messages=messages,
                tools=tools,
                add_generation_prompt=True,
                bos_token=self._bos_token,
                eos_token=self._eos_token,
                raise_exception=_raise_template_error,
            )
        except InvalidRequestError:
            raise
        except Exception as exc:  # a template bug must not become a 500 without context
            raise InvalidRequestError(
                f"the model's chat template could not render these messages: {exc}",
                param="messages",
            ) from exc


def _tojson(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _raise_template_error(message: str) -> None:
    raise InvalidRequestError(f"chat template rejected the messages: {message}", param="messages")


@dataclass
class StopMatcher:
    """Holds back text that might begin a stop string; reports when one is reached."""

    stops: list[str]
    _pending: str = ""
    stopped: bool = False

    def feed(self, text: str) -> str:
        """Add generated text; return what can be sent to the client now."""
        if self.stopped or not text:
            return ""
        if not self.stops:
            return text
        self._pending += text
        cut = _earliest_stop(self._pending, self.stops)
        if cut is not None:
            self.stopped = True
            out, self._pending = self._pending[:cut], ""
            return out
        keep = _longest_stop_prefix_suffix(self._pending, self.stops)
        out = self._pending[: len(self._pending) - keep]
        self._pending = self._pending[len(self._pending) - keep :]
        return out

    def flush(self) -> str:
        """At the end of generation, release whatever was held back."""
        out, self._pending = ("" if self.stopped else self._pending), ""
        return out


def _earliest_stop(text: str, stops: list[str]) -> int | None:
    hits = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return min(hits) if hits else None


def _longest_stop_prefix_suffix(text: str, stops: list[str]) -> int:
    best = 0
    for stop in stops:
        for size in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:size]):
                best = size
                break
    return best


@dataclass
class TextAssembler:
    """Turns token bytes into text: UTF-8 split across tokens is held until complete."""

    stops: list[str] = field(default_factory=list)
    _decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace")
    )
    _matcher: StopMatcher = field(init=False)

    def __post_init__(self) -> None:
        self._matcher = StopMatcher(self.stops)

    @property
    def stopped(self) -> bool:
        return self._matcher.stopped

    def feed(self, piece: bytes) -> str:
        return self._matcher.feed(self._decoder.decode(piece))

    def finish(self) -> str:
        """What is still held, at the end of the answer.

        A character that ``max_tokens`` cut in the middle is dropped, not sent as U+FFFD:
        the decoder holds only the start of a valid sequence, so nothing else is lost.
        """
        self._decoder.reset()
        return self._matcher.flush()
