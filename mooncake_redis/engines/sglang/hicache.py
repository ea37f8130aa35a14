"""An SGLang HiCache storage backend (L3): metadata, prefix tree and eviction in
mooncake-redis, page bytes in a directory of files (FileDataPlane).

SGLang loads it with `--hicache-storage-backend dynamic` (docs/INTEGRATIONS.md): its
StorageBackendFactory imports this module, checks the class is a subclass of its
`HiCacheStorage` and calls `MooncakeRedisHiCache(storage_config, kwargs)`. The class has
the methods and semantics of `sglang/srt/mem_cache/hicache_storage.py` (SGLang 0.5.23):
get / batch_get / set / batch_set / exists / batch_exists (the count of leading pages
stored), batch_get_v1 / batch_set_v1 (zero copy through the registered host pool, used
with `"interface_v1": 1`), the hybrid-model calls batch_exists_v2 / batch_get_v2 /
batch_set_v2 with register_mem_host_pool_v2 and on_host_pools_registered (Mamba, sliding
window and DSA pools beside the KV pages), clear, get_stats, close. SGLang and torch are
not needed to import or test it: where SGLang is installed the class also inherits its
HiCacheStorage; values and target buffers are any buffer-protocol object (bytes,
bytearray, numpy arrays) or CPU torch tensors.

Each page is one object, key = page hash + the model's name + a suffix naming the slice of
the page this rank holds, the way SGLang's own file and Mooncake backends name it
(`key_suffix`: pages of two models never share a key, though their hashes are equal when
their tokens are); another pool's part of the page (`<hash>_<pool>` + suffix) is an object
of the same node. The page's parent is the previous page of the chain; for the first page
of a batch, the last of `extra_info.prefix_keys` (which SGLang passes only with
`"hicache_storage_pass_prefix_keys": true`), or without them the last page of the batch
before when both are slices of one write-back (SGLang cuts a radix node's pages into
batches of 128 and passes each batch's host indices as a view of the node's: `continues`).
A batch that starts a radix node comes with nothing that names its parent: such batches are
counted, and the missing links are made when a read shows the chain. So a write-back
builds the radix tree, eviction is leaf-first, and batch_exists answers the leading run.
Eviction, unmount and removal events delete the files: on every write that ran an eviction
job, and in a background thread every `release_interval_s`; the ranks read the events as
one consumer group per segment (`files:<segment>`, one consumer per rank:
`consumer_name`), so each event is applied once, at least once.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import socket
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import blake3

from mooncake_redis import observers
from mooncake_redis.errors import ConfigurationError, InvalidArgument, MooncakeRedisError
from mooncake_redis.files.byte_store import FileByteStore
from mooncake_redis.files.data_plane import FileDataPlane, Page
from mooncake_redis.index import Index
from mooncake_redis.settings import ENV_URL

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "hicache"
DEFAULT_SEGMENT = "hicache"
DEFAULT_RELEASE_INTERVAL_S = 1.0
PASS_PREFIX_KEYS = '"hicache_storage_pass_prefix_keys": true'
"""The line of --hicache-storage-backend-extra-config that makes SGLang name each batch's
parent page (SGLang pops it before the backend sees the config)."""
KV_POOL = "kv"
"""SGLang's PoolName.KV: the pages themselves."""
TP_SHARDED_POOLS = frozenset({"mamba"})
"""Pools whose state is split across TP ranks even for an MLA model (SGLang's file and
Mooncake backends key them by TP rank too)."""
ALL_PAGES, TRAILING_PAGES = "all_pages", "trailing_pages"
"""SGLang's PoolHitPolicy values this backend answers (BLOCK_GROUPS is declared by SGLang
0.5.23 but used by none of its pools or backends)."""
STORAGE_BATCH_SIZE = 128
"""SGLang 0.5.23's pages per write-back call (its own, where SGLang is installed)."""
MODEL_TAG_LENGTH = 64
"""The longest model name that goes into keys as it is (percent-encoded, as file names
carry keys); a longer one is cut and ends in a digest of the whole, so that page files'
names stay within the filesystem's limit."""


