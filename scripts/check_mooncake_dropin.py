"""Run the same calls on the real Mooncake client and on the drop-in, and compare what they
return: every method and return code of docs/INTEGRATIONS.md's table, the setup forms
and size strings, bad input.

    ./scripts/install_mooncake_peer.sh            # the real client + mooncake_master
    .venv/bin/python scripts/check_mooncake_dropin.py [--url redis://...]

Against Mooncake 0.3.14 (probe_key, ExistOptions, ReplicateConfig's new fields):
    MOONCAKE_PEER_PACKAGE=mooncake-transfer-engine-cuda13 MOONCAKE_PEER_VERSION=0.3.14 \
        MOONCAKE_PEER_VENV=.venv-peer-0.3.14 ./scripts/install_mooncake_peer.sh
    MOONCAKE_PEER_PACKAGE=mooncake-transfer-engine-cuda13 \
        MOONCAKE_PEER_PYTHON=.venv-peer-0.3.14/bin/python-no-gpu \
        .venv/bin/python scripts/check_mooncake_dropin.py

The Mooncake half runs under the peer's interpreter (.venv-peer, or $MOONCAKE_PEER_PYTHON)
against a mooncake_master it starts on loopback (tcp protocol, one client segment); the
drop-in half in this interpreter, on --url (default: in process, memory://). Prints one
line per call (both results, and whether they agree); a difference docs/INTEGRATIONS.md
names (KNOWN) is reported as such. Exit 0 when every other result agrees, 1 otherwise,
2 when the peer cannot run here.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LEASE_TTL_MS = 10_000  # mooncake_master's default, and the drop-in's for a new namespace

KNOWN = {
    "get_buffer format": "the drop-in's BufferHandle is a bytearray: format 'B', not 'b'",
    "get_batch of no keys": "Mooncake answers [b''] for no keys; the drop-in []",
    "setup local_buffer_size='inf'": "Mooncake converts inf to an integer in a way C++ "
                                     "leaves undefined; the drop-in refuses it",
    "put soft_pin_ttl_ms other than the namespace's": "a soft-pin TTL is per namespace here",
    "remove_all, then with force": "the 20 MB put that does not fit makes Mooncake's master "
                                   "evict objects it picks at random; the drop-in evicts "
                                   "leaf-first: the objects left can differ",
    # 0.3.14 changed these; the drop-in answers as 0.3.13.post1
    "remove_by_regex": "0.3.14's put of a stored key grants it a read lease (0.3.13.post1's "
                       "and the drop-in's do not), so one key fewer goes without force",
    "remove_by_regex with force": "same",
    "unregister_buffer again": "0.3.14 answers -12, 0.3.13.post1 and the drop-in -600",
    "put soft_pin_ttl_ms over the maximum": "0.3.14 takes a TTL over 24 h; 0.3.13.post1 "
                                            "and the drop-in refuse it (-600)",
    "get_batch of a key twice": "Mooncake 0.3.13.post1 answers the first of two equal keys "
                                "with stale bytes (a bug); the drop-in gives the value twice",
}

Step = tuple[str, Callable[[], Any]]


def features(module: Any) -> dict[str, bool]:
    """What a Mooncake version has of 0.3.14's API (both sides run only those steps)."""
    return {"probes": hasattr(module.MooncakeDistributedStore, "probe_key"),
            "exist_options": hasattr(module, "ExistOptions"),
            "config_fields": hasattr(module.ReplicateConfig(), "session_ids")}


