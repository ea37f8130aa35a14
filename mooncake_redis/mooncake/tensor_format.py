"""Mooncake's tensor object format, written from its description (TensorMetadata in
mooncake-integration/integration_utils.h): a 304-byte header, then the tensor's bytes
in row-major order. The header, little-endian with C alignment:

    magic u32 0x4d4f4f4e, version u16 1, header_size u16 304, dtype i32 (the codes of
    DTYPES), ndim i32 (0-8), layout_kind u32 (0 full tensor, 1 shard), flags u32 0,
    data_offset u64 304, data_bytes u64
    global_shape i64 x 8, local_shape i64 x 8 (dims past ndim are -1)
    axis_count u32 (0-4), reserved u32, then 4 axes of: kind i32 (0 DP, 1 TP, 2 EP,
    3 PP), axis_index i32, shard_rank i32, shard_count i32, split_dim i32, reserved
    i32, reserved i64

A tensor parallel shard (put_tensor_with_tp) is a shard object: its local shape is the
chunk's, its global shape the whole tensor's, with one TP axis. Objects written by
Mooncake's client and by the drop-in read the same in both. torch is needed only to make
and read tensors (the `tensor` extra); the header itself is plain struct packing.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass
from typing import Any

MAGIC, VERSION = 0x4D4F4F4E, 1
MAX_DIMS, MAX_AXES = 8, 4
FULL, SHARD = 0, 1
TP_AXIS = 1

_HEADER = struct.Struct("<IHHiiIIQQ")
_SHAPES = struct.Struct(f"<{MAX_DIMS}q{MAX_DIMS}qII")
_AXIS = struct.Struct("<iiiiiiq")
METADATA_SIZE = _HEADER.size + _SHAPES.size + MAX_AXES * _AXIS.size
"""304 bytes, Mooncake's sizeof(TensorMetadata)."""