@functools.cache
def _sglang_module() -> Any:
    """SGLang's hicache_storage module, None where SGLang is not installed (looked for
    once: the batch size is read on every write)."""
    try:
        return importlib.import_module("sglang.srt.mem_cache.hicache_storage")
    except ImportError:
        return None


def _sglang_base() -> type:
    """SGLang's HiCacheStorage where SGLang is installed (its factory requires a
    subclass), else object: the methods are the same either way."""
    module = _sglang_module()
    return object if module is None else module.HiCacheStorage  # type: ignore[no-any-return]


@dataclass
class PoolHits:
    """What batch_exists_v2 answers, with SGLang's PoolTransferResult's fields (returned as
    SGLang's own class where SGLang is installed)."""

    kv_hit_pages: int
    extra_pool_hit_pages: dict[str, int]
    restorable_prefix_pages: list[int] | None = None


@dataclass
class HiCacheCounters:
    """What this backend saw that an operator should know about (also counted as the
    `mooncake_redis_hicache_total` metric of an exporter in the process)."""

    batches_without_parent: int = 0
    """Write batches whose first page came without its parent (SGLang passes the parent
    only with "hicache_storage_pass_prefix_keys": true) and starts a write-back (a radix
    node): stored as a root until a read of the chain links it."""
    batches_continued: int = 0
    """Write batches without prefix_keys whose first page was linked under the last page of
    the batch before, the same write-back's (their host indices are one view's slices)."""
    parents_linked: int = 0
    """Pages stored without their parent that a read of the chain linked under it."""
    conflicting_pages: int = 0
    """Pages refused because their key was stored already with other bytes."""


