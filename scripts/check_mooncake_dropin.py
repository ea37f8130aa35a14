"""Run the same calls on the real Mooncake client and on the drop-in, and compare what they
return: every method and return code of docs/INTEGRATIONS.md's table, the setup forms
and size strings, bad input.

    ./scripts/install_mooncake_peer.sh            # the real client + mooncake_master
    .venv/bin/python scripts/check_mooncake_dropin.py [--url redis://...]

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
    "put_from unregistered memory": "the drop-in refuses memory that is not registered "
                                    "(Mooncake's tcp transport takes it, RDMA does not)",
    "get_into unregistered memory": "same",
    "get_buffer format": "the drop-in's BufferHandle is a bytearray: format 'B', not 'b'",
    "get_batch of no keys": "Mooncake answers [b''] for no keys; the drop-in []",
    "setup local_buffer_size='inf'": "Mooncake converts inf to an integer in a way C++ "
                                     "leaves undefined; the drop-in refuses it",
    "put soft_pin_ttl_ms other than the namespace's": "a soft-pin TTL is per namespace here",
    "get_batch of a key twice": "Mooncake 0.3.13.post1 answers the first of two equal keys "
                                "with stale bytes (a bug); the drop-in gives the value twice",
}

Step = tuple[str, Callable[[], Any]]


def steps(store: Any, module: Any, new_store: Callable[[dict[str, Any]], Any]) -> Iterator[Step]:
    """The calls, in order, on a set-up store; `module` gives ReplicateConfig and
    SoftPinAction; new_store(config) sets up another store with setup(config) and
    returns what setup returned."""
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
    yield "put_batch of a key twice", lambda: store.put_batch([key("d1")] * 2, [b"1", b"2"])
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
    yield "batch_put_from", lambda: store.batch_put_from(
        [key("bp1"), key("bp2"), key("pf")], [address, address + 1, address], [3, 4, 10])
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


def run(store: Any, module: Any, new_store: Callable[[dict[str, Any]], Any]
        ) -> dict[str, str]:
    results = {}
    for label, call in steps(store, module, new_store):
        try:
            value = call()
        except Exception as error:  # what each side raises is part of the comparison
            value = f"raises {type(error).__name__}"
        results[label] = repr(value)
    return results


def mooncake_side() -> dict[str, str]:
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

        return run(peer.store, module, new_store)


def dropin_side(url: str) -> dict[str, str]:
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
            return run(store, module, new_store)
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
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    ours = dropin_side(args.url)
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