def steps(store: Any, module: Any, new_store: Callable[[dict[str, Any]], Any],
          have: dict[str, bool]) -> Iterator[Step]:
    """The calls, in order, on a set-up store; `module` gives ReplicateConfig and
    SoftPinAction; new_store(config) sets up another store with setup(config) and
    returns what setup returned; `have` (features()) says which of 0.3.14's calls the
    Mooncake side has."""
    config_cls, soft = module.ReplicateConfig, module.SoftPinAction
    suffix = uuid.uuid4().hex[:8]

    def key(name: str) -> str:
        return f"{name}-{suffix}"

    def config(**fields: Any) -> Any:
        made = config_cls()
        for name, value in fields.items():
            setattr(made, name, value)
        return made

    yield "put", lambda: store.put(key("k1"), b"hello")
    yield "put of a stored key", lambda: store.put(key("k1"), b"other")
    yield "get keeps the first value", lambda: store.get(key("k1"))
    yield "put of an empty value", lambda: store.put(key("empty"), b"")
    yield "put of an empty key", lambda: store.put("", b"x")
    yield "put of a bytearray", lambda: store.put(key("ba"), bytearray(b"abc"))
    yield "put of a memoryview", lambda: store.put(key("mv"), memoryview(b"abcd"))
    yield "put of a str value", lambda: store.put(key("str"), "abc")
    yield "put of an int key", lambda: store.put(5, b"x")
    yield "get of a missing key", lambda: store.get(key("nope"))
    yield "get_batch", lambda: store.get_batch([key("k1"), key("nope"), key("ba")])
    yield "get_batch of no keys", lambda: store.get_batch([])
    yield "get_batch of a key twice", lambda: store.get_batch([key("ba"), key("ba")])
    yield "get_size", lambda: store.get_size(key("k1"))
    yield "get_size of a missing key", lambda: store.get_size(key("nope"))
    yield "get_size of an empty key", lambda: store.get_size("")
    yield "is_exist", lambda: store.is_exist(key("k1"))
    yield "is_exist of a missing key", lambda: store.is_exist(key("nope"))
    yield "is_exist of an empty key", lambda: store.is_exist("")
    yield "batch_is_exist", lambda: store.batch_is_exist([key("k1"), key("nope"), ""])
    yield "remove of a leased key", lambda: store.remove(key("k1"))
    yield "remove of a missing key", lambda: store.remove(key("nope"))
    yield "remove with force", lambda: store.remove(key("k1"), True)
    yield "batch_remove", lambda: store.batch_remove([key("ba"), key("nope"), key("mv")])
    yield "batch_remove with force", lambda: store.batch_remove(
        [key("ba"), key("nope"), key("mv")], force=True)
    yield "batch_remove of a key twice", lambda: (store.put(key("twice"), b"2"),
                                                  store.batch_remove([key("twice")] * 2, True))
    yield "batch_remove of no keys", lambda: store.batch_remove([])
    yield "put_batch", lambda: store.put_batch([key("b1"), key("b2")], [b"1", b"22"])
    yield "put_batch with a stored key", lambda: store.put_batch([key("b3"), key("b1")],
                                                                 [b"3", b"1"])
    yield "put_batch of unequal lists", lambda: store.put_batch([key("c1"), key("c2")], [b"1"])
    yield "put_batch of a key twice", lambda: (store.put_batch([key("d1")] * 2, [b"1", b"2"]),
                                               store.get(key("d1")))
    yield "put_batch with an empty value", lambda: (
        store.put_batch([key("q1"), key("q2")], [b"1", b""]), store.is_exist(key("q1")))
    yield "put_batch of no keys", lambda: store.put_batch([], [])
    yield "upsert of a new key", lambda: store.upsert(key("u1"), b"first")
    yield "upsert of a stored key", lambda: (store.upsert(key("u1"), b"second, longer"),
                                             store.get(key("u1")))
    yield "upsert of an empty value", lambda: store.upsert(key("u2"), b"")
    yield "upsert_batch", lambda: (store.upsert_batch([key("u1"), key("u3")], [b"x", b"y"]),
                                   store.get_batch([key("u1"), key("u3")]))
    yield "put_parts", lambda: (store.put_parts(key("pp"), b"ab", b"cd"), store.get(key("pp")))
    yield "put_parts of no parts", lambda: (store.put_parts(key("pp0")),
                                            store.is_exist(key("pp0")))
    yield "remove_by_regex", lambda: store.remove_by_regex(f"^b[0-9]-{suffix}$")
    yield "remove_by_regex with force", lambda: store.remove_by_regex(f"^b[0-9]-{suffix}$", True)
    yield "remove_by_regex of a bad pattern", lambda: store.remove_by_regex("([")

    memory = (ctypes.c_ubyte * 4096)()
    address = ctypes.addressof(memory)
    ctypes.memmove(address, b"0123456789", 10)
    yield "register_buffer", lambda: store.register_buffer(address, 4096)
    yield "register_buffer again", lambda: store.register_buffer(address, 4096)
    yield "register_buffer overlapping", lambda: store.register_buffer(address + 8, 16)
    yield "register_buffer of address 0", lambda: store.register_buffer(0, 16)
    yield "put_from", lambda: store.put_from(key("pf"), address, 10)
    yield "put_from of a stored key", lambda: store.put_from(key("pf"), address, 10)
    yield "put_from of 0 bytes", lambda: (store.put_from(key("pf0"), address, 0),
                                          store.is_exist(key("pf0")))
    yield "get after put_from", lambda: store.get(key("pf"))
    yield "get_into", lambda: (store.get_into(key("pf"), address + 64, 64),
                               bytes(memory[64:74]))
    yield "get_into a buffer too small", lambda: store.get_into(key("pf"), address + 64, 4)
    yield "get_into of a missing key", lambda: store.get_into(key("nope"), address + 64, 64)
    yield "batch_get_into", lambda: store.batch_get_into(
        [key("pf"), key("nope")], [address + 128, address + 256], [64, 64])
    yield "batch_get_into a buffer too small", lambda: store.batch_get_into(
        [key("pf")], [address + 128], [4])
    yield "batch_put_from", lambda: (store.batch_put_from(
        [key("bp1"), key("bp2"), key("pf")], [address, address + 1, address], [3, 4, 10]),
        store.get_batch([key("bp1"), key("bp2")]))
    yield "batch_put_from of 0 bytes", lambda: store.batch_put_from([key("bz")], [address], [0])
    yield "batch_put_from of unequal lists", lambda: store.batch_put_from(
        [key("bp3")], [address, address], [3])
    yield "batch_upsert_from", lambda: (store.batch_upsert_from([key("bp1")], [address + 5], [2]),
                                        store.get(key("bp1")))
    yield "get_into_ranges", lambda: (store.get_into_ranges(
        [address + 512], [[key("pf")]], [[[0, 4]]], [[[2, 6]]], [[[3, 2]]]),
        bytes(memory[512:518]))
    yield "get_into_ranges past the object", lambda: store.get_into_ranges(
        [address + 512], [[key("pf")]], [[[0]]], [[[8]]], [[[5]]])
    yield "get_into_ranges past the buffer", lambda: store.get_into_ranges(
        [address + 4090], [[key("pf")]], [[[0]]], [[[0]]], [[[8]]])
    yield "get_into_ranges of a missing key", lambda: store.get_into_ranges(
        [address + 512], [[key("nope"), key("pf")]], [[[0], [4]]], [[[0], [0]]], [[[2], [2]]])
    yield "get_into_ranges of unequal fragments", lambda: store.get_into_ranges(
        [address + 512], [[key("pf")]], [[[0, 1]]], [[[0]]], [[[2]]])
    yield "get_into_ranges of unequal buffers", lambda: store.get_into_ranges(
        [address + 512, address], [[key("pf")]], [[[0]]], [[[0]]], [[[2]]])
    yield "get_into_ranges of nothing", lambda: store.get_into_ranges([], [], [], [], [])
    yield "batch_put_from_multi_buffers", lambda: (store.batch_put_from_multi_buffers(
        [key("m1"), key("m2")], [[address, address + 10], [address + 4]], [[4, 3], [2]]),
        store.get_batch([key("m1"), key("m2")]))
    yield "batch_put_from_multi_buffers of bad shapes", lambda: (
        store.batch_put_from_multi_buffers([key("m3")], [[address, address]], [[1]]),
        store.batch_put_from_multi_buffers([key("m4")], [[]], [[]]),
        store.batch_put_from_multi_buffers([key("m5")], [[address]], [[0]]),
        store.batch_put_from_multi_buffers([key("m6"), key("m7")], [[address]], [[1]]))
    yield "batch_get_into_multi_buffers", lambda: (store.batch_get_into_multi_buffers(
        [key("m1")], [[address + 1024, address + 2048]], [[3, 4]]),
        bytes(memory[1024:1027]), bytes(memory[2048:2052]))
    yield "batch_get_into_multi_buffers too big, too small", lambda: (
        store.batch_get_into_multi_buffers([key("m1")], [[address + 1024, address + 2048]],
                                           [[4, 8]]),
        store.batch_get_into_multi_buffers([key("m1")], [[address + 1024, address + 2048]],
                                           [[2, 2]]),
        store.batch_get_into_multi_buffers([key("nope"), key("m2")], [[address + 1024],
                                                                     [address + 2048]],
                                           [[8], [8]]),
        store.batch_get_into_multi_buffers([key("m1")], [[address + 1024, address]], [[8]]))
    yield "get_buffer", lambda: (lambda b: (type(b).__name__, b.ptr() != 0, b.size(), len(b),
                                            bytes(memoryview(b))))(store.get_buffer(key("pf")))
    yield "get_buffer format", lambda: memoryview(store.get_buffer(key("pf"))).format
    yield "get_buffer of a missing key", lambda: store.get_buffer(key("nope"))
    yield "batch_get_buffer", lambda: [b if b is None else bytes(memoryview(b))
                                       for b in store.batch_get_buffer([key("pf"), key("nope")])]
    yield "unregister_buffer", lambda: store.unregister_buffer(address)
    yield "unregister_buffer again", lambda: store.unregister_buffer(address)
    other = (ctypes.c_ubyte * 64)()
    yield "put_from unregistered memory", lambda: (store.put_from(
        key("pfu"), ctypes.addressof(other), 10), store.remove(key("pfu"), True))
    yield "get_into unregistered memory", lambda: store.get_into(
        key("pf"), ctypes.addressof(other), 64)

    yield "put with replica_num 2 (one segment)", lambda: store.put(
        key("r2"), b"x", config(replica_num=2))
    yield "put with replica_num 0", lambda: store.put(key("r0"), b"x", config(replica_num=0))
    yield "ReplicateConfig replica_num -1", lambda: config(replica_num=-1)
    yield "put preferring a missing segment", lambda: store.put(
        key("rp"), b"x", config(preferred_segment="nosuch:1"))
    yield "put preferring this store", lambda: store.put(
        key("rself"), b"x", config(preferred_segments=[store.get_hostname()]))
    yield "put soft-pinned", lambda: store.put(key("sp"), b"x",
                                               config(soft_pin_action=soft.ENABLE))
    yield "put soft_pin_ttl_ms without ENABLE", lambda: store.put(
        key("sp2"), b"x", config(soft_pin_ttl_ms=1000))
    yield "put soft_pin_ttl_ms over the maximum", lambda: store.put(
        key("sp3"), b"x", config(soft_pin_action=soft.ENABLE, soft_pin_ttl_ms=86_400_001))
    yield "put soft_pin_ttl_ms 0", lambda: store.put(
        key("sp4"), b"x", config(soft_pin_action=soft.ENABLE, soft_pin_ttl_ms=0))
    yield "put soft_pin_ttl_ms other than the namespace's", lambda: (store.put(
        key("sp5"), b"x", config(soft_pin_action=soft.ENABLE, soft_pin_ttl_ms=1000)),
        store.remove(key("sp5"), True))  # so both sides hold the same objects after it
    yield "put hard-pinned", lambda: store.put(key("hp"), b"x", config(with_hard_pin=True))
    yield "put bigger than the segment", lambda: store.put(key("big"), bytes(20 << 20))
    yield "put bigger than the local buffer", lambda: store.put(key("big2"), bytes(70 << 20))
    yield from probe_steps(store, module, key, config, have)
    yield from replica_steps(store, key)
    yield from session_steps(store, key, address)
    yield from tensor_steps(store, key)
    # how many objects each pass takes depends on which read leases ran out meanwhile:
    # compare the sum (every object left) and an empty store after it
    yield "remove_all, then with force", lambda: store.remove_all() + store.remove_all(True)
    yield "remove_all of an empty store", store.remove_all
    yield "health_check", store.health_check

    for form in ("2MB", "2 mb", "2m", "1.5MB", "2MiB", "2048KB", "2097152", "2097152B",
                 " 2MB ", "abc", "-1", "0x200000", "1e6", "inf", "nan", "infinite", "",
                 "512", "1024", "0", "2 GB x", "2TB", "MB", ".5MB", "+2MB"):
        yield f"setup local_buffer_size={form!r}", lambda form=form: new_store(
            {"local_buffer_size": form})
    yield "setup local_buffer_size=2.5 (a float)", lambda: new_store({"local_buffer_size": 2.5})
    for form in ("16MB", "8MB", "0", "32MB", "1KB"):
        yield f"setup global_segment_size={form!r}", lambda form=form: new_store(
            {"global_segment_size": form})
    yield "setup without local_hostname", lambda: new_store({"local_hostname": None})
    yield "setup without metadata_server", lambda: new_store({"metadata_server": None})
    yield "setup with an unknown key", lambda: new_store({"bogus": "1"})
    yield "setup with an unknown protocol", lambda: new_store({"protocol": "bogus"})


