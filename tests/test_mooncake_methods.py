"""The drop-in's methods beyond the first 32 (issue 35): Mooncake 0.3.14's probes and
ReplicateConfig, replica descriptors, replica clear, copy and move tasks, the segment
calls, dummy setup, sessions and ranged transfers, the buffer pool, the tensor API, and
the names mooncake.store exports. Each is held to what the real client answers
(scripts/check_mooncake_dropin.py compares them call by call, on 0.3.13.post1 and
0.3.14), with the state checked in Redis and on disk, on a real redis-server and in
process (the fixtures of test_mooncake_dropin.py)."""

from __future__ import annotations

import ctypes
import gc
import os
import threading
from pathlib import Path

import pytest
from test_mooncake_dropin import (  # noqa: F401 - the fixtures
    NAMESPACE,
    Opener,
    config_for,
    data_dir_fixture,
    disk,
    index_fixture,
    memory,
    open_store_fixture,
    store_fixture,
    url_fixture,
    wait_until,
)

import mooncake_redis.mooncake as dropin
from mooncake_redis import Index
from mooncake_redis.mooncake import (
    BufferPool,
    ExistOptions,
    MooncakeDistributedStore,
    ReplicateConfig,
    TaskStatus,
    TaskType,
)
from mooncake_redis.mooncake.probes import leased_group
from mooncake_redis.mooncake.setup_options import client_port_range

INVALID_PARAMS, OBJECT_NOT_FOUND, OBJECT_HAS_LEASE, TASK_NOT_FOUND = -600, -704, -706, -1400


def leased(index: Index, key: str) -> bool:
    info = index.object_info(key)
    return info is not None and info.lease_ms > index.redis_time_ms()


def lease_over(index: Index, *keys: str) -> None:
    wait_until(lambda: not any(leased(index, key) for key in keys), "the read leases to end")


# -- 0.3.14: probes, ExistOptions, ReplicateConfig -----------------------------------------


@pytest.mark.parametrize(("results", "size", "group"), [
    ([1, 1, 0, 1], 1, [3]), ([1, 1, 1, 1, 0, 1], 2, [2, 3]), ([1, 0, 1, 1, 1, 0], 2, [2, 3]),
    ([1, 1, 1, 0, 1, 1], 3, [0, 1, 2]), ([0, 0], 1, []), ([1, 1, 0, 0], 1, [1]),
    ([], 2, [])])
def test_last_hit_only_leases_the_last_all_hit_group(results: list[int], size: int,
                                                     group: list[int]) -> None:
    """The groups 0.3.14's client and master lease (measured on them)."""
    assert list(leased_group(results, size)) == group


def test_probe_key_grants_no_lease_and_is_exist_does(store: MooncakeDistributedStore,
                                                     index: Index) -> None:
    assert store.put("p", b"v") == 0 and store.put("e", b"v") == 0
    assert not leased(index, "p")
    assert store.probe_key("p") == 1 and store.probe_key("nope") == 0
    assert store.probe_key("") == 0
    assert not leased(index, "p") and store.remove("p") == 0
    assert store.is_exist("e") == 1 and leased(index, "e")
    assert store.remove("e") == OBJECT_HAS_LEASE


def test_batch_probe_key_policies(store: MooncakeDistributedStore, index: Index) -> None:
    keys = [f"k{n}" for n in range(4)]
    for key in keys:
        assert store.put(key, b"v") == 0
    assert store.batch_probe_key([keys[0], "nope", keys[1]]) == [1, 0, 1]
    assert not any(leased(index, key) for key in keys)
    # groups [k0, nope] [k1, k2] [k3, nope]: only the last all-hit group is leased
    assert store.batch_probe_key([keys[0], "nope", keys[1], keys[2], keys[3], "nope"],
                                 "LastHitOnly", 2) == [1, 0, 1, 1, 1, 0]
    assert [leased(index, key) for key in keys] == [False, True, True, False]
    assert store.batch_probe_key(["a", "b"], "LastHitOnly", 3) == [INVALID_PARAMS] * 2
    assert store.batch_probe_key(["a"], "LastHitOnly", 0) == [INVALID_PARAMS]
    assert store.batch_probe_key(["a"], "none", 0) == [0]
    assert store.batch_probe_key([], "LastHitOnly", 2) == []
    with pytest.raises(ValueError, match="Unknown batch_probe_key policy: lasthitonly"):
        store.batch_probe_key(["a"], "lasthitonly")
    with pytest.raises(TypeError):
        store.batch_probe_key(["a"], "none", -1)


