"""Memory planner: will a model fit a device, with what context, slots or offload?

Read a model (:func:`shape_from_gguf`, :func:`shape_from_hf_config`), take a device
(:class:`Device`, declared or from :func:`discover_devices`), and call
:func:`plan_memory`; ``render.plan_table`` renders plans for ``shunter plan`` (imported
where it is used: it needs rich, which a server never loads). The plan's
``fit`` feeds ``CandidateFacts.fit`` (the ``fits_memory`` filter) and its ``gpu_layers``
feeds ``gpu_layers: auto``.
"""

from gateway.planner.devices import Device, DeviceKind, discover_devices
from gateway.planner.gguf_meta import shape_from_gguf, shape_from_reader
from gateway.planner.hf_config import count_parameters, shape_from_hf_config
from gateway.planner.plan import MemoryPlan, estimate_overhead, plan_memory
from gateway.planner.shape import KV_DTYPE_BYTES, ModelShape, kv_dtype_bytes
from gateway.planner.size import ModelSize, size_of_hf_dir, size_of_shape

__all__ = [
    "KV_DTYPE_BYTES",
    "Device",
    "DeviceKind",
    "MemoryPlan",
    "ModelShape",
    "ModelSize",
    "count_parameters",
    "discover_devices",
    "estimate_overhead",
    "kv_dtype_bytes",
    "plan_memory",
    "shape_from_gguf",
    "shape_from_hf_config",
    "shape_from_reader",
    "size_of_hf_dir",
    "size_of_shape",
]