def probe_steps(store: Any, module: Any, key: Callable[[str], str],
                config: Callable[..., Any], have: dict[str, bool]) -> Iterator[Step]:
    """0.3.14's lease-free probes and options, ReplicateConfig's fields and types: a
    probe leaves the object removable (0), a read lease makes remove answer -706."""
    def put(*names: str) -> None:
        for name in names:
            store.put(key(name), b"p")

    for name, value in (("soft_pin_ttl_ms", 1 << 64), ("soft_pin_ttl_ms", (1 << 64) - 1),
                        ("soft_pin_ttl_ms", -1), ("soft_pin_ttl_ms", 1.5),
                        ("soft_pin_ttl_ms", True), ("replica_num", 1 << 64),
                        ("with_hard_pin", 1), ("group_ids", None)):
        yield f"ReplicateConfig {name} = {value!r}", lambda name=name, value=value: getattr(
            config(**{name: value}), name)
    yield "get_hostname's port in 12300-14300", lambda: 12300 <= int(
        store.get_hostname().rsplit(":", 1)[1]) <= 14300
    if not have["probes"]:
        return

    yield "probe_key, then remove (no lease)", lambda: (
        put("pr"), store.probe_key(key("pr")), store.remove(key("pr")))
    yield "probe_key of a missing key", lambda: store.probe_key(key("nope"))
    yield "probe_key of an empty key", lambda: store.probe_key("")
    yield "is_exist, then remove (a lease)", lambda: (
        put("ie"), store.is_exist(key("ie")), store.remove(key("ie")))
    yield "batch_probe_key none, then removes", lambda: (
        put("n1", "n2"), store.batch_probe_key([key("n1"), key("nope"), key("n2")]),
        [store.remove(key(name)) for name in ("n1", "n2")])
    yield "batch_probe_key LastHitOnly 2, then removes", lambda: (
        put("l1", "l2", "l3", "l4"),
        store.batch_probe_key([key("l1"), key("nope"), key("l2"), key("l3"), key("l4"),
                               key("nope")], "LastHitOnly", 2),
        [store.remove(key(name)) for name in ("l1", "l2", "l3", "l4")])
    yield "batch_probe_key LastHitOnly 1, then removes", lambda: (
        put("o1", "o2"), store.batch_probe_key([key("o1"), key("o2"), key("nope")],
                                               "LastHitOnly", 1),
        [store.remove(key(name)) for name in ("o1", "o2")])
    yield "batch_probe_key LastHitOnly, not a multiple", lambda: store.batch_probe_key(
        [key("nope"), key("nope2")], "LastHitOnly", 3)
    yield "batch_probe_key LastHitOnly, candidate_size 0", lambda: store.batch_probe_key(
        [key("nope")], "LastHitOnly", 0)
    yield "batch_probe_key none, candidate_size 0", lambda: store.batch_probe_key(
        [key("nope")], "none", 0)
    yield "batch_probe_key of no keys", lambda: store.batch_probe_key([], "LastHitOnly", 2)
    yield "batch_probe_key of an unknown policy", lambda: store.batch_probe_key(
        [key("nope")], "lasthitonly")
    yield "batch_probe_key candidate_size -1", lambda: store.batch_probe_key(
        [key("nope")], "none", -1)

    if have["exist_options"]:
        def options() -> Any:
            made = module.ExistOptions()
            made.prefetch_to_memory = True
            return made

        yield "ExistOptions", lambda: (str(module.ExistOptions()),
                                       options().prefetch_to_memory)
        yield "is_exist with ExistOptions", lambda: (
            put("eo"), store.is_exist(key("eo"), options()),
            store.batch_is_exist([key("eo"), key("nope")], options()))
    if not have["config_fields"]:
        return
    for name, value in (("session_ids", ["s"]), ("session_ids", "s"),
                        ("residency_affinity_ids", ["r"]), ("residency_affinity_ids", [1]),
                        ("preferred_hca_names", ["mlx5_0"]),
                        ("per_key_preferred_hca_names", [["mlx5_0"], []]),
                        ("per_key_preferred_hca_names", ["mlx5_0"])):
        yield f"ReplicateConfig {name} = {value!r}", lambda name=name, value=value: getattr(
            config(**{name: value}), name)
    yield "ReplicateConfig new fields' defaults", lambda: [getattr(config(), name) for name in (
        "session_ids", "residency_affinity_ids", "preferred_hca_names",
        "per_key_preferred_hca_names")]
    yield "put with the new fields set", lambda: store.put(key("nf"), b"x", config(
        session_ids=["s"], residency_affinity_ids=["r"], preferred_hca_names=["h"],
        per_key_preferred_hca_names=[["h"]]))


