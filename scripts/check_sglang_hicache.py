"""Check the HiCache backend against SGLang's own code, without a GPU or torch.

    pip download sglang==0.5.23 --no-deps -d /tmp/sglang
    .venv/bin/python scripts/check_sglang_hicache.py /tmp/sglang/sglang-0.5.23-*.whl

Loads two modules from the wheel, sglang/srt/mem_cache/hicache_storage.py (the
HiCacheStorage interface and HiCacheStorageConfig) and storage/backend_factory.py (how
`--hicache-storage-backend dynamic` builds a backend), with stand-ins for the two
imports they need that cannot be installed here (torch, and sglang.srt.environ's
settings), then builds the backend exactly as SGLang does (StorageBackendFactory.
create_backend("dynamic", HiCacheStorageConfig(...), host_pool)), checks it is a
HiCacheStorage with every abstract method implemented, and runs a write-back and a
prefetch through it on the in-process store. Prints what it did; exit 1 on a mismatch.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
import tempfile
import types
import zipfile
from pathlib import Path

MODULES = {
    "sglang.srt.mem_cache.hicache_storage": "sglang/srt/mem_cache/hicache_storage.py",
    "sglang.srt.mem_cache.storage.backend_factory":
        "sglang/srt/mem_cache/storage/backend_factory.py",
}


def stand_ins() -> None:
    """torch (only torch.Tensor is named at import time) and sglang.srt.environ.envs."""
    torch = types.ModuleType("torch")
    torch.Tensor = type("Tensor", (), {})  # type: ignore[attr-defined]
    sys.modules["torch"] = torch

    class Unset:
        def get(self) -> None:
            return None

    environ = types.ModuleType("sglang.srt.environ")
    environ.envs = types.SimpleNamespace(  # type: ignore[attr-defined]
        SGLANG_TEST_HICACHE_BACKEND_RANDOM_DELAY=Unset(),
        SGLANG_TEST_HICACHE_BACKEND_RANDOM_FAILURE=Unset())
    for package in ("sglang", "sglang.srt", "sglang.srt.mem_cache",
                    "sglang.srt.mem_cache.storage"):
        module = types.ModuleType(package)
        module.__path__ = []  # a package, so submodules can be registered under it
        sys.modules[package] = module
    sys.modules["sglang.srt.environ"] = environ


def load(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for name, member in MODULES.items():
            source = archive.read(member).decode()
            module = types.ModuleType(name)
            module.__file__ = f"{wheel}!{member}"
            sys.modules[name] = module
            exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102


class HostPool:
    page_size = 4

    def __init__(self) -> None:
        self.data = bytearray(64 * 16)

    def get_data_page(self, index: int, flat: bool = True) -> memoryview:
        return memoryview(self.data)[index * 16:index * 16 + 64]

    def get_dummy_flat_data_page(self) -> bytearray:
        return bytearray(64)

    def set_from_flat_data_page(self, index: int, page: bytearray) -> None:
        self.data[index * 16:index * 16 + 64] = page


def main(wheel: str) -> int:
    stand_ins()
    load(Path(wheel))
    storage = sys.modules["sglang.srt.mem_cache.hicache_storage"]
    factory = sys.modules["sglang.srt.mem_cache.storage.backend_factory"]
    from mooncake_redis.hicache import MooncakeRedisHiCache  # after SGLang's module loaded

    problems = []
    if not issubclass(MooncakeRedisHiCache, storage.HiCacheStorage):
        problems.append("MooncakeRedisHiCache is not a HiCacheStorage subclass")
    for name in sorted(storage.HiCacheStorage.__abstractmethods__):
        ours = inspect.signature(getattr(MooncakeRedisHiCache, name))
        theirs = inspect.signature(getattr(storage.HiCacheStorage, name))
        if list(ours.parameters)[:len(theirs.parameters)] != list(theirs.parameters):
            problems.append(f"{name}{ours} does not match SGLang's {name}{theirs}")
        print(f"{name}: ours {ours}, SGLang's {theirs}")
    for name in ("batch_exists", "batch_get_v1", "batch_set_v1"):
        print(f"{name}: ours {inspect.signature(getattr(MooncakeRedisHiCache, name))}, "
              f"SGLang's {inspect.signature(getattr(storage.HiCacheStorage, name))}")

    directory = tempfile.mkdtemp(prefix="sglang-check-")
    config = storage.HiCacheStorageConfig(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
        model_name="check", extra_config={
            "backend_name": "mooncake_redis", "module_path": "mooncake_redis.hicache",
            "class_name": "MooncakeRedisHiCache", "interface_v1": 1,
            "url": "memory://sglang-check", "directory": directory,
            "segment_capacity_bytes": 1 << 20, "release_interval_s": 0})
    pool = HostPool()
    pool.data[:] = bytes(range(256)) * 4
    backend = factory.StorageBackendFactory.create_backend("dynamic", config, pool)
    backend.register_mem_pool_host(pool)  # as HiCacheController.attach_storage_backend does
    chain, prior = [], b""
    for page in range(4):
        prior = hashlib.sha256(prior + bytes([page])).digest()
        chain.append(prior.hex())
    extra = storage.HiCacheStorageExtraInfo(prefix_keys=[])
    written = backend.batch_set_v1(chain, list(range(16)), extra)
    hits = backend.batch_exists(chain + ["ff" * 32], storage.HiCacheStorageExtraInfo([]))
    reader = HostPool()
    backend.register_mem_pool_host(reader)
    read = backend.batch_get_v1(chain, list(range(16)), extra)
    print(f"created by StorageBackendFactory: {type(backend).__name__}; batch_set_v1 "
          f"{written}; batch_exists of 4 stored + 1 absent: {hits}; batch_get_v1 {read}; "
          f"bytes equal: {reader.data[:256] == pool.data[:256]}")
    if not (all(written) and hits == 4 and all(read) and reader.data[:256] == pool.data[:256]):
        problems.append("the write-back / prefetch round trip did not return the pages")
    backend.close()
    for problem in problems:
        print("MISMATCH:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
