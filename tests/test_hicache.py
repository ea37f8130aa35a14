"""The SGLang HiCache backend, driven the way SGLang 0.5.23's cache controller
(sglang/srt/managers/cache_controller.py) drives a dynamic backend: the factory builds it
as `cls(storage_config, kwargs)` and registers the host pool; write-back sends batches of
at most 128 page hashes with `HiCacheStorageExtraInfo(prefix_keys=...)` (batch_set_v1
with `interface_v1`, else batch_set of flat pages); prefetch asks batch_exists for the
leading run, then reads it (batch_get_v1, or batch_get into dummy pages). SGLang and
torch cannot be installed here (no GPU, and the wheel pulls CUDA torch), so the config,
extra_info and host pool are small stand-ins with the same attribute and method names;
docs/INTEGRATIONS.md says what was checked against SGLang's own code."""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from clock import wait_until

from mooncake_redis import Index
from mooncake_redis.byte_store import FileByteStore
from mooncake_redis.hicache import MooncakeRedisHiCache

STORAGE_BATCH_SIZE = 128  # sglang.srt.mem_cache.hicache_storage.STORAGE_BATCH_SIZE
PAGE_SIZE = 4  # tokens per page
TOKEN_BYTES = 64  # KV bytes per token in the host pool
PAGE_BYTES = PAGE_SIZE * TOKEN_BYTES
_memory_names = itertools.count()


@dataclass
class StorageConfig:
    """The fields of SGLang's HiCacheStorageConfig the backend reads."""

    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    is_mla_model: bool = False
    extra_config: dict[str, Any] = field(default_factory=dict)


@dataclass
class ExtraInfo:
    """SGLang's HiCacheStorageExtraInfo."""

    prefix_keys: list[str] | None = None
    extra_info: dict[str, Any] | None = None


class HostPool:
    """The host KV pool methods the backend calls (HostKVCache's names): token-indexed
    bytes, one flat page per page_size tokens."""

    def __init__(self, pages: int):
        self.page_size = PAGE_SIZE
        self.data = bytearray(pages * PAGE_BYTES)

    def get_data_page(self, index: int, flat: bool = True) -> memoryview:
        return memoryview(self.data)[index * TOKEN_BYTES:index * TOKEN_BYTES + PAGE_BYTES]

    def get_dummy_flat_data_page(self) -> bytearray:
        return bytearray(PAGE_BYTES)

    def set_from_flat_data_page(self, index: int, page: bytearray) -> None:
        self.data[index * TOKEN_BYTES:index * TOKEN_BYTES + PAGE_BYTES] = page


def page_hashes(tokens: list[int], prior: str | None = None) -> list[str]:
    """SGLang's chain of page hashes: sha256 over the prior page's hash and the page."""
    hashes = []
    for start in range(0, len(tokens) - len(tokens) % PAGE_SIZE, PAGE_SIZE):
        digest = hashlib.sha256(bytes.fromhex(prior) if prior else b"")
        for token in tokens[start:start + PAGE_SIZE]:
            digest.update(token.to_bytes(4, "little"))
        prior = digest.hexdigest()
        hashes.append(prior)
    return hashes