def replica_steps(store: Any, key: Callable[[str], str]) -> Iterator[Step]:
    """Replica descriptors, replica clear, copy and move tasks, the segment calls."""
    def described(name: str) -> Any:
        return [(d.is_memory_replica(), d.is_disk_replica(), str(d.status),
                 d.get_memory_descriptor().buffer_descriptor.transport_endpoint ==
                 store.get_hostname(), d.get_memory_descriptor().buffer_descriptor.size)
                for d in store.get_replica_desc(key(name))]

    yield "get_replica_desc", lambda: (store.put(key("rd"), b"hello"), described("rd"))
    yield "get_replica_desc of a missing key", lambda: store.get_replica_desc(key("nope"))
    yield "batch_get_replica_desc", lambda: sorted(name.rsplit("-", 1)[0] for name in
                                                   store.batch_get_replica_desc(
                                                       [key("rd"), key("nope")]))
    yield "batch_get_replica_desc of no keys", lambda: store.batch_get_replica_desc([])
    yield "get_disk_descriptor of a memory replica", lambda: store.get_replica_desc(
        key("rd"))[0].get_disk_descriptor()
    yield "batch_replica_clear of a leased key", lambda: store.batch_replica_clear(
        [key("rd"), key("nope")])
    yield "batch_replica_clear of no keys", lambda: store.batch_replica_clear([])
    yield "create_copy_task of a missing key", lambda: store.create_copy_task(
        key("nope"), [store.get_hostname()])
    yield "create_copy_task to an unknown segment", lambda: store.create_copy_task(
        key("rd"), ["nosuch:1"])
    yield "create_copy_task to no segment", lambda: store.create_copy_task(key("rd"), [])
    yield "create_copy_task to its own segment (code)", lambda: store.create_copy_task(
        key("rd"), [store.get_hostname()])[1]
    yield "create_move_task to the same segment", lambda: store.create_move_task(
        key("rd"), store.get_hostname(), store.get_hostname())
    yield "create_move_task of a missing key", lambda: store.create_move_task(
        key("nope"), store.get_hostname(), "nosuch:1")
    yield "query_task of an unknown task", lambda: store.query_task((1, 2))
    yield "query_task of a bad id", lambda: store.query_task(5)
    yield "mount_segment of a missing path", lambda: store.mount_segment(
        "/nonexistent/segment", 16 << 20)
    yield "allocate_and_mount_segment 1 KB", lambda: (lambda r: (
        r["ret"], len(r["segment_ids"]), r.get("allocated_size"),
        store.unmount_and_free_segment(r["segment_ids"]),
        store.unmount_and_free_segment(r["segment_ids"])))(
        store.allocate_and_mount_segment(1024))
    yield "unmount_segment of an unknown id", lambda: store.unmount_segment(["nosuch"])
    yield "unmount_segment of no ids", lambda: store.unmount_segment([])
    yield "unmount_local_disk_segment", lambda: store.unmount_local_disk_segment(5)
    yield "alloc_from_mem_pool (not a dummy client)", lambda: store.alloc_from_mem_pool(1024)


