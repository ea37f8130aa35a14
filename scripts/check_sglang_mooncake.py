"""Run SGLang 0.5.23's own `mooncake` HiCache backend (MooncakeStore, from the wheel) on
the drop-in, with `mooncake.store` resolved to mooncake_redis.mooncake, and round-trip
pages through it. No GPU and no Mooncake needed; torch (a CPU build) is, in a venv of
its own, never the project's:

    pip download sglang==0.5.23 --no-deps -d /tmp/sglang
    python3 -m venv .venv-check && .venv-check/bin/pip install torch==2.13.0 requests numpy
    .venv-check/bin/pip install -e .
    .venv-check/bin/python scripts/check_sglang_mooncake.py /tmp/sglang/sglang-0.5.23-*.whl \
        [--url redis://...]

From the wheel, unchanged: sglang/srt/environ.py, mem_cache/hicache_storage.py,
mem_cache/storage/backend_factory.py and mem_cache/storage/mooncake_store/
mooncake_store.py. Stand-ins only for the modules mooncake_store.py imports names from
that pull in the rest of SGLang (the host pool classes, the hybrid-pool linker, the
metrics collector), and for the host KV pool itself: torch tensors with SGLang's
page-first layout and the methods MooncakeStore calls on it. `mooncake` and
`mooncake.store` are aliases of the drop-in in this process only.

The backend is built as `--hicache-storage-backend mooncake` builds it
(StorageBackendFactory.create_backend("mooncake", HiCacheStorageConfig(...), pool)),
configured by extra_config's master_server_address (the Redis URL); its constructor runs
setup() and SGLang's warmup (put, is_exist, get). Then, for an MHA, an MLA and a
layer-first MLA layout: register_mem_pool_host (register_buffer of the host pool),
batch_set_v1 (batch_is_exist, batch_put_from, or batch_put_from_multi_buffers for one
buffer per layer), batch_exists, batch_get_v1 into another pool (batch_get_into or
batch_get_into_multi_buffers), the bytes
compared, the objects checked in Redis under SGLang's key names, clear() (remove_all,
which, as on Mooncake, leaves the objects read within the lease).
Exit 0 when every page came back byte for byte.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import types
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FROM_WHEEL = {
    "sglang.srt.environ": "sglang/srt/environ.py",
    "sglang.srt.mem_cache.hicache_storage": "sglang/srt/mem_cache/hicache_storage.py",
    "sglang.srt.mem_cache.storage.backend_factory":
        "sglang/srt/mem_cache/storage/backend_factory.py",
    "sglang.srt.mem_cache.storage.mooncake_store.mooncake_store":
        "sglang/srt/mem_cache/storage/mooncake_store/mooncake_store.py",
}
PACKAGES = ("sglang", "sglang.srt", "sglang.srt.mem_cache", "sglang.srt.mem_cache.storage",
            "sglang.srt.mem_cache.storage.mooncake_store", "sglang.srt.mem_cache.hybrid_cache",
            "sglang.srt.mem_cache.pool_host", "sglang.srt.observability")
PAGE_SIZE = 4  # tokens per page
PAGES = 16


def module(name: str, **names: Any) -> types.ModuleType:
    made = types.ModuleType(name)
    made.__dict__.update(names)
    sys.modules[name] = made
    return made


def stand_ins() -> None:
    """Packages, and the names mooncake_store.py imports from modules that would need the
    rest of SGLang; `mooncake.store` is the drop-in."""
    for package in PACKAGES:
        module(package).__path__ = []  # a package, so submodules register under it
    module("sglang.srt.mem_cache.hybrid_cache.linker_pool_assembler",
           DevicePoolEntry=type("DevicePoolEntry", (), {}))
    module("sglang.srt.mem_cache.pool_host", __path__=[],
           HostKVCache=type("HostKVCache", (), {}),
           HostTensorAllocator=type("HostTensorAllocator", (), {"__init__": lambda self: None}))
    module("sglang.srt.mem_cache.pool_host.mla",
           MLATokenToKVPoolHost=type("MLATokenToKVPoolHost", (), {}))
    module("sglang.srt.observability.metrics_collector", StorageMetrics=StorageMetrics)
    import mooncake_redis.mooncake as dropin

    module("mooncake", __path__=[], store=dropin)
    sys.modules["mooncake.store"] = dropin


@dataclass
class StorageMetrics:
    prefetch_pgs: list[int] = field(default_factory=list)
    backup_pgs: list[int] = field(default_factory=list)
    prefetch_bandwidth: list[float] = field(default_factory=list)
    backup_bandwidth: list[float] = field(default_factory=list)


def load(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for name, member in FROM_WHEEL.items():
            source = archive.read(member).decode()
            loaded = module(name)
            loaded.__file__ = f"{wheel}!{member}"
            exec(compile(source, loaded.__file__, "exec"), loaded.__dict__)  # noqa: S102


class HostPool:
    """The host KV pool as MooncakeStore reads it: kv_buffer (one torch tensor, registered
    whole), page_size, get_ksize_per_token, and get_page_buffer_meta(indices): each page's
    addresses and sizes. page_first: a page's K then V (MHA) or its one buffer (MLA);
    layer_first (MLA): one buffer per layer, so MooncakeStore uses the multi-buffer calls."""

    def __init__(self, mla: bool, layers: int = 1, token_bytes: int = 64):
        import torch

        self.page_size = PAGE_SIZE
        self.layout = "layer_first" if layers > 1 else "page_first"
        self.token_bytes = token_bytes
        parts = layers if layers > 1 else (1 if mla else 2)
        self.kv_buffer = torch.zeros(parts, PAGES, PAGE_SIZE * token_bytes, dtype=torch.uint8)

    def get_ksize_per_token(self) -> int:
        return self.token_bytes

    def get_page_buffer_meta(self, indices: Any) -> tuple[list[int], list[int]]:
        pointers, sizes = [], []
        for start in range(0, len(indices), PAGE_SIZE):
            page = int(indices[start]) // PAGE_SIZE
            for part in range(self.kv_buffer.shape[0]):
                pointers.append(self.kv_buffer[part, page].data_ptr())
                sizes.append(self.kv_buffer[part, page].numel())
        return pointers, sizes


def check(layout: str, url: str, problems: list[str]) -> None:
    import torch

    storage = sys.modules["sglang.srt.mem_cache.hicache_storage"]
    factory = sys.modules["sglang.srt.mem_cache.storage.backend_factory"]
    from mooncake_redis import Index

    mla = layout.startswith("MLA")
    layers = 3 if "layer_first" in layout else 1
    config = storage.HiCacheStorageConfig(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=mla, enable_storage_metrics=False, is_page_first_layout=True,
        model_name=None, extra_config={
            "master_server_address": url, "local_hostname": "127.0.0.1",
            "metadata_server": "P2PHANDSHAKE", "global_segment_size": "1gb",
            "protocol": "tcp", "device_name": ""})
    pool = HostPool(mla, layers)
    pool.kv_buffer.copy_(torch.randint(0, 256, pool.kv_buffer.shape, dtype=torch.uint8))
    backend = factory.StorageBackendFactory.create_backend("mooncake", config, pool)
    backend.register_mem_pool_host(pool)  # as HiCacheController.attach_storage_backend does
    chain, prior = [], b""
    for page in range(PAGES):
        prior = hashlib.sha256(prior + bytes([page])).digest()
        chain.append(prior.hex())
    indices = torch.arange(PAGES * PAGE_SIZE)
    written = backend.batch_set_v1(chain, indices)
    again = backend.batch_set_v1(chain[:4], indices[:4 * PAGE_SIZE])  # stored: skipped
    hits = backend.batch_exists(chain + ["ff" * 32])
    reader = HostPool(mla, layers)
    backend.register_mem_pool_host(reader)
    read = backend.batch_get_v1(chain, indices)
    equal = torch.equal(reader.kv_buffer, pool.kv_buffer)
    index = Index.from_url(url, os.environ["MOONCAKE_REDIS_NAMESPACE"])
    suffixes = ["__k"] if mla else ["_0_k", "_0_v"]  # SGLang's key names
    stored = [index.object_info(chain[0] + suffix) for suffix in suffixes]
    replica = stored[0].replicas[0] if stored[0] else None
    before = index.usage().objects
    backend.clear()  # remove_all(): objects read in the last lease_ttl_ms stay, as on Mooncake
    left = index.usage().objects
    print(f"{layout}: created by StorageBackendFactory: {type(backend).__module__}."
          f"{type(backend).__name__} on {type(backend.store).__module__}."
          f"{type(backend.store).__name__}; batch_set_v1 {sum(written)}/{len(written)} "
          f"(again: {sum(again)}/{len(again)}); batch_exists of {PAGES} stored + 1 absent: "
          f"{hits}; batch_get_v1 {sum(read)}/{len(read)}; bytes equal: {equal}; first page's "
          f"objects {[chain[0][:8] + '…' + s for s in suffixes]} "
          f"{'stored' if all(stored) else 'MISSING'}"
          f"{f' ({replica.size} bytes on segment {replica.segment})' if replica else ''}; "
          f"clear() removed {before - left} of {before} objects (the rest were read "
          "moments ago: leased)")
    if not (all(written) and all(again) and hits == PAGES and all(read) and equal
            and all(stored)):
        problems.append(f"{layout}: the write-back / prefetch round trip did not return the "
                        "pages")
    backend.store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("wheel", type=Path, help="sglang-0.5.23-*.whl")
    parser.add_argument("--url", default="memory://check-sglang-mooncake",
                        help="Redis URL (default: in process)")
    args = parser.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("needs torch (a CPU build) in this interpreter: see the top of this file",
              file=sys.stderr)
        return 2
    os.environ.setdefault("MOONCAKE_REDIS_NAMESPACE", "check-sglang")
    os.environ.setdefault("MOONCAKE_REDIS_DATA_DIR", tempfile.mkdtemp(prefix="sglang-mc-"))
    stand_ins()
    load(args.wheel)
    problems: list[str] = []
    for layout in ("MHA", "MLA", "MLA, layer_first"):
        check(layout, args.url, problems)
    for problem in problems:
        print("MISMATCH:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
