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
from urllib.parse import quote

import numpy
import pytest
from clock import wait_until

from mooncake_redis import Index
from mooncake_redis.engines.sglang.hicache import (
    MODEL_TAG_LENGTH,
    MooncakeRedisHiCache,
    continues,
    model_tag,
)
from mooncake_redis.errors import ConfigurationError
from mooncake_redis.files.byte_store import FileByteStore

STORAGE_BATCH_SIZE = 128  # sglang.srt.mem_cache.hicache_storage.STORAGE_BATCH_SIZE
PAGE_SIZE = 4  # tokens per page
PAGE_BYTES = 256  # KV bytes per page in the host pools
_memory_names = itertools.count()


@dataclass
class StorageConfig:
    """The fields of SGLang's HiCacheStorageConfig the backend reads."""

    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    attn_cp_rank: int = 0
    attn_cp_size: int = 1
    is_mla_model: bool = False
    model_name: str | None = "qwen-7b"
    dp_rank: int = 0
    extra_config: dict[str, Any] = field(default_factory=dict)
    dcp_size: int = 1
    dcp_rank: int = 0


@dataclass
class PoolTransfer:
    """SGLang's PoolTransfer (host <-> storage fields)."""

    name: str
    host_indices: list[int] | None = None
    keys: list[str] | None = None
    hit_policy: str = "all_pages"


@dataclass
class ExtraInfo:
    """SGLang's HiCacheStorageExtraInfo."""

    prefix_keys: list[str] | None = None
    extra_info: dict[str, Any] | None = None


class HostPool:
    """The host KV pool methods the backend calls (HostKVCache's names): token-indexed
    bytes, one flat page per page_size tokens."""

    def __init__(self, pages: int, page_size: int = PAGE_SIZE):
        self.page_size = page_size
        self.token_bytes = PAGE_BYTES // page_size
        self.data = bytearray(pages * PAGE_BYTES)

    def get_data_page(self, index: int, flat: bool = True) -> memoryview:
        start = index * self.token_bytes
        return memoryview(self.data)[start:start + PAGE_BYTES]

    def get_dummy_flat_data_page(self) -> bytearray:
        return bytearray(PAGE_BYTES)

    def set_from_flat_data_page(self, index: int, page: bytearray) -> None:
        start = index * self.token_bytes
        self.data[start:start + PAGE_BYTES] = page


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
        extra = {"backend_name": "mooncake_redis",
                 "module_path": "mooncake_redis.engines.sglang.hicache",
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
               first_page: int = 0, prefix: list[str] | None = None,
               pass_prefix_keys: bool = True) -> None:
    """cache_controller._page_backup with the zero-copy page_set_func: the radix node's
    host indices (a tensor of its own; a numpy array here) cut into slices of 128 pages;
    without "hicache_storage_pass_prefix_keys" SGLang's prefix_keys are None throughout."""
    prefix_keys = list(prefix or []) if pass_prefix_keys else None
    host_indices = numpy.arange(first_page * PAGE_SIZE, (first_page + len(hashes)) * PAGE_SIZE)
    for start in range(0, len(hashes), STORAGE_BATCH_SIZE):
        batch = hashes[start:start + STORAGE_BATCH_SIZE]
        indices = host_indices[start * PAGE_SIZE:(start + len(batch)) * PAGE_SIZE]
        assert all(backend.batch_set_v1(batch, indices, ExtraInfo(prefix_keys)))
        if prefix_keys is not None:
            prefix_keys += batch