def session_steps(store: Any, key: Callable[[str], str], address: int) -> Iterator[Step]:
    """Put and get sessions, ranged transfers, put_from_with_metadata (register_buffer
    of `address` was undone earlier: this memory is unregistered now)."""
    yield "batch_put_session_start", lambda: store.batch_put_session_start(
        [key("s1"), key("s0")], [10, 0])
    yield "batch_put_session_end", lambda: (store.batch_put_session_end(
        [key("s1"), key("s0"), key("nope")]), store.get(key("s1")))
    yield "batch_get_session_start", lambda: store.batch_get_session_start(
        [key("s1"), key("nope")])
    yield "batch_get_session_end", lambda: store.batch_get_session_end([key("s1")])
    yield "batch_put_from_multi_buffer_ranges without a session", lambda: \
        store.batch_put_from_multi_buffer_ranges([key("sr1")], [[address]], [[2]], [[0]])
    yield "ranged put in a session", lambda: (
        store.batch_put_session_start([key("sr1"), key("sr2")], [8, 4]),
        store.batch_put_from_multi_buffer_ranges(
            [key("sr1"), key("sr2")], [[address, address + 4], [address]], [[2, 2], [4]],
            [[0, 6], [0]]),
        store.batch_put_session_end([key("sr1"), key("sr2")]),
        store.get(key("sr1")), store.get(key("sr2")))
    yield "ranged get without a session", lambda: \
        store.batch_get_into_multi_buffer_ranges([key("sr1")], [[address + 100]], [[4]], [[2]])
    yield "ranged get in a session", lambda: (
        store.batch_get_session_start([key("sr1")]),
        store.batch_get_into_multi_buffer_ranges([key("sr1")],
                                                 [[address + 100, address + 200]],
                                                 [[2, 3]], [[0, 5]]),
        ctypes.string_at(address + 100, 2), ctypes.string_at(address + 200, 3),
        store.batch_get_session_end([key("sr1")]))
    yield "batch_put_session_revoke", lambda: (
        store.batch_put_session_start([key("rv")], [5]),
        store.batch_put_session_revoke([key("rv"), key("nope")]), store.is_exist(key("rv")))
    yield "put_from_with_metadata", lambda: (store.put_from_with_metadata(
        key("pm"), address, address + 8, 4, 3), store.get(key("pm")))


