"""The drop-in's tensor methods in Mooncake's tensor object format: the header's bytes
(without torch: the layout Mooncake's TensorMetadata describes, checked field by field),
and the methods on a real redis-server and in process (torch's CPU build: the `tensor`
extra, which the test extra installs where a CPU build is served)."""

from __future__ import annotations

import ctypes
import struct
from pathlib import Path

import pytest
from test_mooncake_dropin import (  # noqa: F401 - the fixtures
    NAMESPACE,
    data_dir_fixture,
    index_fixture,
    open_store_fixture,
    store_fixture,
    url_fixture,
)

from mooncake_redis import Index
from mooncake_redis.mooncake import MooncakeDistributedStore, ReplicateConfig, SoftPinAction
from mooncake_redis.mooncake import tensor_format as fmt

INVALID_PARAMS, OBJECT_NOT_FOUND = -600, -704


def test_the_header_is_mooncakes_tensor_metadata() -> None:
    shard = fmt.Metadata(dtype=12, local_shape=(3, 2), global_shape=(3, 4),
                         layout_kind=fmt.SHARD, axes=(fmt.Axis(1, 0, 1, 2, 1),))
    header = shard.pack()
    assert len(header) == fmt.METADATA_SIZE == 304
    assert struct.unpack_from("<IHHiiIIQQ", header) == (0x4D4F4F4E, 1, 304, 12, 2, 1, 0, 304,
                                                        12)
    dims = struct.unpack_from("<16q", header, 40)
    assert dims == (3, 4) + (-1,) * 6 + (3, 2) + (-1,) * 6
    assert struct.unpack_from("<II", header, 168) == (1, 0)
    assert struct.unpack_from("<iiiiiiq", header, 176) == (1, 0, 1, 2, 1, 0, 0)
    assert header[208:] == bytes(96)
    assert fmt.parse(header + bytes(12)) == shard
    assert fmt.parse(header + bytes(11)) is None  # data_bytes must match the shape
    assert fmt.parse(b"\0" + header[1:] + bytes(12)) is None  # magic
    assert fmt.parse(header[:100]) is None


torch = pytest.importorskip("torch")


def test_put_and_get_tensors(store: MooncakeDistributedStore, index: Index) -> None:
    tensor = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert store.put_tensor("t", tensor) == 0
    assert torch.equal(store.get_tensor("t"), tensor)
    assert index.object_info("t").size == 304 + 48
    assert store.put_tensor("bad", [1, 2]) == INVALID_PARAMS
    assert store.get_tensor("nope") is None
    assert store.put("raw", b"x" * 400) == 0 and store.get_tensor("raw") is None
    kinds = [tensor.to(dtype) for dtype in (torch.bfloat16, torch.float16, torch.int8,
                                            torch.bool, torch.float8_e4m3fn)]
    keys = [f"d{n}" for n in range(len(kinds))]
    assert store.batch_put_tensor(keys + ["x"], kinds + ["no"]) == [0] * 5 + [INVALID_PARAMS]
    for got, want in zip(store.batch_get_tensor(keys + ["nope"]), kinds + [None]):
        assert (got is None and want is None) or (
            got.dtype == want.dtype and torch.equal(got.view(torch.uint8),
                                                    want.contiguous().view(torch.uint8)))
    assert store.put_tensor("t", tensor + 1) == 0  # put keeps the stored one
    assert store.upsert_tensor("t", tensor * 2) == 0 and torch.equal(store.get_tensor("t"),
                                                                     tensor * 2)
    assert store.batch_upsert_tensor(["t"], [tensor.t()]) == [0]  # not contiguous: copied
    assert torch.equal(store.get_tensor("t"), tensor.t().contiguous())
    assert store.put_tensor("empty", torch.zeros(0, 3)) == 0
    assert tuple(store.get_tensor("empty").shape) == (0, 3)


def test_pub_tensor_takes_a_replicate_config(store: MooncakeDistributedStore,
                                            index: Index) -> None:
    config = ReplicateConfig()
    config.with_hard_pin = True
    tensor = torch.ones(4)
    assert store.pub_tensor("hard", tensor, config) == 0
    assert index.object_info("hard").hard_pin
    soft = ReplicateConfig()
    soft.soft_pin_action = SoftPinAction.ENABLE
    assert store.batch_pub_tensor(["s1", "s2"], [tensor, tensor], soft) == [0, 0]
    assert index.object_info("s2").soft_pin
    assert store.upsert_pub_tensor("hard", tensor * 3, config) == 0
    assert store.batch_upsert_pub_tensor(["s1"], [tensor * 4], soft) == [0]
    assert torch.equal(store.get_tensor("s1"), tensor * 4)