def hit_query(backend: MooncakeRedisHiCache, hashes: list[str],
              pass_prefix_keys: bool = True) -> list[str]:
    """cache_controller._storage_hit_query."""
    hits: list[str] = []
    prefix_keys: list[str] | None = [] if pass_prefix_keys else None
    for start in range(0, len(hashes), STORAGE_BATCH_SIZE):
        batch = hashes[start:start + STORAGE_BATCH_SIZE]
        found = backend.batch_exists(batch, ExtraInfo(prefix_keys))
        hits += batch[:found]
        if found < len(batch):
            break
        if prefix_keys is not None:
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
    index = backend.plane.index
    assert index.get_node(hashes[2]).parent == hashes[1]
    assert index.get_node(hashes[3]).parent is None  # set() does not know the page before
    assert backend.batch_exists(hashes) == 4
    assert index.get_node(hashes[3]).parent == hashes[2]  # the chain asked shows it
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
    assert sorted(node.keys) == [hashes[0] + "_qwen-7b_0_2", hashes[0] + "_qwen-7b_1_2"]
    assert rank0.batch_exists(hashes) == 3
    assert rank1.batch_exists(hashes) == 2  # page 2 has rank 0's object only
    mla = make_backend(is_mla_model=True)
    assert mla.batch_set(hashes[:1], [content(hashes[0])])
    assert rank0.plane.index.is_exist(hashes[0] + "_qwen-7b")  # MLA: the hash and the model


def test_two_models_never_see_each_others_pages(make_backend: Factory, tmp_path: Path) -> None:
    """SGLang hashes tokens alone: one prompt gives two models the same page hashes. Both
    backends here share the default namespace, one Redis and one directory. Before, the
    model was in no key: model B's hit query found model A's 6 pages and read A's bytes."""
    model_a, model_b = make_backend(model_name="org/model-a"), make_backend(model_name="model-b")
    hashes = page_hashes(list(range(6 * PAGE_SIZE)))
    assert model_a.batch_set(hashes, [content("a" + h) for h in hashes])
    assert model_b.batch_exists(hashes) == 0
    assert model_b.batch_get(hashes) == [None] * 6
    assert model_b.batch_set(hashes[:4], [content("b" + h) for h in hashes[:4]])
    assert model_a.batch_get(hashes) == [content("a" + h) for h in hashes]
    assert model_b.batch_get(hashes) == [content("b" + h) for h in hashes[:4]] + [None] * 2
    assert model_b.counters.conflicting_pages == 0  # other keys, not a clash
    assert sorted(model_a.plane.index.get_node(hashes[0]).keys) == \
        [hashes[0] + "_model-b_0_1", hashes[0] + "_org-model-a_0_1"]
    assert len(files(tmp_path)) == 10


def test_a_backend_that_cannot_tell_the_model_refuses_to_start(url: str, tmp_path: Path
                                                                ) -> None:
    extra = {"url": url, "directory": str(tmp_path), "segment_capacity_bytes": 1 << 20,
             "release_interval_s": 0}
    for nameless in (None, ""):
        with pytest.raises(ConfigurationError, match="needs the model's name"):
            MooncakeRedisHiCache(StorageConfig(model_name=nameless, extra_config=extra), {})
    assert files(tmp_path) == set()


def test_a_long_model_name_is_cut_with_a_digest_of_the_whole() -> None:
    """File names carry keys: a model path of 200 characters would not fit them."""
    long_a, long_b = "/models/" + "a" * 200, "/models/" + "a" * 199 + "b"
    tags = [model_tag(StorageConfig(model_name=name)) for name in (long_a, long_b)]
    assert tags[0] != tags[1] and all(len(tag) == MODEL_TAG_LENGTH for tag in tags)
    assert tags[0].startswith("-models-aaa")
    wide = model_tag(StorageConfig(model_name="模型" * 30))  # percent-encoded: 9 bytes each
    assert len(quote(wide, safe="")) <= MODEL_TAG_LENGTH
    assert model_tag(StorageConfig(model_name="Qwen/Qwen3-8B")) == "Qwen-Qwen3-8B"


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


# -- SGLang without "hicache_storage_pass_prefix_keys" -------------------------------------