def tensor_steps(store: Any, key: Callable[[str], str]) -> Iterator[Step]:
    """The tensor methods (skipped when torch is not installed on a side)."""
    try:
        import torch
    except ImportError:
        return
    tensor = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    yield "put_tensor, get_tensor", lambda: (store.put_tensor(key("t"), tensor),
                                             store.get_tensor(key("t")).tolist())
    yield "put_tensor of a non-tensor", lambda: store.put_tensor(key("t2"), [1, 2])
    yield "get_tensor of a missing key", lambda: store.get_tensor(key("nope"))
    yield "get_tensor of a non-tensor object", lambda: (store.put(key("nt"), b"x" * 400),
                                                        store.get_tensor(key("nt")))
    yield "batch_put_tensor, batch_get_tensor", lambda: (
        store.batch_put_tensor([key("b1"), key("b2")], [tensor + 1, tensor.to(torch.bfloat16)]),
        [str(t.dtype) for t in store.batch_get_tensor([key("b1"), key("b2")])])
    yield "put_tensor_with_tp, get_tensor_with_tp", lambda: (
        store.put_tensor_with_tp(key("tp"), tensor, tp_size=2, split_dim=1),
        store.get_tensor_with_tp(key("tp"), 1, 2).tolist(),
        store.get_tensor(key("tp") + "_tp_0").tolist())
    yield "put_tensor_with_tp, uneven", lambda: store.put_tensor_with_tp(
        key("tp3"), tensor, tp_size=3, split_dim=1)
    yield "get_tensor_into", lambda: (lambda memory: (
        store.get_tensor_into(key("t"), ctypes.addressof(memory), 4096).tolist(),
        store.put_tensor_from(key("tf"), ctypes.addressof(memory), 304 + 48),
        store.get_tensor(key("tf")).tolist(),
        store.put_tensor_from(key("tf2"), ctypes.addressof(memory), 100)))(
        (ctypes.c_char * 4096)())
    yield "upsert_tensor", lambda: (store.upsert_tensor(key("t"), tensor * 2),
                                    store.get_tensor(key("t")).sum().item())
    yield "zero-element tensor", lambda: (store.put_tensor(key("z"), torch.zeros(0, 3)),
                                          tuple(store.get_tensor(key("z")).shape))


