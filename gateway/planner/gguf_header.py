"""A GGUF file's header read directly: metadata and tensor table, nothing else.

``gguf.GGUFReader`` builds an array view for every metadata item, so a 49k-token
vocabulary costs it seconds; planning needs a dozen scalar keys and the tensor sizes.
This reader walks the same layout (GGUF v2/v3, little-endian) and keeps scalars and short
arrays, and of a string array or a long one only its length. It also says whether the file
holds all the tensor data its table promises (a cut-off download does not).
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from typing import Any

_MAGIC = b"GGUF"
_SCALARS = {
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i",
    6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d",
}  # fmt: skip
_STRING, _ARRAY = 8, 9
_DEFAULT_ALIGNMENT = 32
_KEPT_ITEMS = 1024  # per-layer arrays are kept; vocabulary scores and types are not


@dataclass(frozen=True)
class SkippedList:
    """An array of the metadata that was not kept (strings, or long): its length."""

    count: int


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of the table: its name, size in bytes, offset in the data section and
    number of elements (parameters)."""

    name: str
    n_bytes: int
    offset: int
    elements: int = 0


@dataclass(frozen=True)
class GGUFHeader:
    """What the header of a GGUF file says."""

    fields: dict[str, Any]
    tensors: list[TensorInfo]
    data_offset: int
    file_size: int

    @property
    def missing_bytes(self) -> int:
        """How many bytes of tensor data the file lacks (0 for a whole file)."""
        end = max((t.offset + t.n_bytes for t in self.tensors), default=0)
        return max(0, self.data_offset + end - self.file_size)


def read_gguf_header(path: str | os.PathLike[str]) -> GGUFHeader:
    """Parse the header of ``path``; ``ValueError`` when it is not a readable GGUF."""
    with open(path, "rb") as handle:
        head = handle.read(len(_MAGIC))
        if head != _MAGIC:
            raise ValueError(f"not a GGUF file (it starts with {head!r}, not {_MAGIC!r})")
        size = os.fstat(handle.fileno()).st_size
        if size < 24:
            raise ValueError(f"the file is cut short: {size} bytes, no whole GGUF header")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            try:
                return _Cursor(data).header(size)
            except (struct.error, IndexError) as exc:
                raise ValueError(f"the GGUF header is cut short or damaged ({exc})") from None


class _Cursor:
    def __init__(self, data: mmap.mmap) -> None:
        self.data = data
        self.at = 0

    def header(self, size: int) -> GGUFHeader:
        self.at = len(_MAGIC)
        version = self.scalar("<I")
        if version not in (2, 3):
            raise ValueError(f"GGUF version {version} is not supported (2 and 3 are)")
        n_tensors, n_fields = self.scalar("<Q"), self.scalar("<Q")
        fields = {}
        for _ in range(n_fields):
            key = self.string()
            fields[key] = self.value(self.scalar("<I"))
        tensors = [self.tensor() for _ in range(n_tensors)]
        alignment = int(fields.get("general.alignment", _DEFAULT_ALIGNMENT)) or 1
        data_offset = -(-self.at // alignment) * alignment
        return GGUFHeader(fields, tensors, data_offset, size)

    def scalar(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        length = self.scalar("<Q")
        if self.at + length > len(self.data):
            raise IndexError("a string runs past the end of the file")
        text = bytes(self.data[self.at : self.at + length]).decode("utf-8", errors="replace")
        self.at += length
        return text

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind != _ARRAY:
            raise ValueError(f"unknown GGUF value type {kind}")
        item_kind, count = self.scalar("<I"), self.scalar("<Q")
        if item_kind == _STRING:
            for _ in range(count):
                length = self.scalar("<Q")  # read first: it moves the cursor
                self.at += length
            return SkippedList(count)
        if item_kind in _SCALARS and count > _KEPT_ITEMS:
            self.at += count * struct.calcsize(_SCALARS[item_kind])
            return SkippedList(count)
        return [self.value(item_kind) for _ in range(count)]

    def tensor(self) -> TensorInfo:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

        name = self.string()
        dims = [self.scalar("<Q") for _ in range(self.scalar("<I"))]
        kind, offset = self.scalar("<I"), self.scalar("<Q")
        try:
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
        except (ValueError, KeyError):
            raise ValueError(f"tensor {name!r} has an unknown type {kind}") from None
        elements = 1
        for dim in dims:
            elements *= dim
        return TensorInfo(name, elements * type_size // block, offset, elements)