class MooncakeRedisHiCache(_sglang_base()):  # type: ignore[misc]
    """HiCache's L3 on mooncake-redis and a shared directory.

    extra_config (SGLang's --hicache-storage-backend-extra-config JSON), besides the
    dynamic backend's backend_name / module_path / class_name, interface_v1 and SGLang's
    hicache_storage_pass_prefix_keys (both needed: docs/INTEGRATIONS.md):
      directory               where page files go (required; shared by every rank/host)
      url                     Redis URL (default: $MOONCAKE_REDIS_URL; keep passwords there)
      namespace               (default "hicache"; one per model)
      segment                 the directory's segment name (default "hicache")
      segment_capacity_bytes  mount the segment with it unless mounted already
      release_interval_s      how often the background thread deletes freed files
                              (default 1.0; 0 = no thread, call release())
      evict_inline            run eviction jobs in this process on pressure (default true)
      index_settings          settings for a new namespace (Index.from_url's)
      instance                tells apart SGLang servers of the same ranks on one host
                              (their events consumers), default ""
      metrics_port            serve Prometheus metrics of this namespace and backend on
                              this port (needs prometheus-client), default none
    """

    def __init__(self, storage_config: Any = None, kwargs: Mapping[str, Any] | None = None,
                 *, plane: FileDataPlane | None = None):
        config: dict[str, Any] = dict(getattr(storage_config, "extra_config", None) or {})
        self.suffix = key_suffix(storage_config)
        self.sharded_suffix = key_suffix(storage_config, tp_sharded=True)
        """The suffix of pools split across TP ranks even for MLA (TP_SHARDED_POOLS)."""
        self._last_write: tuple[Any, int, str] | None = None
        """The host indices, page count and last key of the last batch_set_v1 (the indices
        held, so that their memory is not another's when the next batch is compared)."""
        self.mem_pool_host: Any = None
        self.registered_pools: dict[str, Any] = {}
        self.counters = HiCacheCounters()
        self.consumer = consumer_name(storage_config, str(config.get("instance", "")))
        """This rank's name in the events group (stable across restarts, so a restarted
        rank gets back the events it had not applied)."""
        self.plane = plane or _plane_from(config, self.consumer)
        self._warned_parent = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        interval = float(config.get("release_interval_s", DEFAULT_RELEASE_INTERVAL_S))
        if plane is None and interval > 0:
            self._thread = threading.Thread(target=self._release_loop, args=(config, interval),
                                            name="mooncake-redis-hicache-release", daemon=True)
            self._thread.start()
        if config.get("metrics_port"):
            _serve_metrics(self.plane.index, int(config["metrics_port"]))

    # -- SGLang's HiCacheStorage ---------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        self.mem_pool_host = mem_pool_host

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """A host pool of a hybrid model (Mamba, SWA, indexer ...), named by SGLang's
        PoolName, for batch_get_v2 / batch_set_v2."""
        self.registered_pools[str(_pool_name(host_pool_name))] = host_pool

    def on_host_pools_registered(self) -> None:
        """SGLang's registration burst is over (the anchor pool and every v2 pool)."""
        log.info("HiCache host pools registered: %s",
                 ", ".join(sorted(self.registered_pools)) or "the KV pool only")

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        """The page's bytes (into target_location when given, which is returned); None if
        the page is not stored."""
        return self.batch_get([key], [target_location])[0]

    def batch_get(self, keys: Sequence[str], target_locations: Any = None,
                  target_sizes: Any = None) -> list[Any]:
        """Per key, as get: one round trip for the replica descriptors, then the files."""
        targets = list(target_locations) if target_locations is not None else []
        targets += [None] * (len(keys) - len(targets))
        found: list[Any] = []
        for replica, target in zip(self.plane.replicas(self._keys(keys)), targets):
            if replica is None:
                found.append(None)
            elif target is None:
                found.append(self.plane.store.read(replica))
            else:
                found.append(target if self.plane.store.read_into(replica, byte_view(target))
                             else None)
        return found

    def set(self, key: str, value: Any = None, target_location: Any = None,
            target_sizes: Any = None) -> bool:
        """Store one page (without a parent: SGLang's set does not say which page comes
        before it)."""
        return self.batch_set([key], [value])

    def batch_set(self, keys: Sequence[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None, extra_info: Any = None) -> bool:
        """Store a chain of pages (key i's parent is key i-1); True if every page is stored
        now (a page stored already with the same bytes counts)."""
        if values is None:
            raise InvalidArgument("batch_set needs the pages' values")
        return all(self._put(keys, [bytes(byte_view(value)) for value in values], extra_info))

    def batch_set_v1(self, keys: Sequence[str], host_indices: Any,
                     extra_info: Any = None) -> list[bool]:
        """Store pages straight from the registered host pool (page i starts at
        host_indices[i * page_size]); per page, whether it is stored."""
        pool, size = self._pool()
        before = self._last_write
        self._last_write = (host_indices, len(keys), keys[-1]) if keys else None
        continued = before[2] if before and continues(before[0], before[1], host_indices) \
            else None
        return self._put(keys, _pages_of(pool, size, host_indices, len(keys)), extra_info,
                         continued=continued)

    def batch_get_v1(self, keys: Sequence[str], host_indices: Any,
                     extra_info: Any = None) -> list[bool]:
        """Read pages straight into the registered host pool; per page, whether it was
        read (SGLang uses the leading run)."""
        pool, size = self._pool()
        return self._read_into(pool, size, host_indices, self._keys(keys))

    def exists(self, key: str) -> bool:
        return self.plane.index.is_exist(key + self.suffix)

    def batch_exists(self, keys: Sequence[str], extra_info: Any = None) -> int:
        """How many leading pages are stored (this rank's keys; pages stored without their
        parent are linked under it on the way: the call's keys are one chain)."""
        linked = self.plane.linked
        found = self.plane.leading(self._keys(keys), _parent_of_first(extra_info))
        self._count("parents_linked", self.plane.linked - linked)
        return found

    # -- hybrid models (SGLang's v2 interface) -------------------------------------------

    def batch_exists_v2(self, keys: Sequence[str], pool_transfers: Any = None,
                        extra_info: Any = None) -> Any:
        """The usable prefix of a chain when other pools must be present too: the KV pages'
        leading run, cut by each pool's hit policy (all_pages: every page of the run;
        trailing_pages: the last len(transfer.keys) pages before the cut), as SGLang's
        PoolTransferResult (kv_hit_pages, each pool's own boundary, and every restorable
        prefix length, since a trailing-pages pool can serve 5 pages but not 4)."""
        kv_pages = self.batch_exists(keys, extra_info)
        hits = {KV_POOL: kv_pages} if kv_pages else {}
        restorable = set(range(1, kv_pages + 1))
        transfers = list(pool_transfers or [])
        component_keys = [self._component_keys(t.name, keys[:kv_pages]) for t in transfers]
        present = self.plane.index.batch_is_exist([k for ks in component_keys for k in ks])
        for number, transfer in enumerate(transfers):
            stored = present[number * kv_pages:(number + 1) * kv_pages]
            servable = _servable_prefixes(stored, _hit_policy(transfer),
                                          len(getattr(transfer, "keys", None) or ()) or 1)
            if servable:
                hits[str(_pool_name(transfer.name))] = max(servable)
            restorable &= servable
        return _pool_transfer_result(max(restorable, default=0), hits, sorted(restorable))

    def batch_get_v2(self, transfers: Sequence[Any], extra_info: Any = None
                     ) -> dict[Any, list[bool]]:
        """Read each transfer's pages of its pool into that host pool; per pool name, per
        key, whether it was read."""
        done: dict[Any, list[bool]] = {}
        for transfer in transfers:
            pool, size, keys = self._transfer(transfer)
            done[transfer.name] = [False] * len(keys) if pool is None or size is None else \
                self._read_into(pool, size, transfer.host_indices,
                                self._component_keys(transfer.name, keys))
        return done

    def batch_set_v2(self, transfers: Sequence[Any], extra_info: Any = None
                     ) -> dict[Any, list[bool]]:
        """Store each transfer's pages of its pool (each an object of its page's node, with
        the page's parent); per pool name, per key, whether it is stored."""
        done: dict[Any, list[bool]] = {}
        for transfer in transfers:
            pool, size, keys = self._transfer(transfer)
            if pool is None or size is None:
                done[transfer.name] = [False] * len(keys)
                continue
            pages = _pages_of(pool, size, transfer.host_indices, len(keys))
            done[transfer.name] = self._put(keys, pages, extra_info,
                                            self._component_keys(transfer.name, keys))
        return done

    def clear(self) -> None:
        """Remove every page of the namespace (every rank's), and delete their files."""
        self.plane.index.remove_all(force=True)
        self.plane.release()

    def get_stats(self) -> None:
        return None

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.plane.index.close()

    # -- freeing -------------------------------------------------------------------------

    def release(self) -> int:
        """Delete the files freed since the last call (the thread does this on its own);
        how many."""
        return self.plane.release().deleted

    def _release_loop(self, config: dict[str, Any], interval: float) -> None:
        plane = _plane_from({**config, "segment_capacity_bytes": None},  # its own client
                            self.consumer + "_release")
        while not self._stop.wait(interval):
            try:
                plane.release()
                plane.index.segment_heartbeat(plane.store.segment)
            except (MooncakeRedisError, OSError) as error:  # Redis away: try again later
                log.warning("releasing freed HiCache pages failed: %s", error)

    # -- plumbing ------------------------------------------------------------------------

    def _keys(self, keys: Sequence[str]) -> list[str]:
        return [key + self.suffix for key in keys]

    def _component_keys(self, pool: Any, keys: Sequence[str]) -> list[str]:
        """The object keys of one pool's part of these pages: the KV pool's are the pages'
        own keys; another pool's are `<hash>_<pool>` + this rank's suffix (the TP-sharded
        one for TP_SHARDED_POOLS), in the page's node."""
        name = str(_pool_name(pool))
        if name == KV_POOL:
            return self._keys(keys)
        suffix = self.sharded_suffix if name in TP_SHARDED_POOLS else self.suffix
        return [f"{key}_{name}{suffix}" for key in keys]

    def _put(self, keys: Sequence[str], values: Sequence[bytes], extra_info: Any,
             object_keys: Sequence[str] | None = None, continued: str | None = None
             ) -> list[bool]:
        """continued: the last key of the batch before, of which this one is the rest (the
        first page's parent when SGLang passes no prefix_keys)."""
        if not keys:
            return []
        first_parent = _parent_of_first(extra_info)
        if first_parent is None and getattr(extra_info, "prefix_keys", None) is None:
            first_parent = continued
            if continued is None:
                self._without_parent()
            else:
                self._count("batches_continued", 1)
        parents = [first_parent, *keys[:-1]]
        conflicts = self.plane.conflicts
        put = self.plane.put([Page(key, value, parent) for key, value, parent in
                              zip(object_keys or self._keys(keys), values, parents)])
        self._count("conflicting_pages", self.plane.conflicts - conflicts)
        return put

    def _without_parent(self) -> None:
        self._count("batches_without_parent", 1)
        if not self._warned_parent:
            self._warned_parent = True
            log.warning("SGLang sent a radix node's pages without naming the page before "
                        "them, so the first is stored as a root: leaf-first eviction then "
                        "drops pages whose descendants stay, unusable. Add %s (and "
                        "\"interface_v1\": 1) to --hicache-storage-backend-extra-config. "
                        "Counted in batches_without_parent; reads link such pages once they "
                        "see the chain.", PASS_PREFIX_KEYS)

    def _count(self, counter: str, amount: int) -> None:
        if amount:
            setattr(self.counters, counter, getattr(self.counters, counter) + amount)
            for observer in observers.hicache_observers:
                observer(self.plane.index.namespace, counter, amount)

    def _read_into(self, pool: Any, size: int, host_indices: Any, keys: Sequence[str]
                   ) -> list[bool]:
        done = []
        for i, replica in enumerate(self.plane.replicas(keys)):
            page = pool.get_dummy_flat_data_page()
            ok = replica is not None and self.plane.store.read_into(replica, byte_view(page))
            if ok:
                pool.set_from_flat_data_page(int(host_indices[i * size]), page)
            done.append(ok)
        return done

    def _pool(self) -> tuple[Any, int]:
        if self.mem_pool_host is None:
            raise ConfigurationError("batch_get_v1/batch_set_v1 need the host pool: SGLang "
                                     "calls register_mem_pool_host first")
        return self.mem_pool_host, _page_size(self.mem_pool_host)

    def _transfer(self, transfer: Any) -> tuple[Any, int | None, list[str]]:
        """(host pool, page size, keys) of a PoolTransfer; page size None when its host
        indices do not cover its keys (logged; SGLang's backends refuse the same)."""
        keys = list(transfer.keys or [])
        name = str(_pool_name(transfer.name))
        pool = self.mem_pool_host if name == KV_POOL and name not in self.registered_pools \
            else self.registered_pools.get(name)
        if pool is None:
            log.error("no host pool %r was registered (register_mem_host_pool_v2)", name)
            return None, None, keys
        size = _page_size(pool)
        indices = transfer.host_indices
        count = 0 if indices is None else int(indices.numel()) if hasattr(indices, "numel") \
            else len(indices)
        if count != len(keys) * size:
            log.error("pool %s: %d host indices for %d pages of %d tokens", name, count,
                      len(keys), size)
            return pool, None, keys
        return pool, size, keys


def key_suffix(storage_config: Any, tp_sharded: bool = False) -> str:
    """What this rank appends to a page hash to name the model and its slice of the page,
    so that two models, or two ranks holding different bytes, never share a key, as SGLang's
    own file and Mooncake backends name them:

    - the model: `_<model>` (`model_tag`; SGLang hashes tokens alone, so two models'
      pages of one prompt have one hash);
    - TP: `_<tp_rank>_<tp_size>`, except for MLA models, whose KV every TP rank holds whole
      (none; tp_sharded: a pool split across TP ranks even then, such as Mamba state);
    - PP: `_pp<pp_rank>_<pp_size>` (each stage holds its own layers);
    - attention context parallelism: `_cp<attn_cp_rank>_<attn_cp_size>` (each CP rank holds
      a disjoint slice of every page);
    - MLA decode context parallelism: `_tp<tp_size>_dcp<dcp_rank>_<dcp_size>` (each DCP
      shard holds its own tokens of the page; equal shards of other DCP groups share it).

    Attention data parallelism needs no part: SGLang gives the storage config the rank
    within its attention-TP group, and two DP ranks of one attention-TP rank compute the
    same slice of a page from the same tokens, so they share its bytes and its key."""
    mla = bool(getattr(storage_config, "is_mla_model", False)) and not tp_sharded
    tp_rank, tp_size = _rank(storage_config, "tp_rank", "tp_size")
    suffix = f"_{model_tag(storage_config)}" + ("" if mla else f"_{tp_rank}_{tp_size}")
    pp_rank, pp_size = _rank(storage_config, "pp_rank", "pp_size")
    if pp_size > 1:
        suffix += f"_pp{pp_rank}_{pp_size}"
    cp_rank, cp_size = _rank(storage_config, "attn_cp_rank", "attn_cp_size")
    if cp_size > 1:
        suffix += f"_cp{cp_rank}_{cp_size}"
    dcp_rank, dcp_size = _rank(storage_config, "dcp_rank", "dcp_size")
    if dcp_size > 1:
        suffix += f"_tp{tp_size}_dcp{dcp_rank}_{dcp_size}"
    return suffix


def model_tag(storage_config: Any) -> str:
    """The model's name as keys carry it: SGLang's storage_config.model_name (its
    --served-model-name, by default the model path, with a tag of the host pool's page
    format where it has one) with `/` as `-`, as SGLang's file and Mooncake backends write
    it; a name longer than MODEL_TAG_LENGTH once percent-encoded is cut and ends in 16 hex
    digits of blake3 of the whole. ConfigurationError where SGLang names no model: pages of
    different models would then share keys, and one model would read another's KV."""
    name = str(getattr(storage_config, "model_name", None) or "")
    if not name:
        raise ConfigurationError(
            "the mooncake-redis HiCache backend needs the model's name to key its pages, and "
            "SGLang gave none (storage_config.model_name: SGLang passes its "
            "--served-model-name, or the model path): without it two models would read each "
            "other's pages")
    tag = "-".join(name.split("/"))
    if len(quote(tag, safe="")) <= MODEL_TAG_LENGTH:
        return tag
    cut = tag[:MODEL_TAG_LENGTH - 17]
    while len(quote(cut, safe="")) > MODEL_TAG_LENGTH - 17:
        cut = cut[:-1]
    return f"{cut}-{blake3.blake3(name.encode()).hexdigest(length=8)}"


def continues(before: Any, pages_before: int, indices: Any) -> bool:
    """Whether a batch's host indices continue the batch before, of one write-back: that
    one was a full batch (STORAGE_BATCH_SIZE pages), and these indices start where its end,
    in the same torch storage or numpy buffer. SGLang's _page_backup cuts a write-back's
    pages so (`operation.host_indices[i * page_size:...]`), and the unified radix cache
    gives each radix node a copy of its host indices of its own, so the first page of such
    a batch is the page after the last of the batch before. Lists and other sequences tell
    nothing: False. (A write-back whose host indices were allocated right after the last
    one's in one array, and whose predecessor filled whole batches, would pass too: see
    docs/INTEGRATIONS.md.)"""
    spans = [_span(before), _span(indices)]
    return pages_before == _storage_batch_size() and None not in spans and \
        spans[0][0] == spans[1][0] and spans[0][2] == spans[1][1]  # type: ignore[index]


def _storage_batch_size() -> int:
    """SGLang's STORAGE_BATCH_SIZE: the pages of one write-back call but the last."""
    module = _sglang_module()
    return int(getattr(module, "STORAGE_BATCH_SIZE", STORAGE_BATCH_SIZE))


def _span(indices: Any) -> tuple[int, int, int] | None:
    """(the buffer's identity, first byte, end byte) of a contiguous 1-D torch tensor or
    numpy array; None for anything else."""
    if hasattr(indices, "untyped_storage") and hasattr(indices, "data_ptr"):  # torch
        if indices.dim() != 1 or not indices.is_contiguous():
            return None
        start = int(indices.data_ptr())
        return (int(indices.untyped_storage().data_ptr()), start,
                start + int(indices.numel()) * int(indices.element_size()))
    interface = getattr(indices, "__array_interface__", None)  # numpy
    if interface is None or indices.ndim != 1 or not indices.flags.c_contiguous:
        return None
    root = indices
    while getattr(root, "base", None) is not None:
        root = root.base
    start = int(interface["data"][0])
    return id(root), start, start + int(indices.nbytes)


def consumer_name(storage_config: Any, instance: str = "") -> str:
    """This process's name in the events group of its segment: the host, the instance (for
    several SGLang servers of the same ranks on one host), and every rank it has, attention
    DP's included (DP ranks share keys, not processes)."""
    name = socket.gethostname() + (f"_{instance}" if instance else "")
    if storage_config is None:
        return name
    parts = [("dp", getattr(storage_config, "dp_rank", 0) or 0, 0),
             ("tp", *_rank(storage_config, "tp_rank", "tp_size")),
             ("pp", *_rank(storage_config, "pp_rank", "pp_size")),
             ("cp", *_rank(storage_config, "attn_cp_rank", "attn_cp_size"))]
    return name + "".join(f"_{label}{rank}" for label, rank, size in parts
                          if size != 1 or label in ("dp", "tp"))


def _rank(storage_config: Any, rank: str, size: str) -> tuple[int, int]:
    return int(getattr(storage_config, rank, 0) or 0), int(getattr(storage_config, size, 1) or 1)


def _parent_of_first(extra_info: Any) -> str | None:
    prefix = getattr(extra_info, "prefix_keys", None)
    return prefix[-1] if prefix else None


def _pool_name(name: Any) -> Any:
    """A PoolName (a str enum) or a plain str, as the str SGLang's enum value is."""
    return getattr(name, "value", name)


def _hit_policy(transfer: Any) -> str:
    policy = str(_pool_name(getattr(transfer, "hit_policy", ALL_PAGES)))
    if policy not in (ALL_PAGES, TRAILING_PAGES):
        raise InvalidArgument(f"pool {_pool_name(transfer.name)}: hit policy {policy!r} is not "
                              f"answered by this backend ({ALL_PAGES}, {TRAILING_PAGES})")
    return policy


def _servable_prefixes(stored: Sequence[bool], policy: str, trailing: int) -> set[int]:
    """The prefix lengths (1..len(stored)) a pool can serve: all_pages, those whose every
    page it holds; trailing_pages, those whose last `trailing` pages it holds."""
    if policy == ALL_PAGES:
        run = stored.index(False) if False in stored else len(stored)
        return set(range(1, run + 1))
    return {length for length in range(1, len(stored) + 1)
            if all(stored[max(0, length - trailing):length])}


def _pool_transfer_result(kv_hit_pages: int, hits: dict[str, int], restorable: list[int]
                          ) -> Any:
    module = _sglang_module()
    result_type = getattr(module, "PoolTransferResult", PoolHits) if module else PoolHits
    return result_type(kv_hit_pages, hits, restorable)


def _page_size(pool: Any) -> int:
    return int(getattr(pool, "page_size", 1) or 1)


def _pages_of(pool: Any, size: int, host_indices: Any, count: int) -> list[bytes]:
    return [bytes(byte_view(pool.get_data_page(int(host_indices[i * size]), flat=True)))
            for i in range(count)]


def byte_view(buffer: Any) -> memoryview:
    """The bytes of a buffer-protocol object, or of a CPU torch tensor (a tensor has no
    buffer protocol; its uint8 view's numpy() shares its memory), as a flat byte view."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(buffer, torch.Tensor):
        if not buffer.is_contiguous():
            raise InvalidArgument("HiCache pages must be contiguous tensors")
        buffer = buffer.view(torch.uint8).numpy()
    try:
        return memoryview(buffer).cast("B")
    except TypeError as error:
        raise InvalidArgument(f"a HiCache page must be bytes-like or a torch tensor, not "
                              f"{type(buffer).__name__}") from error


def _plane_from(config: Mapping[str, Any], consumer: str) -> FileDataPlane:
    directory = config.get("directory")
    if not directory:
        raise ConfigurationError("the mooncake-redis HiCache backend needs \"directory\" in "
                                 "--hicache-storage-backend-extra-config")
    index = Index.from_url(config.get("url") or os.environ.get(ENV_URL),
                           config.get("namespace", DEFAULT_NAMESPACE),
                           **dict(config.get("index_settings") or {}))
    store = FileByteStore(directory, config.get("segment", DEFAULT_SEGMENT))
    capacity = config.get("segment_capacity_bytes")
    return FileDataPlane(index, store, int(capacity) if capacity else None,
                         evict_inline=bool(config.get("evict_inline", True)),
                         consumer=consumer)


def _serve_metrics(index: Index, port: int) -> None:
    """An exporter in SGLang's process: the namespace's gauges, and this process's counters
    (the backend's included)."""
    exporter = index.metrics_exporter()
    exporter.count_this_process()
    exporter.serve(port)