def run(store: Any, module: Any, new_store: Callable[[dict[str, Any]], Any],
        have: dict[str, bool]) -> dict[str, str]:
    results = {}
    for label, call in steps(store, module, new_store, have):
        try:
            value = call()
        except Exception as error:  # what each side raises is part of the comparison
            value = f"raises {type(error).__name__}"
        results[label] = repr(value)
    return results


def mooncake_side() -> dict[str, Any]:
    from mooncake import store as module  # type: ignore[import-not-found]

    from benchmarks.mooncake_peer import running_peer

    with running_peer(global_segment_size=16 << 20, local_buffer_size=64 << 20,
                      lease_ttl_ms=LEASE_TTL_MS) as peer:
        def new_store(extra: dict[str, Any]) -> Any:
            config = {"local_hostname": "127.0.0.1", "metadata_server": peer.metadata_server,
                      "master_server_addr": peer.master_address, "protocol": "tcp", **extra}
            other = module.MooncakeDistributedStore()
            code = other.setup({k: v for k, v in config.items() if v is not None})
            other.close()
            return code

        return {"features": features(module),
                "results": run(peer.store, module, new_store, features(module))}


def dropin_side(url: str, have: dict[str, bool]) -> dict[str, str]:
    import mooncake_redis.mooncake as module

    namespace = f"check-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as data_dir:
        base = {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                "master_server_addr": url, "namespace": namespace, "data_dir": data_dir}

        def new_store(extra: dict[str, Any]) -> Any:
            other = module.MooncakeDistributedStore()
            code = other.setup({k: v for k, v in {**base, **extra}.items() if v is not None})
            other.close()
            return code

        store = module.MooncakeDistributedStore()
        code = store.setup({**base, "global_segment_size": 16 << 20,
                            "local_buffer_size": 64 << 20})
        if code:
            raise SystemExit(f"the drop-in's setup returned {code}")
        try:
            return run(store, module, new_store, have)
        finally:
            store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="memory://check-mooncake-dropin",
                        help="the drop-in's Redis (default: in process)")
    parser.add_argument("--side", choices=["mooncake"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side == "mooncake":
        print(json.dumps(mooncake_side()))
        return 0

    from benchmarks import mooncake_peer

    reason = mooncake_peer.available()
    if reason:
        print(f"cannot run the real Mooncake client: {reason}", file=sys.stderr)
        return 2
    python = mooncake_peer.peer_python()
    assert python is not None
    done = subprocess.run([python, __file__, "--side", "mooncake"], capture_output=True,
                          text=True, env={**mooncake_peer.CLIENT_ENV, **os.environ,
                                          "MC_LOG_LEVEL": "ERROR"}, timeout=900)
    if done.returncode:
        print(done.stderr[-3000:], file=sys.stderr)
        return 1
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    theirs = answer["results"]
    ours = dropin_side(args.url, answer["features"])
    differ = 0
    for label, mooncake_result in theirs.items():
        dropin_result = ours.get(label, "(not run)")
        if dropin_result == mooncake_result:
            verdict = "same"
        elif label in KNOWN:
            verdict = f"KNOWN: {KNOWN[label]}"
        else:
            verdict = "DIFFERENT"
            differ += 1
        print(f"{label:50.50s} mooncake {mooncake_result:28.28s} drop-in "
              f"{dropin_result:28.28s} {verdict}")
    print(f"{len(theirs)} calls: {differ} differ beyond the known differences")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