def test_a_chain_stored_without_prefix_keys_is_linked_by_the_hit_query(
        make_backend: Factory, caplog: pytest.LogCaptureFixture) -> None:
    """SGLang 0.5.23 fills prefix_keys only with "hicache_storage_pass_prefix_keys": true.
    Without it, a 6-page chain backed up as two radix nodes (4 + 2 pages) stores page 5 as
    a root: page 4 becomes a leaf, the oldest, and eviction took it first, leaving 3 usable
    pages and 2 unusable ones. The backend counts such batches, warns once, and the hit
    query (whose keys are one chain) links page 5 under page 4."""
    backend = make_backend()
    pool = HostPool(pages=8)
    pool.data[:] = b"".join(content(str(i)) for i in range(8))
    backend.register_mem_pool_host(pool)
    hashes = page_hashes(list(range(6 * PAGE_SIZE)))
    with caplog.at_level("WARNING", "mooncake_redis.engines.sglang.hicache"):
        write_back(backend, hashes[:4], pool, pass_prefix_keys=False)  # radix node 1
        write_back(backend, hashes[4:], pool, first_page=4, pass_prefix_keys=False)  # node 2
    assert backend.counters.batches_without_parent == 2
    assert caplog.text.count('"hicache_storage_pass_prefix_keys": true') == 1  # warned once
    index = backend.plane.index
    assert index.get_node(hashes[4]).parent is None  # SGLang did not say
    assert hit_query(backend, hashes, pass_prefix_keys=False) == hashes
    assert index.get_node(hashes[4]).parent == hashes[3]
    assert backend.counters.parents_linked == 1
    index.evict(5 * PAGE_BYTES / index.usage().capacity_bytes)  # one page must go
    assert index.usage().objects == 5
    assert backend.batch_exists(hashes) == 5  # the chain's leaf went, not page 4
    assert backend.counters.parents_linked == 1  # nothing more to link


@pytest.mark.parametrize("backend", ["redis"])
def test_with_sglangs_defaults_a_long_write_back_is_one_chain_at_write_time(
        make_backend: Factory) -> None:
    """A radix node of 300 pages, written back with SGLang's defaults (no prefix_keys) in
    batches of 128, 128 and 44 whose host indices are slices of the node's: each batch's
    first page is linked under the batch before's last at write time, so eviction before
    any read takes the chain's tail. Before, pages 128 and 256 were roots and pages 127 and
    255 leaves: eviction took from all three chains, and of the 200 pages left 78 were
    usable."""
    backend = make_backend(capacity=1 << 20)
    pool = HostPool(pages=300)
    backend.register_mem_pool_host(pool)
    hashes = page_hashes(list(range(300 * PAGE_SIZE)))
    write_back(backend, hashes, pool, pass_prefix_keys=False)
    index = backend.plane.index
    assert index.get_node(hashes[128]).parent == hashes[127]
    assert index.get_node(hashes[256]).parent == hashes[255]
    assert (backend.counters.batches_without_parent, backend.counters.batches_continued) == \
        (1, 2)
    index.evict(200 * PAGE_BYTES / index.usage().capacity_bytes)  # before any read
    assert index.usage().objects == 200
    assert backend.batch_exists(hashes) == 200  # leaf first: every page left is usable
    assert backend.counters.parents_linked == 0  # the read had nothing to link


def test_only_slices_of_one_write_back_are_linked_without_prefix_keys(
        make_backend: Factory) -> None:
    """What does not show a continued write-back leaves the first page unlinked: a batch
    after one that was not full, indices of another array, indices as a list."""
    backend = make_backend()
    pool = HostPool(pages=400)
    backend.register_mem_pool_host(pool)
    hashes = page_hashes(list(range(400 * PAGE_SIZE)))
    one_array = numpy.arange(400 * PAGE_SIZE)

    def write(first: int, pages: int, indices: Any) -> None:
        assert all(backend.batch_set_v1(hashes[first:first + pages], indices, ExtraInfo()))

    write(0, 100, one_array[:100 * PAGE_SIZE])  # not a full batch
    write(100, 28, one_array[100 * PAGE_SIZE:128 * PAGE_SIZE])
    write(128, 128, one_array[128 * PAGE_SIZE:256 * PAGE_SIZE])
    write(256, 10, numpy.arange(256 * PAGE_SIZE, 266 * PAGE_SIZE))  # another array
    write(266, 128, list(range(266 * PAGE_SIZE, 394 * PAGE_SIZE)))
    write(394, 6, list(range(394 * PAGE_SIZE, 400 * PAGE_SIZE)))  # a list tells nothing
    parents = [backend.plane.index.get_node(hashes[i]).parent for i in (100, 128, 256, 266,
                                                                          394)]
    assert parents == [None] * 5
    assert (backend.counters.batches_without_parent, backend.counters.batches_continued) == \
        (6, 0)
    assert not continues(one_array[:128], 32, one_array[128:256])  # 32 pages: not full
    assert continues(one_array[:STORAGE_BATCH_SIZE], STORAGE_BATCH_SIZE,
                     one_array[STORAGE_BATCH_SIZE:])
    assert not continues(one_array[:STORAGE_BATCH_SIZE], STORAGE_BATCH_SIZE,
                         one_array[STORAGE_BATCH_SIZE + 1:])


