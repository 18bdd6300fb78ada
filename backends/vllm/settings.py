"""Settings of an in-process vLLM deployment. Imports nothing from vLLM."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from backends.base import DeploymentSettings
from backends.vllm.install import check_available
from gateway.planner import ModelSize, size_of_hf_dir

Modality = Literal["image", "audio", "video"]
"""An input a multimodal model reads besides text, as vLLM names it."""


class LoRAAdapter(BaseModel):
    """A LoRA adapter loaded at start; a request whose ``model`` is ``name`` uses it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    path: str = Field(min_length=1)


class VLLMSettings(DeploymentSettings):
    """A Hugging Face model served by vLLM's engine inside the gateway process.

    ``model`` is a Hugging Face id or a local directory. Engine fields keep vLLM's names and
    defaults (``None`` leaves vLLM's default); ``extra_engine_args`` passes any other
    ``AsyncEngineArgs`` field through unchanged.
    """

    backend: Literal["vllm"]
    dtype: str = "auto"
    gpu_memory_utilization: float = Field(default=0.92, gt=0, le=1)
    max_model_len: int | None = Field(default=None, ge=16)
    max_num_seqs: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=16)
    enable_prefix_caching: bool | None = None
    kv_cache_dtype: str = "auto"
    quantization: str | None = None
    tensor_parallel_size: int = Field(default=1, ge=1)
    speculative_config: dict[str, Any] | None = None
    enforce_eager: bool = False
    lora_adapters: list[LoRAAdapter] = Field(default_factory=list)
    max_lora_rank: int | None = Field(default=None, ge=1)
    tool_call_parser: str | None = Field(
        default=None, description="vLLM tool parser (e.g. hermes); enables tool_choice auto"
    )
    reasoning_parser: str | None = None
    chat_template: str | None = Field(default=None, description="a Jinja template or its path")
    modalities: list[Modality] = Field(
        default_factory=list,
        description=(
            "what the model reads besides text (image, audio, video) until it is loaded; "
            "once loaded, vLLM's own answer counts"
        ),
    )
    trust_remote_code: bool = False
    sleep_after_idle_s: float | None = Field(
        default=None, gt=0, description="sleep the engine (weights offloaded) after this idle time"
    )
    drain_timeout_s: float = Field(default=30.0, ge=0)
    extra_engine_args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _checks(self) -> VLLMSettings:
        names = [adapter.name for adapter in self.lora_adapters]
        if len(set(names)) != len(names):
            raise ValueError("lora_adapters names must be unique")
        if self.model in names:
            raise ValueError("a LoRA adapter cannot have the base model's name")
        clash = sorted(set(self.extra_engine_args) & set(type(self).model_fields))
        if clash:
            raise ValueError(f"extra_engine_args repeats typed fields: {', '.join(clash)}")
        return self

    def file_size(self) -> ModelSize | None:
        """A local model directory's size, from its config.json (a hub id: unknown)."""
        return size_of_hf_dir(self.model)

    def returns_logprobs(self) -> bool:
        return True

    def engine_missing(self) -> str | None:
        return check_available()

    def engine_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``AsyncEngineArgs``; fields left ``None`` are omitted."""
        kwargs: dict[str, Any] = {
            "model": self.model,
            "served_model_name": [self.model],
            "dtype": self.dtype,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "enable_prefix_caching": self.enable_prefix_caching,
            "kv_cache_dtype": self.kv_cache_dtype,
            "quantization": self.quantization,
            "tensor_parallel_size": self.tensor_parallel_size,
            "speculative_config": self.speculative_config,
            "enforce_eager": self.enforce_eager,
            "trust_remote_code": self.trust_remote_code,
            "enable_sleep_mode": self.sleep_after_idle_s is not None,
        }
        if self.lora_adapters:
            kwargs["enable_lora"] = True
            kwargs["max_loras"] = len(self.lora_adapters)
            kwargs["max_lora_rank"] = self.max_lora_rank
        kwargs.update(self.extra_engine_args)
        return {key: value for key, value in kwargs.items() if value is not None}
