"""A model's size in parameters: declared in the config, or read from its own files.

Routing ranks and filters on it (``smallest``, ``largest``, ``size``, see
:mod:`policies.size`); ``shunter route`` and ``shunter plan`` show it. A GGUF's size is the
sum of its tensors' elements (:func:`gateway.planner.gguf_meta.shape_from_gguf`); a Hugging
Face model directory's comes from its ``config.json`` shapes
(:func:`gateway.planner.hf_config.count_parameters`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from gateway.planner.hf_config import shape_from_hf_config
from gateway.planner.shape import ModelShape
from policies.size import format_params

MISMATCH = 0.2
"""A declared size further than this share from the file's is worth a warning."""


@dataclass(frozen=True)
class ModelSize:
    """Billions of parameters (``active_params_b``: used per token by a mixture of experts)
    and where the figure came from: ``declared``, ``gguf`` or ``hf-config``."""

    params_b: float
    active_params_b: float | None = None
    source: str = "declared"

    def describe(self) -> str:
        """``0.135B (gguf)``, ``46.7B, 12.9B active (declared)``."""
        text = format_params(self.params_b)
        if self.active_params_b is not None:
            text += f", {format_params(self.active_params_b)} active"
        return f"{text} ({self.source})"

    def differs(self, other: ModelSize) -> bool:
        """Whether the two sizes disagree by more than :data:`MISMATCH`."""
        low, high = sorted((self.params_b, other.params_b))
        return high > low * (1 + MISMATCH)


def size_of_shape(shape: ModelShape) -> ModelSize | None:
    """The size a planner shape counted, if it counted one."""
    if shape.parameters is None:
        return None
    active = shape.active_parameters
    source = "gguf" if shape.source == "gguf" else "hf-config"
    return ModelSize(shape.parameters / 1e9, None if active is None else active / 1e9, source)


def size_of_hf_dir(path: str | os.PathLike[str]) -> ModelSize | None:
    """The size a local Hugging Face model directory's ``config.json`` gives; ``None`` when
    ``path`` is not such a directory (a hub id, say). ``ValueError`` for a broken config."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return None
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read {config}: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{config} is not a JSON object")
    return size_of_shape(shape_from_hf_config(data))