def test_with_prefix_keys_nothing_is_counted(make_backend: Factory) -> None:
    backend = make_backend()
    pool = HostPool(pages=8)
    backend.register_mem_pool_host(pool)
    hashes = page_hashes(list(range(6 * PAGE_SIZE)))
    write_back(backend, hashes[:4], pool)
    write_back(backend, hashes[4:], pool, first_page=4, prefix=hashes[:4])
    assert backend.plane.index.get_node(hashes[4]).parent == hashes[3]
    assert hit_query(backend, hashes) == hashes
    assert backend.counters == type(backend.counters)()


def test_the_counters_are_exported(make_backend: Factory) -> None:
    from mooncake_redis.operations.metrics import Exporter

    backend = make_backend()
    exporter = Exporter([backend.plane.index.ctx])
    exporter.count_this_process()
    try:
        hashes = page_hashes(list(range(2 * PAGE_SIZE)))
        assert backend.batch_set(hashes, [content(h) for h in hashes])  # generic: no parent
        text = exporter.text()
    finally:
        exporter.stop_counting()
    assert 'mooncake_redis_hicache_total{counter="batches_without_parent",' \
           'namespace="hicache"} 1.0' in text


# -- every parallel slice of a page has its own key ----------------------------------------


@pytest.mark.parametrize(("ranks", "suffixes"), [
    ([{"attn_cp_rank": 0, "attn_cp_size": 2}, {"attn_cp_rank": 1, "attn_cp_size": 2}],
     ["_qwen-7b_0_1_cp0_2", "_qwen-7b_0_1_cp1_2"]),
    ([{"is_mla_model": True, "tp_rank": 0, "tp_size": 2, "dcp_rank": 0, "dcp_size": 2},
      {"is_mla_model": True, "tp_rank": 1, "tp_size": 2, "dcp_rank": 1, "dcp_size": 2}],
     ["_qwen-7b_tp2_dcp0_2", "_qwen-7b_tp2_dcp1_2"]),
    ([{"pp_rank": 0, "pp_size": 2}, {"pp_rank": 0, "pp_size": 4}],  # other layers
     ["_qwen-7b_0_1_pp0_2", "_qwen-7b_0_1_pp0_4"]),
    ([{"tp_rank": 1, "tp_size": 2, "attn_cp_rank": 1, "attn_cp_size": 2, "pp_rank": 1,
       "pp_size": 2}, {"is_mla_model": True, "pp_rank": 1, "pp_size": 2}],
     ["_qwen-7b_1_2_pp1_2_cp1_2", "_qwen-7b_pp1_2"]),
    ([{"model_name": "Qwen/Qwen3-8B"}, {"model_name": "meta-llama/Llama-3.1-8B"}],
     ["_Qwen-Qwen3-8B_0_1", "_meta-llama-Llama-3.1-8B_0_1"]),  # `/` as `-`, as SGLang
], ids=["attention-cp", "mla-dcp", "pp-sizes", "combined", "models"])
def test_ranks_holding_different_slices_have_their_own_keys(
        make_backend: Factory, ranks: list[dict[str, Any]], suffixes: list[str]) -> None:
    """Before, both CP ranks were `_0_1`, both DCP shards '' and PP ignored its size: the
    second rank's put met the first rank's object and reported success, and would later
    have read the first rank's bytes as its own."""
    backends = [make_backend(**rank) for rank in ranks]
    hashes = page_hashes(list(range(2 * PAGE_SIZE)))
    for number, backend in enumerate(backends):
        assert backend.batch_set(hashes, [content(h + str(number)) for h in hashes])
    node = backends[0].plane.index.get_node(hashes[0])
    assert sorted(node.keys) == sorted(hashes[0] + suffix for suffix in suffixes)
    for number, backend in enumerate(backends):  # each rank reads its own bytes back
        assert backend.batch_get(hashes) == [content(h + str(number)) for h in hashes]


