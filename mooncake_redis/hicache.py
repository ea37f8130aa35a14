"""An SGLang HiCache storage backend (L3): metadata, prefix tree and eviction in
mooncake-redis, page bytes in a directory of files (FileDataPlane).

SGLang loads it with `--hicache-storage-backend dynamic` (docs/INTEGRATIONS.md): its
StorageBackendFactory imports this module, checks the class is a subclass of its
`HiCacheStorage` and calls `MooncakeRedisHiCache(storage_config, kwargs)`. The class has
the methods and semantics of `sglang/srt/mem_cache/hicache_storage.py` (SGLang 0.5.23):
get / batch_get / set / batch_set / exists / batch_exists (the count of leading pages
stored), batch_get_v1 / batch_set_v1 (zero copy through the registered host pool, used
with `"interface_v1": 1`), clear, get_stats, close. SGLang and torch are not needed to
import or test it: where SGLang is installed the class also inherits its HiCacheStorage;
values and target buffers are any buffer-protocol object (bytes, bytearray, numpy
arrays) or CPU torch tensors.

Each page is one object, key = page hash + a suffix for the rank that owns it (none for
MLA, whose KV every rank shares; `_<tp_rank>_<tp_size>` else, `_pp<rank>` added with
pipeline parallelism); the page's parent is the previous page of the chain (or the last
of `extra_info.prefix_keys` for the first page of a batch, where SGLang passes it). So a
write-back builds the radix tree, eviction is leaf-first, and batch_exists asks
match_prefix for the leading run. Eviction, unmount and removal events delete the files:
on every write that ran an eviction job, and in a background thread every
`release_interval_s`; the ranks read the events as one consumer group per segment
(`files:<segment>`), so each event is applied once, at least once.
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from .byte_store import FileByteStore
from .data_plane import FileDataPlane, Page
from .errors import ConfigurationError, InvalidArgument, MooncakeRedisError
from .index import Index
from .settings import ENV_URL

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "hicache"
DEFAULT_SEGMENT = "hicache"
DEFAULT_RELEASE_INTERVAL_S = 1.0


def _sglang_base() -> type:
    """SGLang's HiCacheStorage where SGLang is installed (its factory requires a
    subclass), else object: the methods are the same either way."""
    try:
        module = importlib.import_module("sglang.srt.mem_cache.hicache_storage")
    except ImportError:
        return object
    base: type = module.HiCacheStorage
    return base


class MooncakeRedisHiCache(_sglang_base()):  # type: ignore[misc]
    """HiCache's L3 on mooncake-redis and a shared directory.

    extra_config (SGLang's --hicache-storage-backend-extra-config JSON), besides the
    dynamic backend's backend_name / module_path / class_name:
      directory               where page files go (required; shared by every rank/host)
      url                     Redis URL (default: $MOONCAKE_REDIS_URL; keep passwords there)
      namespace               (default "hicache"; one per model)
      segment                 the directory's segment name (default "hicache")
      segment_capacity_bytes  mount the segment with it unless mounted already
      release_interval_s      how often the background thread deletes freed files
                              (default 1.0; 0 = no thread, call release())
      evict_inline            run eviction jobs in this process on pressure (default true)
      index_settings          settings for a new namespace (Index.from_url's)
    """

    def __init__(self, storage_config: Any = None, kwargs: Mapping[str, Any] | None = None,
                 *, plane: FileDataPlane | None = None):
        config: dict[str, Any] = dict(getattr(storage_config, "extra_config", None) or {})
        self.suffix = key_suffix(storage_config)
        self.mem_pool_host: Any = None
        self.consumer = f"{socket.gethostname()}{self.suffix or '_mla'}"
        """This rank's name in the events group (stable across restarts, so a restarted
        rank gets back the events it had not applied)."""
        self.plane = plane or _plane_from(config, self.consumer)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        interval = float(config.get("release_interval_s", DEFAULT_RELEASE_INTERVAL_S))
        if plane is None and interval > 0:
            self._thread = threading.Thread(target=self._release_loop, args=(config, interval),
                                            name="mooncake-redis-hicache-release", daemon=True)
            self._thread.start()

    # -- SGLang's HiCacheStorage ---------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        self.mem_pool_host = mem_pool_host

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
        now (a page stored already counts)."""
        if values is None:
            raise InvalidArgument("batch_set needs the pages' values")
        return all(self._put(keys, [bytes(byte_view(value)) for value in values], extra_info))

    def batch_set_v1(self, keys: Sequence[str], host_indices: Any,
                     extra_info: Any = None) -> list[bool]:
        """Store pages straight from the registered host pool (page i starts at
        host_indices[i * page_size]); per page, whether it is stored."""
        pool, size = self._pool()
        pages = [bytes(byte_view(pool.get_data_page(host_indices[i * size], flat=True)))
                 for i in range(len(keys))]
        return self._put(keys, pages, extra_info)

    def batch_get_v1(self, keys: Sequence[str], host_indices: Any,
                     extra_info: Any = None) -> list[bool]:
        """Read pages straight into the registered host pool; per page, whether it was
        read (SGLang uses the leading run)."""
        pool, size = self._pool()
        done = []
        for i, replica in enumerate(self.plane.replicas(self._keys(keys))):
            page = pool.get_dummy_flat_data_page()
            ok = replica is not None and self.plane.store.read_into(replica, byte_view(page))
            if ok:
                pool.set_from_flat_data_page(host_indices[i * size], page)
            done.append(ok)
        return done

    def exists(self, key: str) -> bool:
        return self.plane.index.is_exist(key + self.suffix)

    def batch_exists(self, keys: Sequence[str], extra_info: Any = None) -> int:
        """How many leading pages are stored (match_prefix, then this rank's keys)."""
        return self.plane.leading(self._keys(keys))

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

    def _put(self, keys: Sequence[str], values: Sequence[bytes], extra_info: Any) -> list[bool]:
        prefix = list(getattr(extra_info, "prefix_keys", None) or [])
        parents = [*prefix[-1:], *keys][:len(keys)] if prefix else [None, *keys[:-1]]
        return self.plane.put([Page(key + self.suffix, value, parent)
                               for key, value, parent in zip(keys, values, parents)])

    def _pool(self) -> tuple[Any, int]:
        if self.mem_pool_host is None:
            raise ConfigurationError("batch_get_v1/batch_set_v1 need the host pool: SGLang "
                                     "calls register_mem_pool_host first")
        return self.mem_pool_host, int(getattr(self.mem_pool_host, "page_size", 1) or 1)


def key_suffix(storage_config: Any) -> str:
    """What this rank appends to a page hash to name its object."""
    if storage_config is None:
        return ""
    suffix = "" if getattr(storage_config, "is_mla_model", False) else \
        f"_{storage_config.tp_rank}_{storage_config.tp_size}"
    if getattr(storage_config, "pp_size", 1) > 1:
        suffix += f"_pp{storage_config.pp_rank}"
    return suffix


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
