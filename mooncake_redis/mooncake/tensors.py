"""Mooncake's tensor methods: a torch tensor stored as one object in Mooncake's tensor
format (tensor_format.py), with put/get, batch, pub (a ReplicateConfig), upsert, zero-copy
(_from, _into), tensor-parallel (_with_tp: the tensor cut into tp_size equal chunks along
split_dim, stored as `<key>_tp_<rank>`) and safetensors forms, as mooncake.store 0.3.13.post1
answers them. torch is needed (the `tensor` extra), safetensors for the safetensors pair.

A tensor is written from its own memory (contiguous bytes), so local_buffer_size does not
bound it, as Mooncake's zero-copy tensor puts are not; a get stages it as get_buffer
does. Tensors of other devices are copied to and from the CPU. Not provided: the
*_with_parallelism methods (removed from Mooncake's C++ store in 0.3.14).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from . import tensor_format as fmt
from .buffers import view
from .checks import check_int, check_key, check_keys, check_list
from .codes import ErrorCode
from .replicate_config import ReplicateConfig, check_config
from .state import StoreCore

log = logging.getLogger(__name__)


def tp_key(key: str, rank: int) -> str:
    """The key of one tensor-parallel chunk, as Mooncake names it."""
    return f"{key}_tp_{rank}"


def _object(metadata: fmt.Metadata, data: Any) -> memoryview:
    """One tensor object: header then bytes."""
    return memoryview(metadata.pack() + data.numpy().tobytes()).cast("B")


class TensorMethods:
    # -- writing -------------------------------------------------------------------------

    def put_tensor(self: StoreCore, key: str, tensor: Any) -> int:
        return TensorMethods._one(self, key, tensor, None, upsert=False)

    def pub_tensor(self: StoreCore, key: str, tensor: Any,
                   config: ReplicateConfig | None = None) -> int:
        """put_tensor with a ReplicateConfig."""
        return TensorMethods._one(self, key, tensor, check_config(config), upsert=False)

    def upsert_tensor(self: StoreCore, key: str, tensor: Any) -> int:
        return TensorMethods._one(self, key, tensor, None, upsert=True)

    def upsert_pub_tensor(self: StoreCore, key: str, tensor: Any,
                          config: ReplicateConfig | None = None) -> int:
        return TensorMethods._one(self, key, tensor, check_config(config), upsert=True)

    def batch_put_tensor(self: StoreCore, keys: Sequence[str], tensors_list: Sequence[Any]
                         ) -> list[int]:
        return TensorMethods._write_tensors(self, check_keys(keys), tensors_list, None, False)

    def batch_pub_tensor(self: StoreCore, keys: Sequence[str], tensors_list: Sequence[Any],
                         config: ReplicateConfig | None = None) -> list[int]:
        return TensorMethods._write_tensors(self, check_keys(keys), tensors_list,
                                            check_config(config), False)

    def batch_upsert_tensor(self: StoreCore, keys: Sequence[str], tensors_list: Sequence[Any]
                            ) -> list[int]:
        return TensorMethods._write_tensors(self, check_keys(keys), tensors_list, None, True)

    def batch_upsert_pub_tensor(self: StoreCore, keys: Sequence[str],
                                tensors_list: Sequence[Any],
                                config: ReplicateConfig | None = None) -> list[int]:
        return TensorMethods._write_tensors(self, check_keys(keys), tensors_list,
                                            check_config(config), True)

    def put_tensor_from(self: StoreCore, key: str, buffer_ptr: int, size: int) -> int:
        """Store a tensor object already laid out in memory ([header][bytes], as
        get_tensor_into leaves one): INVALID_PARAMS unless it is a valid one."""
        return TensorMethods._write_from(self, [check_key(key)], [buffer_ptr], [size],
                                         False)[0]

    def upsert_tensor_from(self: StoreCore, key: str, buffer_ptr: int, size: int) -> int:
        return TensorMethods._write_from(self, [check_key(key)], [buffer_ptr], [size],
                                         True)[0]

    def batch_put_tensor_from(self: StoreCore, keys: Sequence[str],
                              buffer_ptrs: Sequence[int], sizes: Sequence[int]) -> list[int]:
        return TensorMethods._write_from(self, check_keys(keys), buffer_ptrs, sizes, False)

    def batch_upsert_tensor_from(self: StoreCore, keys: Sequence[str],
                                 buffer_ptrs: Sequence[int], sizes: Sequence[int]
                                 ) -> list[int]:
        return TensorMethods._write_from(self, check_keys(keys), buffer_ptrs, sizes, True)

    # -- tensor parallel writes ----------------------------------------------------------

    def put_tensor_with_tp(self: StoreCore, key: str, tensor: Any, tp_rank: int = 0,
                           tp_size: int = 1, split_dim: int = 0) -> int:
        """Cut the tensor into tp_size chunks along split_dim and store each as
        `<key>_tp_<rank>` (all ranks; tp_rank is not used, as in Mooncake); tp_size 1 is
        put_tensor. INVALID_PARAMS if the dimension does not divide evenly."""
        return TensorMethods._write_tp(self, [check_key(key)], [tensor], None, tp_size,
                                       split_dim)[0]

    def pub_tensor_with_tp(self: StoreCore, key: str, tensor: Any,
                           config: ReplicateConfig | None = None, tp_rank: int = 0,
                           tp_size: int = 1, split_dim: int = 0) -> int:
        return TensorMethods._write_tp(self, [check_key(key)], [tensor], check_config(config),
                                       tp_size, split_dim)[0]

    def batch_put_tensor_with_tp(self: StoreCore, base_keys: Sequence[str],
                                 tensors_list: Sequence[Any], tp_rank: int = 0,
                                 tp_size: int = 1, split_dim: int = 0) -> list[int]:
        return TensorMethods._write_tp(self, check_keys(base_keys), tensors_list, None,
                                       tp_size, split_dim)

    def batch_pub_tensor_with_tp(self: StoreCore, base_keys: Sequence[str],
                                 tensors_list: Sequence[Any],
                                 config: ReplicateConfig | None = None, tp_rank: int = 0,
                                 tp_size: int = 1, split_dim: int = 0) -> list[int]:
        return TensorMethods._write_tp(self, check_keys(base_keys), tensors_list,
                                       check_config(config), tp_size, split_dim)

    def put_tensor_with_tp_from(self: StoreCore, key: str, buffer_ptr: int, size: int,
                                tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0
                                ) -> int:
        """put_tensor_with_tp of the whole tensor object laid out at buffer_ptr."""
        return TensorMethods.batch_put_tensor_with_tp_from(
            self, [check_key(key)], [buffer_ptr], [size], tp_rank, tp_size, split_dim)[0]

    def batch_put_tensor_with_tp_from(self: StoreCore, base_keys: Sequence[str],
                                      buffer_ptrs: Sequence[int], sizes: Sequence[int],
                                      tp_rank: int = 0, tp_size: int = 1,
                                      split_dim: int = 0) -> list[int]:
        keys = check_keys(base_keys)
        if check_int(tp_size, "tp_size") <= 1:
            return TensorMethods._write_from(self, keys, buffer_ptrs, sizes, False)
        rows = _pointer_rows(keys, buffer_ptrs, sizes)
        if rows is None:
            return [ErrorCode.INVALID_PARAMS] * len(keys)
        tensors = [fmt.tensor_at(address, size) if _readable(self, address, size) else None
                   for address, size in rows]
        return TensorMethods._write_tp(self, keys, tensors, None, tp_size, split_dim)

    # -- reading -------------------------------------------------------------------------

    def get_tensor(self: StoreCore, key: str) -> Any:
        """The tensor stored under key; None if absent or not a tensor object."""
        return TensorMethods.batch_get_tensor(self, [check_key(key)])[0]

    def batch_get_tensor(self: StoreCore, keys: Sequence[str]) -> list[Any]:
        keys = check_keys(keys)
        fmt.torch_module()
        with self._lock:
            found = self._find(keys)
            results = []
            for key in keys:
                data = self._read(found[key], staged=True)
                results.append(fmt.tensor_of(data) if data else None)
            return results

    def get_tensor_into(self: StoreCore, key: str, buffer_ptr: int, size: int) -> Any:
        """Read the tensor object into memory at buffer_ptr: a tensor over that memory,
        or None."""
        got = TensorMethods.batch_get_tensor_into(self, [check_key(key)], [buffer_ptr], [size])
        return None if isinstance(got[0], int) else got[0]

    def batch_get_tensor_into(self: StoreCore, keys: Sequence[str],
                              buffer_ptrs: Sequence[int], sizes: Sequence[int]) -> list[Any]:
        """get_tensor_into for many: a tensor or None per key; INVALID_PARAMS for every
        key when the lists differ in length or an address is null."""
        keys = check_keys(keys)
        rows = _pointer_rows(keys, buffer_ptrs, sizes)
        if rows is None or any(not address for address, _ in rows):
            return [ErrorCode.INVALID_PARAMS] * len(keys)
        fmt.torch_module()
        read = self.batch_get_into(keys, [a for a, _ in rows], [n for _, n in rows])
        return [fmt.tensor_at(address, length) if length >= 0 else None
                for (address, _), length in zip(rows, read)]

    def get_tensor_into_cuda(self: StoreCore, key: str, tensor: Any) -> int:
        """Read the stored tensor's bytes into a tensor of the same dtype and shape (any
        device; Mooncake's CUDA IPC path is not needed): the bytes copied, or a code
        (INVALID_PARAMS for a destination that does not match, OBJECT_NOT_FOUND)."""
        return TensorMethods.batch_get_tensor_into_cuda(self, [check_key(key)], [tensor])[0]

    def batch_get_tensor_into_cuda(self: StoreCore, keys: Sequence[str],
                                   tensors_list: Sequence[Any]) -> list[int]:
        keys = check_keys(keys)
        targets = check_list(tensors_list, "tensors_list")
        if len(targets) != len(keys):
            return [ErrorCode.INVALID_PARAMS] * len(keys)
        stored = TensorMethods.batch_get_tensor(self, keys)
        results = []
        for target, tensor in zip(targets, stored):
            if tensor is None:
                results.append(ErrorCode.OBJECT_NOT_FOUND)
            elif not fmt.is_tensor(target) or not target.is_contiguous() or \
                    target.dtype != tensor.dtype or tuple(target.shape) != tuple(tensor.shape):
                results.append(ErrorCode.INVALID_PARAMS)
            else:
                target.copy_(tensor)
                results.append(tensor.numel() * tensor.element_size())
        return results

    def get_tensor_with_tp(self: StoreCore, key: str, tp_rank: int = 0, tp_size: int = 1,
                           split_dim: int = 0) -> Any:
        """The chunk of rank tp_rank (`<key>_tp_<rank>`); tp_size 1: get_tensor(key)."""
        return TensorMethods.get_tensor(self, _tp_read_key(check_key(key), tp_rank, tp_size))

    def batch_get_tensor_with_tp(self: StoreCore, base_keys: Sequence[str], tp_rank: int = 0,
                                 tp_size: int = 1) -> list[Any]:
        return TensorMethods.batch_get_tensor(
            self, [_tp_read_key(key, tp_rank, tp_size) for key in check_keys(base_keys)])

    def get_tensor_with_tp_into(self: StoreCore, key: str, buffer_ptr: int, size: int,
                                tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0
                                ) -> Any:
        return TensorMethods.get_tensor_into(
            self, _tp_read_key(check_key(key), tp_rank, tp_size), buffer_ptr, size)

    def batch_get_tensor_with_tp_into(self: StoreCore, base_keys: Sequence[str],
                                      buffer_ptrs: Sequence[int], sizes: Sequence[int],
                                      tp_rank: int = 0, tp_size: int = 1) -> list[Any]:
        return TensorMethods.batch_get_tensor_into(
            self, [_tp_read_key(key, tp_rank, tp_size) for key in check_keys(base_keys)],
            buffer_ptrs, sizes)

    # -- safetensors ---------------------------------------------------------------------

    def save_tensor_to_safetensor(self: StoreCore, key: str, file_name: str | None = None
                                  ) -> int:
        """Write the stored tensor to a safetensors file (named key by default), under
        its key: 0, FILE_NOT_FOUND if no tensor is stored under key, INVALID_PARAMS if the
        file cannot be written (or safetensors is not installed)."""
        key = check_key(key)
        tensor = TensorMethods.get_tensor(self, key)
        if tensor is None:
            return ErrorCode.FILE_NOT_FOUND
        try:
            from safetensors.torch import save_file

            save_file({key: tensor}, key if file_name is None else str(file_name))
        except Exception as error:  # noqa: BLE001 - safetensors' or the filesystem's
            log.error("save_tensor_to_safetensor: %s", error)
            return ErrorCode.INVALID_PARAMS
        return 0

    def load_tensor_from_safetensor(self: StoreCore, key: str | None = None,
                                    file_name: str | None = None) -> Any:
        """Read a safetensors file and store its tensor named key (the first one if it
        has none of that name) under key (default: the file name): the tensor, or None."""
        if file_name is None:
            raise TypeError("load_tensor_from_safetensor(): file_name is required")
        try:
            from safetensors.torch import load_file

            loaded = load_file(file_name)
        except Exception as error:  # noqa: BLE001 - safetensors' or the filesystem's
            log.error("load_tensor_from_safetensor: %s", error)
            return None
        if not loaded:
            return None
        target = file_name if key is None else check_key(key)
        tensor = loaded.get(target) if key is not None and target in loaded else \
            next(iter(loaded.values()))
        return tensor if TensorMethods.put_tensor(self, target, tensor) == 0 else None

    # -- shared ----------------------------------------------------------------------------

    def _one(self: StoreCore, key: str, tensor: Any, config: ReplicateConfig | None,
             upsert: bool) -> int:
        return TensorMethods._write_tensors(self, [check_key(key)], [tensor], config,
                                            upsert)[0]

    def _write_tensors(self: StoreCore, keys: list[str], tensors: Sequence[Any],
                       config: ReplicateConfig | None, upsert: bool) -> list[int]:
        values = check_list(tensors, "tensors_list")
        if len(values) != len(keys):
            return [ErrorCode.INVALID_PARAMS] * len(keys)
        fmt.torch_module()
        described = [fmt.describe(tensor) for tensor in values]
        objects = [_object(*item) if item else None for item in described]
        return TensorMethods._write_objects(self, keys, objects, config, upsert)

    def _write_tp(self: StoreCore, keys: list[str], tensors: Sequence[Any],
                  config: ReplicateConfig | None, tp_size: int, split_dim: int) -> list[int]:
        tp_size, split_dim = check_int(tp_size, "tp_size"), check_int(split_dim, "split_dim")
        values = check_list(tensors, "tensors_list")
        if tp_size <= 1:
            return TensorMethods._write_tensors(self, keys, values, config, False)
        if len(values) != len(keys):
            return [ErrorCode.INVALID_PARAMS] * len(keys)
        fmt.torch_module()
        chunk_keys: list[str] = []
        chunks: list[memoryview | None] = []
        owners: list[int] = []
        codes = [0] * len(keys)
        for number, (key, tensor) in enumerate(zip(keys, values)):
            cut = fmt.shards(tensor, tp_size, split_dim) if tensor is not None else None
            if cut is None:
                codes[number] = ErrorCode.INVALID_PARAMS
                continue
            for rank, item in enumerate(cut):
                chunk_keys.append(tp_key(key, rank))
                chunks.append(_object(*item))
                owners.append(number)
        for owner, code in zip(owners, TensorMethods._write_objects(
                self, chunk_keys, chunks, config, False)):
            codes[owner] = codes[owner] or code
        return codes

    def _write_from(self: StoreCore, keys: list[str], buffer_ptrs: Sequence[int],
                    sizes: Sequence[int], upsert: bool) -> list[int]:
        rows = _pointer_rows(keys, buffer_ptrs, sizes)
        if rows is None:
            return [ErrorCode.INVALID_PARAMS] * len(keys)
        objects = []
        for address, size in rows:
            memory = view(address, size) if _readable(self, address, size) else None
            objects.append(memory if memory is not None and fmt.parse(memory) else None)
        return TensorMethods._write_objects(self, keys, objects, None, upsert)

    def _write_objects(self: StoreCore, keys: list[str], objects: Sequence[memoryview | None],
                       config: ReplicateConfig | None, upsert: bool) -> list[int]:
        """Store the valid objects (None: INVALID_PARAMS for that key)."""
        with self._lock:
            state = self._open
            if state is None:
                return [ErrorCode.INVALID_PARAMS] * len(keys)
            ready = [n for n, value in enumerate(objects) if value is not None]
            codes = [ErrorCode.INVALID_PARAMS] * len(keys)
            written = self._write(state, [keys[n] for n in ready],
                                  [objects[n] for n in ready],  # type: ignore[misc]
                                  config, upsert)
            for number, code in zip(ready, written):
                codes[number] = code
            return codes


def _readable(store: StoreCore, address: int, size: int) -> bool:
    """Whether a tensor object may be read at address (buffers.py's rule)."""
    state = store._open
    return state is not None and size >= fmt.METADATA_SIZE and \
        state.buffers.allows(address, size, False)


def _pointer_rows(keys: list[str], buffer_ptrs: Sequence[int], sizes: Sequence[int]
                  ) -> list[tuple[int, int]] | None:
    pointers = [check_int(p, "buffer_ptr") for p in check_list(buffer_ptrs, "buffer_ptrs")]
    lengths = [check_int(n, "size") for n in check_list(sizes, "sizes")]
    if not len(keys) == len(pointers) == len(lengths):
        return None
    return list(zip(pointers, lengths))


def _tp_read_key(key: str, tp_rank: int, tp_size: int) -> str:
    return key if check_int(tp_size, "tp_size") <= 1 else tp_key(key, check_int(tp_rank,
                                                                               "tp_rank"))