def test_attention_dp_ranks_share_pages_and_not_their_events_consumer(
        make_backend: Factory) -> None:
    """DP ranks of one attention-TP rank hold the same slice of a page: one key. They are
    separate processes, each with its own events consumer (before, both were <host>_0_1:
    one would be handed the other's pending events after a restart)."""
    dp0, dp1 = make_backend(dp_rank=0), make_backend(dp_rank=1)
    assert dp0.suffix == dp1.suffix == "_qwen-7b_0_1"
    assert dp0.consumer != dp1.consumer
    hashes = page_hashes(list(range(2 * PAGE_SIZE)))
    assert dp0.batch_set(hashes, [content(h) for h in hashes])
    assert dp1.batch_exists(hashes) == 2 and dp1.batch_get(hashes) == [content(h)
                                                                        for h in hashes]
    dp0.release()
    dp1.release()
    index = dp0.plane.index
    consumers = set()
    for shard in {index.ctx.shard(h) for h in hashes}:
        stream = index.ctx.schema.shard_keys(shard).events
        for group in index.client.xinfo_groups(stream):
            consumers |= {c["name"] for c in index.client.xinfo_consumers(stream,
                                                                           group["name"])}
    assert {dp0.consumer, dp1.consumer} <= consumers


def test_a_stored_key_with_other_bytes_is_refused(make_backend: Factory,
                                                   tmp_path: Path) -> None:
    """Two writers that name different bytes with one key (a misconfigured rank): the
    second put is refused and counted, not reported as stored."""
    first, second = make_backend(), make_backend()
    hashes = page_hashes(list(range(2 * PAGE_SIZE)))
    assert first.batch_set(hashes, [content(h) for h in hashes])
    other = bytearray(content(hashes[1]))
    other[0] ^= 0xFF
    assert not second.batch_set(hashes[1:], [other])  # same size, other bytes
    assert not second.batch_set(hashes[:1], [content(hashes[0])[:-1]])  # another size
    assert second.counters.conflicting_pages == 2
    assert second.batch_set(hashes, [content(h) for h in hashes])  # the same bytes: fine
    assert second.counters.conflicting_pages == 2
    assert first.batch_get(hashes) == [content(h) for h in hashes]
    assert len(files(tmp_path)) == 2  # the refused copies' files are gone


# -- hybrid models: SGLang's v2 interface ---------------------------------------------------