def test_is_exist_takes_exist_options(store: MooncakeDistributedStore) -> None:
    options = ExistOptions()
    assert str(options) == "ExistOptions: { prefetch_to_memory: 0 }"
    options.prefetch_to_memory = True
    assert options.prefetch_to_memory is True
    assert store.put("k", b"v") == 0
    assert store.is_exist("k", options) == 1 and store.is_exist("nope", options) == 0
    assert store.batch_is_exist(["k", "nope"], options=options) == [1, 0]
    with pytest.raises(TypeError):
        store.is_exist("k", "prefetch")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        options.prefetch_to_memory = "yes"


def test_replicate_config_types_its_fields_as_pybind_does(store: MooncakeDistributedStore
                                                          ) -> None:
    config = ReplicateConfig()
    assert [config.session_ids, config.residency_affinity_ids, config.preferred_hca_names,
            config.per_key_preferred_hca_names] == [None] * 4
    with pytest.raises(TypeError):
        config.soft_pin_ttl_ms = 1 << 64  # a uint64 field
    config.soft_pin_ttl_ms = (1 << 64) - 1
    assert config.soft_pin_ttl_ms == (1 << 64) - 1
    config.soft_pin_ttl_ms = True  # pybind takes a bool as 1
    assert config.soft_pin_ttl_ms == 1
    for value in (-1, 1.5):
        with pytest.raises(TypeError):
            config.soft_pin_ttl_ms = value
    with pytest.raises(TypeError):
        config.replica_num = 1 << 64
    config.with_hard_pin = 1
    assert config.with_hard_pin is True
    config.session_ids = ["s"]
    config.residency_affinity_ids = ["r"]
    config.preferred_hca_names = ["mlx5_0"]
    config.per_key_preferred_hca_names = [["mlx5_0"], []]
    for name, value in (("session_ids", "s"), ("residency_affinity_ids", [1]),
                        ("per_key_preferred_hca_names", ["mlx5_0"])):
        with pytest.raises(TypeError):
            setattr(config, name, value)
    config.soft_pin_ttl_ms = None
    assert store.put("k", b"v", config) == 0  # accepted, and used by nothing here


def test_the_segment_port_is_drawn_from_mooncakes_client_range(
        open_store: Opener, monkeypatch: pytest.MonkeyPatch) -> None:
    port = int(open_store().get_hostname().rsplit(":", 1)[1])
    assert 12300 <= port <= 14300
    monkeypatch.setenv("MC_STORE_CLIENT_MIN_PORT", "14500")
    monkeypatch.setenv("MC_STORE_CLIENT_MAX_PORT", "14510")
    assert 14500 <= int(open_store().get_hostname().rsplit(":", 1)[1]) <= 14510
    for low, high in (("40000", "40010"), ("14510", "14500"), ("80", "90"), ("x", "1")):
        assert client_port_range({"MC_STORE_CLIENT_MIN_PORT": low,
                                  "MC_STORE_CLIENT_MAX_PORT": high}) == (12300, 14300)


# -- replicas, tasks, segments --------------------------------------------------------------


def test_replica_descriptors_name_the_segment(store: MooncakeDistributedStore,
                                              index: Index) -> None:
    assert store.put("k", b"hello") == 0
    (replica,) = store.get_replica_desc("k")
    assert replica.is_memory_replica() and not replica.is_disk_replica()
    assert str(replica.status) == "ReplicaStatus.COMPLETE"
    descriptor = replica.get_memory_descriptor().buffer_descriptor
    assert (descriptor.transport_endpoint, descriptor.size) == (store.get_hostname(), 5)
    with pytest.raises(RuntimeError, match="Expected DiskDescriptor"):
        replica.get_disk_descriptor()
    assert leased(index, "k")  # a lookup leases, as Mooncake's Query does
    assert store.get_replica_desc("nope") == []
    assert list(store.batch_get_replica_desc(["k", "nope"])) == ["k"]
    assert store.batch_get_replica_desc([]) == {}


