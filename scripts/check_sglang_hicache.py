"""Check the HiCache backend against SGLang's own code.

    pip download sglang==0.5.23 --no-deps -d /tmp/sglang
    .venv/bin/python scripts/check_sglang_hicache.py /tmp/sglang/sglang-0.5.23-*.whl

The base checks need neither a GPU nor torch: they load two modules from the wheel,
sglang/srt/mem_cache/hicache_storage.py (the HiCacheStorage interface, its config, extra
info and v2 pool classes) and storage/backend_factory.py (how `--hicache-storage-backend
dynamic` builds a backend), with stand-ins for what they import that is not installed
(torch, sglang.srt.environ's settings); build the backend exactly as SGLang does
(StorageBackendFactory.create_backend("dynamic", HiCacheStorageConfig(...), host_pool)),
check it is a HiCacheStorage whose methods take SGLang's parameters, run a write-back and
a prefetch through the v1 calls, the v2 calls with SGLang's PoolTransfer / PoolName /
PoolHitPolicy (answered as SGLang's PoolTransferResult), and key every parallel slice of
a page from configs SGLang's own HiCacheStorageConfig accepts.

Where the wheel is installed with real (CPU) torch, the checks also drive SGLang's own
HiCacheController code (cache_controller.py: _page_backup, _page_set_zero_copy,
_storage_hit_query, _page_transfer with SGLang's StorageOperation, PrefetchOperation and
page hashes) over a host pool of torch tensors: a 6-page chain backed up as two radix
nodes (4 + 2 pages) with and without "hicache_storage_pass_prefix_keys", one page
evicted, and the pages prefetched back; and a 260-page radix node backed up without the
flag, one chain at write time. An environment for that (SGLang's imports that
cache_controller.py reaches, CPU torch 2.13.0), on a machine without a GPU:

    python3.11 -m venv .venv-check
    .venv-check/bin/pip install torch==2.13.0 torchvision==0.28.0 \
        --index-url https://download.pytorch.org/whl/cpu
    .venv-check/bin/pip install numpy orjson psutil pybase64 requests triton \
        packaging pillow starlette pydantic IPython aiohttp apache-tvm-ffi transformers \
        dill sentencepiece compressed_tensors gguf msgspec pyzmq
    .venv-check/bin/pip install --no-deps /tmp/sglang/sglang-0.5.23-*.whl
    .venv-check/bin/pip install -e .
    .venv-check/bin/python scripts/check_sglang_hicache.py /tmp/sglang/sglang-0.5.23-*.whl

msgspec and pyzmq are imported by SGLang's managers (without them the controller cannot
be imported and only the base checks run), triton by sglang.srt.utils (it installs and
imports without a GPU). torchvision runs in none of these checks, but the controller's
imports reach it (sglang.srt.configs' multimodal configs and transformers' image
processors import torchvision.transforms), so it must be there and match torch: PyPI's
torchvision is built against PyPI's CUDA torch and fails beside CPU torch with
"RuntimeError: operator torchvision::nms does not exist". The CPU index above has both
as CPU builds (torch 2.13.0+cpu, torchvision 0.28.0+cpu); installed first, the CPU torch
satisfies what the second line's packages ask of torch, so pip leaves it. Where that
index cannot be reached, `pip install torch==2.13.0` of a local torch-2.13.0+cpu wheel
installs the same way; leave torchvision out then: where none is installed (and torch and
SGLang are), the script answers SGLang's imports of torchvision with a stand-in whose
every name is a placeholder (TorchvisionStandIn), and says so.

Everything runs on the in-process store (memory://) and a temporary directory. Prints what
it did; exit 1 on a mismatch.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.abc
import importlib.util
import inspect
import queue
import sys
import tempfile
import types
import zipfile
from pathlib import Path
from typing import Any

MODULES = {
    "sglang.srt.mem_cache.hicache_storage": "sglang/srt/mem_cache/hicache_storage.py",
    "sglang.srt.mem_cache.storage.backend_factory":
        "sglang/srt/mem_cache/storage/backend_factory.py",
}
INTERFACE = ("batch_exists", "batch_get_v1", "batch_set_v1", "batch_exists_v2",
             "batch_get_v2", "batch_set_v2", "register_mem_host_pool_v2",
             "on_host_pools_registered")
PAGE_SIZE = 4
PAGE_BYTES = 64
problems: list[str] = []


def check(ok: bool, what: str) -> None:
    print(("ok       " if ok else "MISMATCH ") + what)
    if not ok:
        problems.append(what)


# -- loading SGLang ------------------------------------------------------------------------


def installed_sglang(wheel: Path) -> bool:
    """Whether this wheel's SGLang is installed with its imports (the full checks)."""
    if importlib.util.find_spec("sglang") and importlib.util.find_spec("torch") and \
            importlib.util.find_spec("torchvision") is None:
        sys.meta_path.insert(0, TorchvisionStandIn())
        print("torchvision is not installed: a stand-in answers SGLang's imports of it (no "
              "torchvision code runs in these checks)")
    try:
        version = importlib.import_module("sglang.version").__version__
        importlib.import_module("sglang.srt.managers.cache_controller")
    except Exception as error:  # anything SGLang's import chain raises without its deps
        print(f"SGLang's cache controller cannot be imported here ({type(error).__name__}: "
              f"{error}): base checks only\n  to run them all: {missing_fix(error)}")
        return False
    if f"-{version}-" not in wheel.name:
        print(f"the installed SGLang is {version}, not the wheel's: base checks only")
        return False
    return True