def content(key: str) -> bytes:
    return (hashlib.blake2b(key.encode()).digest() * (PAGE_BYTES // 64 + 1))[:PAGE_BYTES]


@pytest.fixture
def url(backend: str, request: pytest.FixtureRequest) -> str:
    if backend == "fakeredis":
        return f"memory://hicache-{next(_memory_names)}"
    return request.getfixturevalue("redis_url" if backend == "redis" else "cluster_url")


Factory = Callable[..., MooncakeRedisHiCache]


@pytest.fixture
def make_backend(url: str, tmp_path: Path) -> Iterator[Factory]:
    made: list[MooncakeRedisHiCache] = []

    def factory(capacity: int = 1 << 20, **config: Any) -> MooncakeRedisHiCache:
        extra = {"backend_name": "mooncake_redis", "module_path": "mooncake_redis.hicache",
                 "class_name": "MooncakeRedisHiCache", "url": url, "directory": str(tmp_path),
                 "segment_capacity_bytes": capacity, "release_interval_s": 0,
                 "index_settings": {"lease_ttl_ms": 0}}
        backend = MooncakeRedisHiCache(StorageConfig(**{"extra_config": extra, **config}), {})
        made.append(backend)
        return backend

    yield factory
    for backend in made:
        backend.close()


def write_back(backend: MooncakeRedisHiCache, hashes: list[str], pool: HostPool,
               first_page: int = 0, prefix: list[str] | None = None) -> None:
    """cache_controller._page_backup with the zero-copy page_set_func."""
    prefix_keys = list(prefix or [])
    for start in range(0, len(hashes), STORAGE_BATCH_SIZE):
        batch = hashes[start:start + STORAGE_BATCH_SIZE]
        indices = list(range((first_page + start) * PAGE_SIZE,
                             (first_page + start + len(batch)) * PAGE_SIZE))
        assert all(backend.batch_set_v1(batch, indices, ExtraInfo(prefix_keys)))
        prefix_keys += batch


def hit_query(backend: MooncakeRedisHiCache, hashes: list[str]) -> list[str]:
    """cache_controller._storage_hit_query."""
    hits: list[str] = []
    prefix_keys: list[str] = []
    for start in range(0, len(hashes), STORAGE_BATCH_SIZE):
        batch = hashes[start:start + STORAGE_BATCH_SIZE]
        found = backend.batch_exists(batch, ExtraInfo(prefix_keys))
        hits += batch[:found]
        if found < len(batch):
            break
        prefix_keys += batch
    return hits


def files(directory: Path) -> set[str]:
    return {name for name in os.listdir(directory) if name.endswith(".bin")}


def test_write_back_then_prefetch_by_prefix(make_backend: Factory, tmp_path: Path) -> None:
    backend = make_backend()
    pool = HostPool(pages=300)
    pool.data[:] = b"".join(content(str(i)) for i in range(300))
    tokens = list(range(260 * PAGE_SIZE))  # 260 pages: three write-back batches
    hashes = page_hashes(tokens)
    backend.register_mem_pool_host(pool)
    write_back(backend, hashes, pool)

    index = backend.plane.index
    # the chain is one path of the radix tree, across batch boundaries too
    assert index.get_node(hashes[128]).parent == hashes[127]
    assert index.get_node(hashes[259]).parent == hashes[258]
    assert index.match_prefix(hashes) == 260
    assert len(files(tmp_path)) == 260 == index.usage().objects

    # a longer request: its first 260 pages are in storage, the rest is not
    longer = page_hashes(tokens + list(range(40 * PAGE_SIZE)))
    assert hit_query(backend, longer) == hashes
    reader = HostPool(pages=300)
    reader.page_size = PAGE_SIZE
    backend.register_mem_pool_host(reader)
    assert all(backend.batch_get_v1(hashes[:128], list(range(128 * PAGE_SIZE))))
    assert reader.data[:128 * PAGE_BYTES] == pool.data[:128 * PAGE_BYTES]
    assert backend.batch_get_v1(longer[258:262], list(range(4 * PAGE_SIZE))) == \
        [True, True, False, False]


def test_generic_interface_set_get_exists(make_backend: Factory) -> None:
    backend = make_backend()
    hashes = page_hashes(list(range(6 * PAGE_SIZE)))
    pages = [bytearray(content(h)) for h in hashes]
    assert backend.batch_set(hashes[:3], pages[:3])  # _generic_page_set: flat pages
    assert backend.set(hashes[3], pages[3])
    assert backend.exists(hashes[0]) and not backend.exists(hashes[5])
    assert backend.batch_exists(hashes) == 4
    index = backend.plane.index
    assert index.get_node(hashes[2]).parent == hashes[1]
    assert index.get_node(hashes[3]).parent is None  # set() does not know the page before
    dummies = [bytearray(PAGE_BYTES) for _ in hashes]
    got = backend.batch_get(hashes, dummies)  # _generic_page_get: into dummy pages
    assert got[:4] == pages[:4] and got[4:] == [None, None]
    assert got[0] is dummies[0]
    assert backend.get(hashes[1]) == bytes(pages[1])  # without a target: the bytes
    assert backend.get(hashes[5]) is None


def test_ranks_store_their_own_objects_in_one_node(make_backend: Factory) -> None:
    rank0, rank1 = make_backend(tp_rank=0, tp_size=2), make_backend(tp_rank=1, tp_size=2)
    hashes = page_hashes(list(range(3 * PAGE_SIZE)))
    assert rank0.batch_set(hashes, [content(h) for h in hashes])
    assert rank1.batch_set(hashes[:2], [content(h) for h in hashes[:2]])
    node = rank0.plane.index.get_node(hashes[0])
    assert sorted(node.keys) == [hashes[0] + "_0_2", hashes[0] + "_1_2"]
    assert rank0.batch_exists(hashes) == 3
    assert rank1.batch_exists(hashes) == 2  # page 2 has rank 0's object only
    mla = make_backend(is_mla_model=True)
    assert mla.batch_set(hashes[:1], [content(hashes[0])])
    assert rank0.plane.index.is_exist(hashes[0])  # MLA: the page hash is the key


# Not on fakeredis: the same scripts, 48 s there (5 s on Redis) for nothing more to see;
# this module's other tests hold it to the contract.
@pytest.mark.parametrize("backend", ["redis", "cluster"])
def test_eviction_deletes_files_and_batch_exists_shrinks(make_backend: Factory,
                                                          tmp_path: Path) -> None:
    capacity = 1024 * PAGE_BYTES  # room for 1024 pages
    backend = make_backend(capacity=capacity)
    chains = [page_hashes(list(range(n * 10_000, n * 10_000 + 100 * PAGE_SIZE)))
              for n in range(14)]  # 1400 pages
    for chain in chains:
        for start in range(0, len(chain), 50):
            assert backend.batch_set(chain[start:start + 50],
                                     [content(h) for h in chain[start:start + 50]],
                                     extra_info=ExtraInfo(chain[:start]))
    backend.release()
    index = backend.plane.index
    stored = files(tmp_path)
    assert len(stored) < 1400 and len(stored) == index.usage().objects
    assert sum(os.path.getsize(tmp_path / name) for name in stored) == \
        index.usage().segments["hicache"].used_bytes
    assert backend.batch_exists(chains[0]) < 100  # the oldest chain lost its tail first
    assert backend.batch_exists(chains[-1]) == 100
    kept = backend.batch_exists(chains[0])
    assert index.match_prefix(chains[0]) == kept
    assert not any(index.batch_is_exist([h + backend.suffix for h in chains[0][kept:]]))
    assert {FileByteStore.key_of(name) for name in stored} == \
        {key for chain in chains for key in (h + backend.suffix for h in chain)
         if index.is_exist(key)}


def test_clear_removes_every_page_and_file(make_backend: Factory, tmp_path: Path) -> None:
    backend = make_backend()
    hashes = page_hashes(list(range(5 * PAGE_SIZE)))
    assert backend.batch_set(hashes, [content(h) for h in hashes])
    backend.clear()
    assert files(tmp_path) == set() and backend.batch_exists(hashes) == 0


def test_a_second_process_shares_the_mounted_segment(make_backend: Factory, url: str,
                                                       tmp_path: Path) -> None:
    first = make_backend(capacity=1 << 20)
    second = make_backend(capacity=1 << 30)  # mounted already: the first capacity stays
    assert first.plane.index.usage().segments["hicache"].capacity_bytes == 1 << 20
    hashes = page_hashes(list(range(2 * PAGE_SIZE)))
    assert first.batch_set(hashes, [content(h) for h in hashes])
    assert second.batch_get(hashes) == [content(h) for h in hashes]


def test_the_background_thread_deletes_evicted_files(url: str, tmp_path: Path) -> None:
    extra = {"url": url, "directory": str(tmp_path), "segment_capacity_bytes": 1 << 20,
             "release_interval_s": 0.05, "index_settings": {"lease_ttl_ms": 0}}
    backend = MooncakeRedisHiCache(StorageConfig(extra_config=extra), {})
    try:
        hashes = page_hashes(list(range(4 * PAGE_SIZE)))
        assert backend.batch_set(hashes, [content(h) for h in hashes])
        Index.from_url(url, "hicache").evict(0)  # another process (a worker) evicts
        wait_until(lambda: not files(tmp_path), "the background thread to delete the files")
    finally:
        backend.close()


def test_bad_configuration_is_refused(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="needs \"directory\""):
        MooncakeRedisHiCache(StorageConfig(extra_config={"url": "memory://x"}), {})
    with pytest.raises(Exception, match="not mounted"):
        MooncakeRedisHiCache(StorageConfig(extra_config={
            "url": "memory://bad-config", "directory": str(tmp_path),
            "release_interval_s": 0}), {})