DTYPES = ("float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
          "int64", "uint64", "bool", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
"""torch dtype names by Mooncake's dtype code (the position)."""
_SIZES = (4, 8, 1, 1, 2, 2, 4, 4, 8, 8, 1, 2, 2, 1, 1)


@dataclass(frozen=True)
class Axis:
    kind: int
    axis_index: int
    shard_rank: int
    shard_count: int
    split_dim: int


@dataclass(frozen=True)
class Metadata:
    dtype: int
    local_shape: tuple[int, ...]
    global_shape: tuple[int, ...]
    layout_kind: int = FULL
    axes: tuple[Axis, ...] = ()

    @property
    def data_bytes(self) -> int:
        count = 1
        for dim in self.local_shape:
            count *= dim
        return count * _SIZES[self.dtype]

    def pack(self) -> bytes:
        def dims(shape: tuple[int, ...]) -> list[int]:
            return list(shape) + [-1] * (MAX_DIMS - len(shape))

        axes = b"".join(_AXIS.pack(a.kind, a.axis_index, a.shard_rank, a.shard_count,
                                   a.split_dim, 0, 0) for a in self.axes)
        return (_HEADER.pack(MAGIC, VERSION, METADATA_SIZE, self.dtype, len(self.local_shape),
                             self.layout_kind, 0, METADATA_SIZE, self.data_bytes) +
                _SHAPES.pack(*dims(self.global_shape), *dims(self.local_shape),
                             len(self.axes), 0) +
                axes + bytes(_AXIS.size * (MAX_AXES - len(self.axes))))


def parse(data: bytes | bytearray | memoryview) -> Metadata | None:
    """The header of a tensor object of len(data) bytes, checked as Mooncake checks it
    (sizes, dtype, shapes, axes, and data_bytes matching the shape); None if invalid."""
    if len(data) < METADATA_SIZE:
        return None
    magic, version, header_size, dtype, ndim, kind, _, offset, size = \
        _HEADER.unpack_from(data, 0)
    values = _SHAPES.unpack_from(data, _HEADER.size)
    global_dims, local_dims = values[:MAX_DIMS], values[MAX_DIMS:2 * MAX_DIMS]
    axis_count = values[2 * MAX_DIMS]
    if (magic, version, header_size) != (MAGIC, VERSION, METADATA_SIZE) or not (
            0 <= dtype < len(DTYPES) and 0 <= ndim <= MAX_DIMS and kind in (FULL, SHARD)
            and axis_count <= MAX_AXES and METADATA_SIZE <= offset <= len(data)
            and size == len(data) - offset):
        return None
    if any(dim < 0 for dim in global_dims[:ndim] + local_dims[:ndim]) or any(
            dim != -1 for dim in global_dims[ndim:] + local_dims[ndim:]):
        return None
    axes = []
    for number in range(axis_count):
        kind_, index, rank, count, split_dim, _, _ = _AXIS.unpack_from(
            data, _HEADER.size + _SHAPES.size + number * _AXIS.size)
        if not (0 <= kind_ <= 4 and 0 <= rank < count and -1 <= split_dim < ndim):
            return None
        axes.append(Axis(kind_, index, rank, count, split_dim))
    metadata = Metadata(dtype, tuple(local_dims[:ndim]), tuple(global_dims[:ndim]), kind,
                        tuple(axes))
    return metadata if metadata.data_bytes == size and offset == METADATA_SIZE else None


# -- tensors (torch) -------------------------------------------------------------------------


def torch_module() -> Any:
    """torch, or ImportError naming the extra that installs it."""
    try:
        import torch
    except ImportError:
        raise ImportError("the tensor methods need torch: pip install "
                          "'mooncake-redis[tensor]' (or torch itself)") from None
    return torch


def dtype_code(tensor: Any) -> int | None:
    """Mooncake's code of the tensor's dtype; None for one it has none for."""
    name = str(tensor.dtype).removeprefix("torch.")
    return DTYPES.index(name) if name in DTYPES else None


def is_tensor(value: Any) -> bool:
    return "Tensor" in type(value).__name__ and hasattr(value, "dtype")


def describe(tensor: Any) -> tuple[Metadata, Any] | None:
    """A whole tensor's metadata and its bytes (a contiguous uint8 CPU tensor); None for
    a value that is not a tensor, or whose dtype or rank Mooncake cannot store."""
    if not is_tensor(tensor):
        return None
    code = dtype_code(tensor)
    if code is None or tensor.dim() > MAX_DIMS:
        return None
    shape = tuple(int(dim) for dim in tensor.shape)
    return Metadata(code, shape, shape), data_of(tensor)


def data_of(tensor: Any) -> Any:
    """The tensor's bytes as a contiguous uint8 CPU tensor."""
    flat = tensor.detach().contiguous().reshape(-1)
    if flat.device.type != "cpu":
        flat = flat.cpu()
    return flat.view(torch_module().uint8)


def shards(tensor: Any, count: int, split_dim: int) -> list[tuple[Metadata, Any]] | None:
    """The tensor cut into count equal chunks along split_dim (Mooncake's tensor
    parallel put): each chunk's shard metadata and bytes; None if the dimension does not
    divide evenly, or the tensor cannot be stored."""
    whole = describe(tensor)
    if whole is None or not 0 <= split_dim < tensor.dim() or count <= 0 or \
            tensor.shape[split_dim] % count:
        return None
    metadata = whole[0]
    step = tensor.shape[split_dim] // count
    result = []
    for rank in range(count):
        chunk = tensor.narrow(split_dim, rank * step, step)
        local = tuple(int(dim) for dim in chunk.shape)
        result.append((Metadata(metadata.dtype, local, metadata.global_shape, SHARD,
                                (Axis(TP_AXIS, 0, rank, count, split_dim),)),
                       data_of(chunk)))
    return result


def to_tensor(data: Any, metadata: Metadata) -> Any:
    """A tensor over an object's bytes (data: the whole object, a writable buffer; the
    tensor shares its memory)."""
    torch = torch_module()
    dtype = getattr(torch, DTYPES[metadata.dtype])
    if not metadata.data_bytes:
        return torch.empty(metadata.local_shape, dtype=dtype)
    raw = torch.frombuffer(data, dtype=torch.uint8, count=metadata.data_bytes,
                           offset=METADATA_SIZE)
    return raw.view(dtype).reshape(metadata.local_shape)


def tensor_at(address: int, length: int) -> Any:
    """The tensor a tensor object of length bytes at address holds (sharing that
    memory); None if the bytes are not a valid tensor object."""
    memory = (ctypes.c_char * length).from_address(address)
    metadata = parse(memoryview(memory).cast("B"))
    return None if metadata is None else to_tensor(memory, metadata)


def tensor_of(value: bytes | bytearray | memoryview) -> Any:
    """The tensor an object's bytes hold (a copy of them); None if not a tensor object."""
    owned = bytearray(value)
    metadata = parse(owned)
    return None if metadata is None else to_tensor(owned, metadata)


# -- mooncake.store's module helpers ------------------------------------------------------


def serialize_tensor(tensor: Any) -> tuple[bytes, int, int, Any]:
    """mooncake.store._serialize_tensor: (the header, the address of the tensor's bytes,
    their size, the contiguous CPU tensor that owns them); ValueError for a value that
    cannot be stored."""
    described = describe(tensor) if is_tensor(tensor) else None
    if described is None:
        raise ValueError("unsupported tensor for Mooncake tensor serialization")
    metadata, data = described
    return metadata.pack(), int(data.data_ptr()), metadata.data_bytes, data


def deserialize_tensor(payload: bytes) -> Any:
    """mooncake.store._deserialize_tensor: the tensor a tensor object's bytes hold;
    ValueError if they are not one."""
    tensor = tensor_of(payload)
    if tensor is None:
        raise ValueError("invalid serialized Mooncake tensor payload")
    return tensor


def tensor_metadata_size() -> int:
    """mooncake.store._tensor_metadata_size: the header's size."""
    return METADATA_SIZE