def test_batch_replica_clear_drops_replicas_whose_lease_ended(
        open_store: Opener, url: str, data_dir: Path) -> None:
    Index.from_url(url, NAMESPACE, lease_ttl_ms=300)
    first, second = open_store(), open_store()
    index = Index.from_url(url, NAMESPACE)
    two = ReplicateConfig()
    two.replica_num = 2
    assert first.put("both", b"12345", two) == 0
    assert first.put("one", b"x") == 0 and first.get("one") == b"x"
    assert first.batch_replica_clear(["one"]) == []  # leased
    lease_over(index, "both", "one")
    hosts = {first.get_hostname(), second.get_hostname()}
    assert {r.segment for r in index.object_info("both").replicas} == hosts
    assert first.batch_replica_clear(["both", "nope"], segment_name=first.get_hostname()) == \
        ["both"]
    assert [r.segment for r in index.object_info("both").replicas] == [second.get_hostname()]
    assert second.get("both") == b"12345"
    assert first.batch_replica_clear(["one"], segment_name="nosuch:1") == []
    assert first.batch_replica_clear(["one"]) == ["one"]
    assert index.object_info("one") is None and first.get("one") == b""
    wait_until(lambda: len(disk(data_dir)) == 1, "the cleared replicas' files to go")


def test_copy_and_move_tasks_rewrite_the_replicas(open_store: Opener, url: str) -> None:
    first, second, third = open_store(), open_store(), open_store(global_segment_size=0)
    index = Index.from_url(url, NAMESPACE)
    here = ReplicateConfig()
    here.preferred_segment = first.get_hostname()
    assert third.put("k", b"payload", here) == 0
    task, code = third.create_copy_task("k", [second.get_hostname()])
    assert code == 0 and isinstance(task, tuple) and len(task) == 2
    response, code = third.query_task(task)
    assert code == 0 and response is not None
    assert (response.type, response.status) == (TaskType.REPLICA_COPY, TaskStatus.SUCCESS)
    assert {r.segment for r in index.object_info("k").replicas} == \
        {first.get_hostname(), second.get_hostname()}
    task, code = third.create_move_task("k", first.get_hostname(), second.get_hostname())
    assert code == 0 and third.query_task(task)[0].status == TaskStatus.SUCCESS
    assert [r.segment for r in index.object_info("k").replicas] == [second.get_hostname()]
    assert first.get("k") == b"payload"
    assert third.create_copy_task("nope", [first.get_hostname()]) == ((0, 0), OBJECT_NOT_FOUND)
    assert third.create_copy_task("k", ["nosuch:1"]) == ((0, 0), INVALID_PARAMS)
    assert third.create_copy_task("k", []) == ((0, 0), INVALID_PARAMS)
    assert third.create_move_task("k", second.get_hostname(), second.get_hostname()) == \
        ((0, 0), INVALID_PARAMS)
    assert third.query_task((1, 2)) == (None, TASK_NOT_FOUND)
    with pytest.raises(TypeError):
        third.query_task(5)  # type: ignore[arg-type]


def test_segment_calls_change_the_stores_segment(store: MooncakeDistributedStore,
                                                 index: Index, tmp_path: Path) -> None:
    def capacity() -> int:
        return index.usage().segments[store.get_hostname()].capacity_bytes

    base = capacity()
    backing = tmp_path / "segment"
    backing.write_bytes(b"")
    mounted = store.mount_segment(str(backing), 32 << 20)
    assert mounted["ret"] == 0 and len(mounted["segment_ids"]) == 1
    assert capacity() == base + (32 << 20)
    assert store.mount_segment(str(tmp_path / "nope"), 1 << 20) == \
        {"ret": -1, "segment_ids": []}
    allocated = store.allocate_and_mount_segment(1024)  # rounded up to 16 MiB
    assert allocated["ret"] == 0 and allocated["allocated_size"] == 16 << 20
    assert capacity() == base + (48 << 20)
    assert store.unmount_segment(mounted["segment_ids"]) == 0
    assert store.unmount_segment(mounted["segment_ids"]) == -1  # not mounted any more
    assert store.unmount_and_free_segment(allocated["segment_ids"]) == 0
    assert capacity() == base
    assert store.unmount_segment(["nosuch"]) == -1 and store.unmount_segment([]) == 0
    assert store.unmount_local_disk_segment(5) == 0 and store.get_offload_rpc_read_count() == 0
    assert store.alloc_from_mem_pool(1024) == 0  # not a dummy client