def test_zero_copy_tensor_forms(store: MooncakeDistributedStore) -> None:
    tensor = torch.arange(6, dtype=torch.int64).reshape(2, 3)
    assert store.put_tensor("t", tensor) == 0
    memory = (ctypes.c_char * 4096)()
    address = ctypes.addressof(memory)
    into = store.get_tensor_into("t", address, 4096)
    assert torch.equal(into, tensor)
    into[0, 0] = 99  # the tensor is the caller's memory
    assert struct.unpack_from("<q", memory, 304)[0] == 99
    assert store.get_tensor_into("t", address, 100) is None  # too small
    assert store.get_tensor_into("t", 0, 4096) is None
    assert store.put_tensor_from("f", address, 304 + 48) == 0
    assert store.get_tensor("f")[0, 0].item() == 99
    assert store.put_tensor_from("bad", address, 304 + 40) == INVALID_PARAMS
    assert store.batch_put_tensor_from(["f2", "f3"], [address, 0], [352, 352]) == \
        [0, INVALID_PARAMS]
    assert store.upsert_tensor_from("f", address, 352) == 0
    assert store.batch_upsert_tensor_from(["f"], [address], [352]) == [0]
    other = (ctypes.c_char * 4096)()
    results = store.batch_get_tensor_into(["t", "nope"], [ctypes.addressof(other),
                                                          ctypes.addressof(other) + 2048],
                                          [2048, 2048])
    assert torch.equal(results[0], tensor) and results[1] is None
    assert store.batch_get_tensor_into(["t"], [address, address], [1]) == [INVALID_PARAMS]
    target = torch.zeros(2, 3, dtype=torch.int64)
    assert store.get_tensor_into_cuda("t", target) == 48 and torch.equal(target, tensor)
    assert store.batch_get_tensor_into_cuda(["t", "nope"], [torch.zeros(3), target]) == \
        [INVALID_PARAMS, OBJECT_NOT_FOUND]


def test_tensor_parallel_puts_store_a_chunk_per_rank(store: MooncakeDistributedStore,
                                                    index: Index) -> None:
    tensor = torch.arange(24, dtype=torch.float32).reshape(2, 12)
    assert store.put_tensor_with_tp("w", tensor, tp_size=3, split_dim=1) == 0
    for rank in range(3):
        chunk = store.get_tensor_with_tp("w", rank, 3)
        assert torch.equal(chunk, tensor[:, rank * 4:(rank + 1) * 4])
        assert index.object_info(f"w_tp_{rank}") is not None
    stored = bytes(store.get("w_tp_1")[:304])
    assert fmt.parse(stored + bytes(32)) == fmt.Metadata(
        0, (2, 4), (2, 12), fmt.SHARD, (fmt.Axis(1, 0, 1, 3, 1),))
    assert store.put_tensor_with_tp("u", tensor, tp_size=5, split_dim=1) == INVALID_PARAMS
    assert index.object_info("u_tp_0") is None
    assert store.put_tensor_with_tp("one", tensor) == 0 and torch.equal(
        store.get_tensor_with_tp("one"), tensor)
    assert store.batch_put_tensor_with_tp(["b1", "b2"], [tensor, tensor * 2], tp_size=2,
                                          split_dim=0) == [0, 0]
    assert [t.sum().item() for t in store.batch_get_tensor_with_tp(["b1", "b2"], 1, 2)] == \
        [tensor[1].sum().item(), 2 * tensor[1].sum().item()]
    config = ReplicateConfig()
    config.with_hard_pin = True
    assert store.pub_tensor_with_tp("p", tensor, config, tp_size=2, split_dim=1) == 0
    assert index.object_info("p_tp_1").hard_pin
    assert store.batch_pub_tensor_with_tp(["q"], [tensor], config, tp_size=2) == [0]
    memory = (ctypes.c_char * 4096)()
    address = ctypes.addressof(memory)
    assert store.get_tensor_into("b1_tp_0", address, 4096) is not None
    whole = fmt.Metadata(0, (2, 12), (2, 12)).pack() + tensor.numpy().tobytes()
    ctypes.memmove(address, whole, len(whole))
    assert store.put_tensor_with_tp_from("f", address, len(whole), tp_size=2, split_dim=1) == 0
    assert torch.equal(store.get_tensor_with_tp("f", 1, 2), tensor[:, 6:])
    assert store.batch_put_tensor_with_tp_from(["g"], [address], [len(whole)], tp_size=2,
                                               split_dim=1) == [0]
    out = (ctypes.c_char * 4096)()
    got = store.get_tensor_with_tp_into("g", ctypes.addressof(out), 4096, 0, 2)
    assert torch.equal(got, tensor[:, :6])
    assert [t is None for t in store.batch_get_tensor_with_tp_into(
        ["g", "nope"], [ctypes.addressof(out), ctypes.addressof(out) + 2048], [2048, 2048],
        1, 2)] == [False, True]


def test_safetensors_files(store: MooncakeDistributedStore, tmp_path: Path) -> None:
    assert store.save_tensor_to_safetensor("nope", str(tmp_path / "x")) == -1100
    assert store.load_tensor_from_safetensor("k", str(tmp_path / "missing")) is None
    pytest.importorskip("safetensors")
    tensor = torch.ones(3)
    assert store.put_tensor("k", tensor) == 0
    path = str(tmp_path / "k.safetensors")
    assert store.save_tensor_to_safetensor("k", path) == 0
    assert torch.equal(store.load_tensor_from_safetensor("copy", path), tensor)
    assert torch.equal(store.get_tensor("copy"), tensor)


def test_tensor_helpers_of_the_module(url: str) -> None:
    import mooncake_redis.mooncake as dropin

    tensor = torch.arange(4, dtype=torch.int16)
    header, address, size, owner = dropin._serialize_tensor(tensor)
    assert len(header) == dropin._tensor_metadata_size() == 304 and size == 8
    assert address == owner.data_ptr()
    assert torch.equal(dropin._deserialize_tensor(header + tensor.numpy().tobytes()), tensor)
    with pytest.raises(ValueError):
        dropin._serialize_tensor([1])
    with pytest.raises(ValueError):
        dropin._deserialize_tensor(b"junk")
    assert Index.from_url(url, NAMESPACE) is not None