class Placeholder:
    """Any name of the torchvision stand-in: called, subclassed or looked into, it gives
    another placeholder."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Placeholder:
        return Placeholder()

    def __getattr__(self, name: str) -> Placeholder:
        return Placeholder()

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)


class TorchvisionStandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """torchvision and each of its submodules as modules whose every name is a Placeholder:
    SGLang's multimodal configs import torchvision.transforms when the cache controller is
    imported, and PyPI has no CPU build of torchvision (its CUDA build fails beside a CPU
    torch); nothing checked here runs torchvision code."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name.partition(".")[0] != "torchvision":
            return None
        return importlib.util.spec_from_loader(name, self, is_package=True)

    def create_module(self, spec: Any) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__getattr__ = lambda name: Placeholder()  # type: ignore[method-assign]
        module.__path__ = []
        module.__version__ = "0.28.0"  # type: ignore[attr-defined]  # torch 2.13.0's match
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CPU_TORCH = f"pip install torch==2.13.0 torchvision==0.28.0 --index-url {CPU_INDEX}"
PIP_NAMES = {"zmq": "pyzmq", "PIL": "pillow", "tvm_ffi": "apache-tvm-ffi"}


def missing_fix(error: BaseException) -> str:
    """What to install for the error SGLang's import chain raised (see the docstring)."""
    if isinstance(error, ModuleNotFoundError) and error.name:
        top = error.name.partition(".")[0]
        if top in ("torch", "torchvision"):
            return f"module {top!r} is missing: {CPU_TORCH} (CPU builds, matching)"
        if top == "sglang":
            return ("SGLang is not installed: pip install --no-deps "
                    "/tmp/sglang/sglang-0.5.23-*.whl")
        return f"module {top!r} is missing: pip install {PIP_NAMES.get(top, top)}"
    if "torchvision::" in str(error):
        return ("torchvision does not match torch (PyPI's torchvision is a CUDA build, "
                f"this torch is not): {CPU_TORCH}")
    return "install what it names; the script's docstring lists the whole environment"


def stand_ins() -> None:
    """torch (only torch.Tensor is named at import time) and sglang.srt.environ.envs."""
    if importlib.util.find_spec("torch") is None:
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