def test_setup_dummy_and_init_all_set_up_a_client_of_their_own(
        url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONCAKE_REDIS_URL", url)
    monkeypatch.setenv("MOONCAKE_REDIS_NAMESPACE", NAMESPACE)
    monkeypatch.setenv("MOONCAKE_REDIS_DATA_DIR", str(tmp_path))
    dummy = MooncakeDistributedStore()
    assert dummy.setup_dummy(32 << 20, 16 << 20, "127.0.0.1:50052") == 0
    index = Index.from_url(url, NAMESPACE)
    assert index.usage().segments[dummy.get_hostname()].capacity_bytes == 32 << 20
    address = dummy.alloc_from_mem_pool(64)
    assert address and dummy.register_buffer(address, 64) == 0
    ctypes.memmove(address, b"dummy", 5)
    assert dummy.put_from("d", address, 5) == 0 and dummy.get("d") == b"dummy"
    assert dummy.alloc_from_mem_pool(0) == 0
    assert dummy.close() == 0
    whole = MooncakeDistributedStore()
    assert whole.init_all("tcp", "", 16 << 20) == 0
    assert whole.get_hostname() == "localhost:12345"
    assert index.usage().segments["localhost:12345"].capacity_bytes == 16 << 20
    assert whole.close() == 0


# -- sessions and ranges ----------------------------------------------------------------------


def test_put_and_get_sessions_move_ranges(store: MooncakeDistributedStore, index: Index
                                          ) -> None:
    buffer, address = memory(4096)
    ctypes.memmove(address, b"0123456789abcdef", 16)
    assert store.batch_put_session_start(["r1", "r2", "zero"], [8, 4, 0]) == \
        [0, 0, INVALID_PARAMS]
    assert index.object_info("r1").state == "processing"
    assert store.batch_put_from_multi_buffer_ranges(["nope"], [[address]], [[2]], [[0]]) == \
        [INVALID_PARAMS]
    assert store.batch_put_from_multi_buffer_ranges(
        ["r1", "r2", "r1"], [[address, address + 4], [address], [address]], [[2, 2], [4], [9]],
        [[0, 6], [0], [0]]) == [4, 4, INVALID_PARAMS]  # the last runs past the object
    assert store.batch_put_session_end(["r1", "r2", "nope"]) == [0, 0, INVALID_PARAMS]
    assert store.get("r1") == b"01\x00\x00\x00\x0045" and store.get("r2") == b"0123"
    assert store.batch_get_into_multi_buffer_ranges(["r1"], [[address + 100]], [[2]],
                                                    [[0]]) == [INVALID_PARAMS]
    assert store.batch_get_session_start(["r1", "nope"]) == [0, OBJECT_NOT_FOUND]
    assert store.batch_get_into_multi_buffer_ranges(
        ["r1"], [[address + 100, address + 200]], [[2, 3]], [[0, 5]]) == [5]
    assert bytes(buffer[100:102]) == b"01" and bytes(buffer[200:203]) == b"\x0045"
    assert store.batch_get_session_end(["r1"]) == 0
    assert store.batch_put_session_start(["rv"], [5]) == [0]
    assert store.batch_put_session_revoke(["rv", "nope"]) == [0, INVALID_PARAMS]
    assert index.object_info("rv") is None and store.is_exist("rv") == 0


def test_put_from_with_metadata_stores_the_metadata_first(store: MooncakeDistributedStore
                                                          ) -> None:
    _, address = memory(64)
    ctypes.memmove(address, b"0123456789abcdef", 16)
    assert store.put_from_with_metadata("m", address, address + 8, 4, 3) == 0
    assert store.get("m") == b"89a0123"


# -- buffer pool, allocator, module names -------------------------------------------------


def test_the_buffer_pool_lends_registered_regions(store: MooncakeDistributedStore) -> None:
    pool = BufferPool(store, min_size_class=4096, max_size_class=4096, alignment=4096,
                      max_regions=1, block_on_exhaustion=False)
    lease = pool.acquire(10)
    assert lease.size == 10 and lease.ptr % 4096 == 0
    lease.buffer[:5] = b"hello"
    assert store.put_from("pooled", lease.ptr, 5) == 0 and store.get("pooled") == b"hello"
    assert store.register_buffer(lease.ptr, 16) == INVALID_PARAMS  # registered by the pool
    with pytest.raises(RuntimeError, match="exhausted"):
        pool.acquire(1)
    view = lease.buffer
    with pytest.raises(RuntimeError, match="exported views"):
        lease.release()
    del view
    gc.collect()
    lease.release()
    waiting = []
    blocking = BufferPool(store, 1 << 20, min_size_class=4096, max_size_class=4096,
                          alignment=4096, max_regions=1)
    held = blocking.acquire(1)
    thread = threading.Thread(target=lambda: waiting.append(blocking.acquire(1, timeout=30)))
    thread.start()
    held.release()
    thread.join(timeout=30)
    assert not thread.is_alive() and waiting[0].size == 1
    with pytest.raises(RuntimeError, match="active leases"):
        blocking.close()
    waiting[0].release()
    blocking.close()
    pool.close()
    with pytest.raises(RuntimeError, match="alignment"):
        BufferPool(store, alignment=12345)
    with pytest.raises(RuntimeError, match="overflow"):
        BufferPool(store).acquire((1 << 64) - 1)


def test_the_module_exports_mooncake_stores_names() -> None:
    for name in ("ReplicaDescriptor", "MemoryDescriptor", "DiskDescriptor", "Descriptor",
                 "QueryTaskResponse", "ObjectDataType", "ReplicaStatus", "TaskType",
                 "TaskStatus", "ExistOptions", "BufferPool", "RegisteredBufferPool",
                 "BufferLease", "MooncakeHostMemAllocator", "bind_to_numa_node",
                 "_serialize_tensor", "_deserialize_tensor", "_tensor_metadata_size",
                 "KVCACHE", "COMPLETE", "REPLICA_MOVE", "SUCCESS"):
        assert name in dropin.__all__ and hasattr(dropin, name)
    assert dropin.SUCCESS == 3 and dropin.FAILED == 2  # Mooncake's values
    assert str(dropin.KVCACHE) == "ObjectDataType.KVCACHE"
    allocator = dropin.MooncakeHostMemAllocator()
    address = allocator.alloc(8192)
    assert address % 4096 == 0 and allocator.free(address) == 0 and allocator.free(address) == -1


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")
def test_bind_to_numa_node_sets_the_threads_cpus() -> None:
    before = os.sched_getaffinity(0)
    try:
        one = min(before)
        dropin.bind_to_numa_node(0, cpus_of=lambda node: {one})
        assert os.sched_getaffinity(0) == {one}
        with pytest.raises(ValueError):
            dropin.bind_to_numa_node(7, cpus_of=lambda node: set())
    finally:
        os.sched_setaffinity(0, before)


def test_a_program_written_for_mooncake_store_runs_with_the_import_changed(
        url: str, data_dir: Path) -> None:
    """The names a Mooncake program imports from mooncake.store, through
    `from mooncake_redis.mooncake import *`."""
    names: dict[str, object] = {}
    exec("from mooncake_redis.mooncake import *", names)  # noqa: S102 - our own module
    store = names["MooncakeDistributedStore"]()  # type: ignore[operator]
    assert store.setup(config_for(url, data_dir)) == 0
    config = names["ReplicateConfig"]()  # type: ignore[operator]
    config.data_type = names["KVCACHE"]
    assert store.put("k", b"v", config) == 0 and store.probe_key("k") == 1
    assert store.close() == 0