def test_v2_pools_beside_the_pages(make_backend: Factory) -> None:
    """A hybrid model (Mamba state at the last page of each radix node, a DSA indexer
    for every page) as SGLang's HybridCacheController drives it: KV through batch_set_v1,
    the other pools through batch_set_v2 with prefix_keys, the hit query through
    batch_exists_v2, the reads through batch_get_v2."""
    backend = make_backend(is_mla_model=True, tp_rank=1, tp_size=2)
    kv, mamba, indexer = HostPool(pages=8), HostPool(pages=8, page_size=1), HostPool(pages=8)
    kv.data[:] = b"".join(content(f"kv{i}") for i in range(8))
    mamba.data[:] = b"".join(content(f"mamba{i}") for i in range(8))
    indexer.data[:] = b"".join(content(f"indexer{i}") for i in range(8))
    backend.register_mem_pool_host(kv)
    backend.register_mem_host_pool_v2(mamba, "mamba")
    backend.register_mem_host_pool_v2(indexer, "indexer")
    backend.on_host_pools_registered()
    hashes = page_hashes(list(range(6 * PAGE_SIZE)))
    write_back(backend, hashes[:4], kv)
    write_back(backend, hashes[4:], kv, first_page=4, prefix=hashes[:4])
    # the trailing Mamba state of each radix node (4 + 2 pages), the indexer of pages 0-4
    assert backend.batch_set_v2([PoolTransfer("mamba", [3], [hashes[3]], "trailing_pages")],
                                ExtraInfo(hashes[:3])) == {"mamba": [True]}
    assert backend.batch_set_v2([PoolTransfer("mamba", [5], [hashes[5]], "trailing_pages")],
                                ExtraInfo(hashes[:5])) == {"mamba": [True]}
    assert backend.batch_set_v2([PoolTransfer("indexer", list(range(5 * PAGE_SIZE)),
                                              hashes[:5])], ExtraInfo([])) == \
        {"indexer": [True] * 5}
    node = backend.plane.index.get_node(hashes[3])
    assert sorted(node.keys) == [hashes[3] + suffix for suffix in
                                 ("_indexer_qwen-7b", "_mamba_qwen-7b_1_2", "_qwen-7b")]
    assert node.parent == hashes[2]  # Mamba state is TP-sharded even for MLA

    trailing = PoolTransfer("mamba", keys=[hashes[5]], hit_policy="trailing_pages")
    result = backend.batch_exists_v2(hashes, [trailing])
    assert (result.kv_hit_pages, result.restorable_prefix_pages) == (6, [4, 6])
    assert result.extra_pool_hit_pages == {"kv": 6, "mamba": 6}
    result = backend.batch_exists_v2(hashes, [trailing, PoolTransfer("indexer")])
    assert (result.kv_hit_pages, result.restorable_prefix_pages) == (4, [4])
    assert result.extra_pool_hit_pages == {"kv": 6, "mamba": 6, "indexer": 5}

    reader_mamba, reader_indexer = HostPool(pages=8, page_size=1), HostPool(pages=8)
    backend.register_mem_host_pool_v2(reader_mamba, "mamba")
    backend.register_mem_host_pool_v2(reader_indexer, "indexer")
    got = backend.batch_get_v2([PoolTransfer("mamba", [0], [hashes[3]]),
                                PoolTransfer("indexer", list(range(6 * PAGE_SIZE)), hashes)])
    assert got == {"mamba": [True], "indexer": [True] * 5 + [False]}
    assert reader_mamba.data[:PAGE_BYTES] == mamba.data[3 * PAGE_BYTES:4 * PAGE_BYTES]
    assert reader_indexer.data[:5 * PAGE_BYTES] == indexer.data[:5 * PAGE_BYTES]
    # indices that do not cover the keys: refused, as SGLang's own backends do
    assert backend.batch_get_v2([PoolTransfer("indexer", [0], hashes[:2])]) == \
        {"indexer": [False, False]}
    with pytest.raises(Exception, match="hit policy 'block_groups'"):
        backend.batch_exists_v2(hashes, [PoolTransfer("indexer", hit_policy="block_groups")])


def test_v2_pools_go_with_their_page(make_backend: Factory) -> None:
    """A pool's part of a page is an object of the page's node: eviction takes them
    together (the chain's leaf first), and batch_exists_v2 shrinks to what is left."""
    backend = make_backend()
    kv, mamba = HostPool(pages=4), HostPool(pages=4, page_size=1)
    backend.register_mem_pool_host(kv)
    backend.register_mem_host_pool_v2(mamba, "mamba")
    hashes = page_hashes(list(range(3 * PAGE_SIZE)))
    write_back(backend, hashes, kv)
    assert backend.batch_set_v2([PoolTransfer("mamba", [0, 1, 2], hashes, "trailing_pages")],
                                ExtraInfo([]))["mamba"] == [True] * 3
    index = backend.plane.index
    index.evict(4 * PAGE_BYTES / index.usage().capacity_bytes)
    assert index.get_node(hashes[2]) is None
    result = backend.batch_exists_v2(hashes, [PoolTransfer("mamba", keys=[hashes[2]],
                                                           hit_policy="trailing_pages")])
    assert (result.kv_hit_pages, result.restorable_prefix_pages) == (2, [1, 2])