def load_from(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for name, member in MODULES.items():
            source = archive.read(member).decode()
            module = types.ModuleType(name)
            module.__file__ = f"{wheel}!{member}"
            sys.modules[name] = module
            exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102


# -- host pools ----------------------------------------------------------------------------


class BytePool:
    """The host pool methods the backend calls (HostKVCache's names) over a bytearray."""

    def __init__(self, pages: int, page_size: int = PAGE_SIZE):
        self.page_size = page_size
        self.token_bytes = PAGE_BYTES // page_size
        self.data = bytearray(pages * PAGE_BYTES)

    def get_data_page(self, index: int, flat: bool = True) -> memoryview:
        return memoryview(self.data)[index * self.token_bytes:][:PAGE_BYTES]

    def get_dummy_flat_data_page(self) -> bytearray:
        return bytearray(PAGE_BYTES)

    def set_from_flat_data_page(self, index: int, page: bytearray) -> None:
        self.data[index * self.token_bytes:index * self.token_bytes + PAGE_BYTES] = page


class TensorPool:
    """The same over a torch tensor, as SGLang's MHA host pool returns pages (flattened
    slices of its buffer; fresh zero tensors as dummy pages)."""

    def __init__(self, torch: Any, pages: int, page_size: int = PAGE_SIZE):
        self.torch = torch
        self.page_size = page_size
        self.buffer = torch.zeros((pages * page_size, PAGE_BYTES // page_size // 2),
                                  dtype=torch.bfloat16)

    def get_data_page(self, index: Any, flat: bool = True) -> Any:
        return self.buffer[index:index + self.page_size].flatten()

    def get_dummy_flat_data_page(self) -> Any:
        return self.torch.zeros(PAGE_BYTES // 2, dtype=self.torch.bfloat16)

    def set_from_flat_data_page(self, index: int, page: Any) -> None:
        self.buffer[index:index + self.page_size] = page.reshape(self.page_size, -1)


# -- the checks ----------------------------------------------------------------------------


def storage_config(storage: Any, directory: str, namespace: str, **ranks: Any) -> Any:
    fields = {"tp_rank": 0, "tp_size": 1, "pp_rank": 0, "pp_size": 1, "attn_cp_rank": 0,
              "attn_cp_size": 1, "is_mla_model": False, "enable_storage_metrics": False,
              "is_page_first_layout": True, "model_name": "check", **ranks}
    fields["extra_config"] = {
        "backend_name": "mooncake_redis", "module_path": "mooncake_redis.engines.sglang.hicache",
        "class_name": "MooncakeRedisHiCache", "interface_v1": 1,
        "url": f"memory://sglang-check-{namespace}", "directory": directory,
        "segment_capacity_bytes": 1 << 20, "release_interval_s": 0,
        "index_settings": {"lease_ttl_ms": 0}}
    return storage.HiCacheStorageConfig(**fields)


def page_chain(pages: int) -> list[str]:
    chain, prior = [], b""
    for page in range(pages):
        prior = hashlib.sha256(prior + bytes([page])).digest()
        chain.append(prior.hex())
    return chain


def check_interface(storage: Any, backend_class: type) -> None:
    check(issubclass(backend_class, storage.HiCacheStorage),
          "MooncakeRedisHiCache is a subclass of SGLang's HiCacheStorage")
    for name in sorted(storage.HiCacheStorage.__abstractmethods__) + list(INTERFACE):
        ours = inspect.signature(getattr(backend_class, name))
        theirs = inspect.signature(getattr(storage.HiCacheStorage, name))
        check(list(ours.parameters)[:len(theirs.parameters)] == list(theirs.parameters),
              f"{name} takes SGLang's parameters ({', '.join(theirs.parameters)})")
        check(getattr(backend_class, name) is not getattr(storage.HiCacheStorage, name),
              f"{name} is implemented by the backend, not inherited")


def check_v1_and_v2(storage: Any, factory: Any, directory: str) -> None:
    config = storage_config(storage, directory, "v1", is_mla_model=True, tp_rank=1, tp_size=2)
    kv = BytePool(16)
    kv.data[:] = bytes(range(256)) * 4
    backend = factory.StorageBackendFactory.create_backend("dynamic", config, kv)
    backend.register_mem_pool_host(kv)  # as HiCacheController.attach_storage_backend does
    mamba = BytePool(16, page_size=1)
    mamba.data[:] = bytes(range(255, -1, -1)) * 4
    backend.register_mem_host_pool_v2(mamba, storage.PoolName.MAMBA)
    backend.on_host_pools_registered()
    chain = page_chain(4)
    extra = storage.HiCacheStorageExtraInfo
    written = backend.batch_set_v1(chain, list(range(16)), extra(prefix_keys=[]))
    check(all(written), f"batch_set_v1 of 4 pages: {written}")
    hits = backend.batch_exists(chain + ["ff" * 32], extra([]))
    check(hits == 4, f"batch_exists of 4 stored pages and 1 absent: {hits}")
    reader = BytePool(16)
    backend.register_mem_pool_host(reader)
    read = backend.batch_get_v1(chain, list(range(16)), extra([]))
    check(all(read) and reader.data[:256] == kv.data[:256],
          f"batch_get_v1 read the pages back byte for byte: {read}")

    transfer = storage.PoolTransfer
    mamba_name, trailing = storage.PoolName.MAMBA, storage.PoolHitPolicy.TRAILING_PAGES
    set_v2 = backend.batch_set_v2([transfer(name=mamba_name, host_indices=[3], keys=[chain[3]],
                                            hit_policy=trailing)], extra(chain[:3]))
    check(storage.count_pool_hits(set_v2) == {mamba_name: 1},
          f"batch_set_v2 of the trailing Mamba state: {set_v2}")
    result = backend.batch_exists_v2(chain, [transfer(name=mamba_name, keys=[chain[3]],
                                                      hit_policy=trailing)], extra([]))
    check(isinstance(result, storage.PoolTransferResult) and result.kv_hit_pages == 4
          and result.restorable_prefix_pages == [4],
          f"batch_exists_v2 answers SGLang's PoolTransferResult: {result}")
    target = BytePool(16, page_size=1)
    backend.register_mem_host_pool_v2(target, mamba_name)
    got = backend.batch_get_v2([transfer(name=mamba_name, host_indices=[0], keys=[chain[3]])],
                               extra(chain[:3]))
    check(got == {mamba_name: [True]} and target.data[:PAGE_BYTES] ==
          mamba.data[3 * PAGE_BYTES:4 * PAGE_BYTES], f"batch_get_v2 read the state: {got}")
    keys = sorted(backend.plane.index.get_node(chain[3]).keys)
    check(keys == [chain[3] + "_check", chain[3] + "_mamba_check_1_2"],
          f"an MLA page and its TP-sharded Mamba state share the page's node: {keys}")
    backend.close()


def check_models(storage: Any, factory: Any, directory: str) -> None:
    """Two models on one namespace, Redis and directory: SGLang hashes tokens alone, so
    one prompt gives both the same page hashes; the model name SGLang's config carries
    keeps their pages apart. A config without one is refused."""
    backends = {}
    directory = tempfile.mkdtemp(dir=directory)
    for model in ("org/model-a", "model-b"):
        config = storage_config(storage, directory, "models", model_name=model)
        backends[model] = factory.StorageBackendFactory.create_backend("dynamic", config,
                                                                        BytePool(8))
        backends[model].register_mem_pool_host(BytePool(8))
    chain = page_chain(4)
    extra = storage.HiCacheStorageExtraInfo
    written = backends["org/model-a"].batch_set_v1(chain, list(range(16)), extra([]))
    hits = backends["model-b"].batch_exists(chain, extra([]))
    read = backends["model-b"].batch_get_v1(chain, list(range(16)), extra([]))
    check(all(written) and hits == 0 and not any(read),
          f"model B's hit query finds none of model A's 4 pages ({hits}) and reads none "
          f"({read})")
    for backend in backends.values():
        backend.close()
    try:
        config = storage_config(storage, directory, "models", model_name=None)
        factory.StorageBackendFactory.create_backend("dynamic", config, BytePool(8))
        refused = ""
    except Exception as error:  # SGLang's factory may wrap it
        refused = str(error)
    check("needs the model's name" in refused,
          f"a config without a model name is refused: {refused[:120]!r}")


def check_dcp_refused(wheel: Path) -> None:
    """docs/INTEGRATIONS.md says SGLang refuses DCP for a dynamic backend; the wheel's
    cache controller must say so too."""
    with zipfile.ZipFile(wheel) as archive:
        source = archive.read("sglang/srt/managers/cache_controller.py").decode()
    check('if storage_backend not in ("file", "mooncake"):' in source and
          "HiCache L3 with DCP requires file or Mooncake storage." in source,
          "SGLang's cache controller refuses DCP for any storage backend but file and "
          "mooncake (so for this dynamic one)")


def check_keys(storage: Any) -> None:
    """Every parallel slice SGLang's config can describe gets its own key suffix."""
    from mooncake_redis.engines.sglang.hicache import key_suffix

    configs = {
        "TP 0/2": {"tp_rank": 0, "tp_size": 2}, "TP 1/2": {"tp_rank": 1, "tp_size": 2},
        "PP 0/2": {"pp_rank": 0, "pp_size": 2}, "PP 0/4": {"pp_rank": 0, "pp_size": 4},
        "CP 0/2": {"attn_cp_rank": 0, "attn_cp_size": 2},
        "CP 1/2": {"attn_cp_rank": 1, "attn_cp_size": 2},
        "MLA": {"is_mla_model": True, "tp_size": 2},
        "MLA DCP 0/2": {"is_mla_model": True, "tp_rank": 0, "tp_size": 4, "dcp_rank": 0,
                        "dcp_size": 2, "logical_page_size": 64},
        "MLA DCP 1/2": {"is_mla_model": True, "tp_rank": 1, "tp_size": 4, "dcp_rank": 1,
                        "dcp_size": 2, "logical_page_size": 64},
    }
    suffixes = {name: key_suffix(storage_config(storage, "/nonexistent", "keys", **ranks))
                for name, ranks in configs.items()}
    check(len(set(suffixes.values())) == len(suffixes),
          f"distinct keys for distinct slices: {suffixes}")
    same = key_suffix(storage_config(storage, "/nonexistent", "keys", is_mla_model=True,
                                     tp_rank=2, tp_size=4, dcp_rank=0, dcp_size=2,
                                     logical_page_size=64))
    check(same == suffixes["MLA DCP 0/2"],
          f"equal DCP shards of two DCP groups share their key: {same}")
    dp = key_suffix(storage_config(storage, "/nonexistent", "keys", dp_rank=1))
    check(dp == key_suffix(storage_config(storage, "/nonexistent", "keys")),
          f"attention-DP ranks share keys: {dp!r}")


def check_with_sglangs_controller(storage: Any, directory: str) -> None:
    """SGLang's own write-back and prefetch code, with and without prefix keys."""
    import torch

    controller = importlib.import_module("sglang.srt.managers.cache_controller")
    hashes = importlib.import_module("sglang.srt.mem_cache.utils").get_storage_hash_str
    Controller = controller.HiCacheController
    tokens = list(range(1000, 1000 + 6 * PAGE_SIZE))
    first = hashes(tokens[:4 * PAGE_SIZE], None, page_size=PAGE_SIZE)
    second = hashes(tokens[4 * PAGE_SIZE:], first[-1], page_size=PAGE_SIZE)
    for passed in (False, True):
        pool = TensorPool(torch, pages=8)
        pool.buffer.copy_(torch.randn(pool.buffer.shape, dtype=torch.float32)
                          .to(torch.bfloat16))
        config = storage_config(storage, tempfile.mkdtemp(dir=directory), f"ctl-{passed}")
        from mooncake_redis.engines.sglang.hicache import MooncakeRedisHiCache

        backend = MooncakeRedisHiCache(config, {})
        backend.register_mem_pool_host(pool)
        stub = types.SimpleNamespace(page_size=PAGE_SIZE, storage_backend=backend,
                                     prefetch_sync_queue=queue.Queue())
        stub.page_set_func = types.MethodType(Controller._page_set_zero_copy, stub)
        stub.page_get_func = types.MethodType(Controller._page_get_zero_copy, stub)
        stub._page_transfer_kv_batch = types.MethodType(Controller._page_transfer_kv_batch,
                                                        stub)
        for page, node in ((0, first), (4, second)):  # two radix nodes: 4 + 2 pages
            operation = controller.StorageOperation(
                torch.arange(page * PAGE_SIZE, (page + len(node)) * PAGE_SIZE),
                tokens[page * PAGE_SIZE:(page + len(node)) * PAGE_SIZE], hash_value=node,
                prefix_keys=(first[:page] if passed else None))
            Controller._page_backup(stub, operation)
            check(operation.completed_tokens == len(node) * PAGE_SIZE,
                  f"prefix keys {'passed' if passed else 'not passed'}: SGLang's _page_backup "
                  f"stored its {len(node)} pages")
        counted = backend.counters.batches_without_parent
        check(counted == (0 if passed else 2),
              f"batches without a parent counted: {counted} (prefix keys "
              f"{'passed' if passed else 'not passed'})")
        prefetch = controller.PrefetchOperation("check", tokens, None,
                                                [] if passed else None)
        found, hit_tokens = Controller._storage_hit_query(stub, prefetch)
        check(found == first + second, f"SGLang's _storage_hit_query found {len(found)} of 6 "
                                       "pages")
        index = backend.plane.index
        check(index.get_node(second[0]).parent == first[-1],
              f"the second node's first page is linked under the first node's last "
              f"(linked by the hit query: {backend.counters.parents_linked})")
        index.evict((5 * PAGE_BYTES) / index.usage().capacity_bytes)
        prefetch = controller.PrefetchOperation("check", tokens, None, [] if passed else None)
        found, _ = Controller._storage_hit_query(stub, prefetch)
        check(len(found) == 5, f"one page evicted: {len(found)} usable pages (5 expected)")
        reader = TensorPool(torch, pages=8)
        stub.storage_backend.register_mem_pool_host(reader)
        prefetch.hash_value = found
        prefetch.host_indices = torch.arange(0, len(found) * PAGE_SIZE)
        pages = Controller._page_transfer(stub, prefetch)
        check(pages == 5 and torch.equal(reader.buffer[:5 * PAGE_SIZE],
                                         pool.buffer[:5 * PAGE_SIZE]),
              f"SGLang's _page_transfer read {pages} pages back into torch tensors, equal")
        backend.close()


def check_write_back_without_prefix_keys(storage: Any, directory: str) -> None:
    """SGLang's defaults: _page_backup of one radix node of 260 pages cuts it into calls of
    128, 128 and 4 pages, each with prefix_keys None and a slice of the node's host-index
    tensor; the backend links each call's first page under the call before's last at write
    time, so eviction before any read takes the chain's tail."""
    import torch

    from mooncake_redis.engines.sglang.hicache import MooncakeRedisHiCache

    controller = importlib.import_module("sglang.srt.managers.cache_controller")
    hashes = importlib.import_module("sglang.srt.mem_cache.utils").get_storage_hash_str
    tokens = list(range(5000, 5000 + 260 * PAGE_SIZE))
    node = hashes(tokens, None, page_size=PAGE_SIZE)
    pool = TensorPool(torch, pages=260)
    backend = MooncakeRedisHiCache(
        storage_config(storage, tempfile.mkdtemp(dir=directory), "defaults"), {})
    backend.register_mem_pool_host(pool)
    stub = types.SimpleNamespace(page_size=PAGE_SIZE, storage_backend=backend)
    stub.page_set_func = types.MethodType(controller.HiCacheController._page_set_zero_copy,
                                          stub)
    operation = controller.StorageOperation(torch.arange(260 * PAGE_SIZE), tokens,
                                            hash_value=node, prefix_keys=None)
    controller.HiCacheController._page_backup(stub, operation)
    index = backend.plane.index
    parents = [index.get_node(node[page]).parent == node[page - 1] for page in (128, 256)]
    counters = (backend.counters.batches_without_parent, backend.counters.batches_continued)
    check(operation.completed_tokens == 260 * PAGE_SIZE and all(parents) and
          counters == (1, 2), f"without prefix keys, SGLang's _page_backup of a 260-page "
                              f"node is one chain at write time: pages 128 and 256 linked "
                              f"{parents}, (batches without parent, continued) {counters}")
    index.evict(200 * PAGE_BYTES / index.usage().capacity_bytes)
    usable = backend.batch_exists(node)
    check(usable == index.usage().objects == 200,
          f"evicted to 200 pages before any read: {usable} usable (the chain's tail went)")
    backend.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("wheel", type=Path, help="sglang-0.5.23-*.whl (pip download "
                                                 "sglang==0.5.23 --no-deps)")
    wheel = parser.parse_args(argv).wheel
    if not wheel.is_file():
        parser.error(f"no such wheel: {wheel}")
    full = installed_sglang(wheel)
    if not full:
        stand_ins()
        load_from(wheel)
    storage = importlib.import_module("sglang.srt.mem_cache.hicache_storage")
    factory = importlib.import_module("sglang.srt.mem_cache.storage.backend_factory")
    from mooncake_redis.engines.sglang.hicache import MooncakeRedisHiCache

    print(f"SGLang from {wheel.name} ({'installed, with torch' if full else 'two modules'})")
    directory = tempfile.mkdtemp(prefix="sglang-check-")
    check_interface(storage, MooncakeRedisHiCache)
    check_v1_and_v2(storage, factory, directory)
    check_models(storage, factory, directory)
    check_keys(storage)
    check_dcp_refused(wheel)
    if full:
        check_with_sglangs_controller(storage, directory)
        check_write_back_without_prefix_keys(storage, directory)
    print(f"{len(problems)} mismatches" if problems else "every check passed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
