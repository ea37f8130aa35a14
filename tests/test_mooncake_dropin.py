"""The Mooncake drop-in (mooncake_redis.mooncake) held to Mooncake's documented Python API
(docs/source/api-reference/python/mooncake-store.md of kvcache-ai/Mooncake; the codes of
mooncake-store/include/types.h), written from that documentation: every method and its
return codes, on a real redis-server and in process (memory://), with the state checked
in Redis (objects, replicas, segments, the tree) and on disk (the segment files), two
stores and two processes sharing a namespace, eviction and unmount freeing the bytes.

scripts/check_mooncake_dropin.py runs the same kind of calls on the real Mooncake client
side by side; these tests need no Mooncake."""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import logging
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import clock
import numpy as np
import pytest
from clock import joined, read_line
from redis_server import RedisServer

from mooncake_redis import Index
from mooncake_redis.mooncake import (
    BufferHandle,
    MooncakeDistributedStore,
    ReplicateConfig,
    SoftPinAction,
)
from mooncake_redis.mooncake.setup_options import parse_size
from mooncake_redis.mooncake.store import MAX_ENCODED_KEY, MOONCAKE_DEFAULTS
from mooncake_redis.tree.matching import scan_node_keys
from mooncake_redis.values import decode_object, split_node

NAMESPACE = "dropin"
SEGMENT = 64 << 20
_memory = itertools.count()

INVALID_PARAMS, NO_AVAILABLE_HANDLE, OBJECT_NOT_FOUND, OBJECT_HAS_LEASE = -600, -200, -704, -706
RPC_FAIL = -900
A, B, C = "aa" * 32, "bb" * 32, "cc" * 32

Opener = Callable[..., MooncakeDistributedStore]


@pytest.fixture(params=["redis", "fakeredis"], name="url")
def url_fixture(request: pytest.FixtureRequest) -> str:
    if request.param == "fakeredis":
        return f"memory://dropin-{next(_memory)}"
    return str(request.getfixturevalue("redis_url"))


@pytest.fixture(name="data_dir")
def data_dir_fixture(tmp_path: Path) -> Path:
    return tmp_path / "data"


def config_for(url: str, data_dir: Path, **extra: Any) -> dict[str, Any]:
    return {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
            "master_server_addr": url, "namespace": NAMESPACE, "data_dir": str(data_dir),
            "global_segment_size": SEGMENT, **extra}


@pytest.fixture(name="open_store")
def open_store_fixture(url: str, data_dir: Path) -> Iterator[Opener]:
    made: list[MooncakeDistributedStore] = []

    def factory(**extra: Any) -> MooncakeDistributedStore:
        store = MooncakeDistributedStore()
        assert store.setup(config_for(url, data_dir, **extra)) == 0
        made.append(store)
        return store

    yield factory
    for store in made:
        assert store.close() == 0


@pytest.fixture(name="store")
def store_fixture(open_store: Opener) -> MooncakeDistributedStore:
    return open_store()


@pytest.fixture(name="index")
def index_fixture(url: str, store: MooncakeDistributedStore) -> Index:
    """The namespace as any other client sees it (after the store created it)."""
    return Index.from_url(url, NAMESPACE)


def disk(data_dir: Path) -> dict[str, int]:
    """Every finished segment file under the data root: name -> bytes (a file the keeper
    deletes while this looks is not counted)."""
    found = {}
    for path in data_dir.glob("segment-*/*.bin"):
        with contextlib.suppress(FileNotFoundError):
            found[path.name] = path.stat().st_size
    return found


def stored_replicas(index: Index) -> dict[str, tuple[str, int]]:
    """file name -> (segment, size) of every replica, read from the node hashes."""
    found = {}
    for page in scan_node_keys(index.ctx):
        for node_key in page:
            for value in split_node(index.client.hgetall(node_key)).objects.values():
                stored = decode_object(value)
                assert stored is not None
                for replica in stored.replicas:
                    found[replica.location] = (replica.segment, stored.size)
    return found


def wait_until(condition: Callable[[], bool], what: str, deadline_s: float = 60.0) -> None:
    """The state itself (the keeper thread applies events every second); the deadline,
    longer than clock.wait_until's, only guards against a hang."""
    clock.wait_until(condition, what, deadline_s)


def disk_matches_store(index: Index, data_dir: Path) -> bool:
    files = disk(data_dir)
    return files == {name: size for name, (_, size) in stored_replicas(index).items()}


def memory(size: int) -> tuple[Any, int]:
    buffer = (ctypes.c_ubyte * size)()
    return buffer, ctypes.addressof(buffer)


# -- setup and close ---------------------------------------------------------------------


def test_setup_mounts_a_segment_named_like_a_mooncake_client_and_close_unmounts_it(
        url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONCAKE_REDIS_DATA_DIR", str(data_dir))
    monkeypatch.setenv("MOONCAKE_REDIS_NAMESPACE", NAMESPACE)
    store = MooncakeDistributedStore()
    assert store.get_hostname() == "" and store.health_check() == 1
    assert store.setup("127.0.0.1", "P2PHANDSHAKE", SEGMENT, 16 << 20, "tcp", "", url) == 0
    hostname = store.get_hostname()
    host, port = hostname.rsplit(":", 1)
    assert host == "127.0.0.1" and port.isdigit()
    assert store.health_check() == 0
    index = Index.from_url(url, NAMESPACE)
    segment = index.usage().segments[hostname]
    assert segment.mounted and segment.capacity_bytes == SEGMENT
    assert store.put("k", b"v") == 0
    assert [r.segment for r in index.object_info("k").replicas] == [hostname]
    assert len(disk(data_dir)) == 1
    assert store.close() == 0 and store.close() == 0
    assert hostname not in index.usage().segments
    assert index.object_info("k") is None  # its only replica was on the unmounted segment
    assert list(data_dir.iterdir()) == []  # its directory went with its files
    assert store.health_check() == 1 and store.put("k", b"v") == INVALID_PARAMS
    other = MooncakeDistributedStore()
    assert other.setup(config_for(url, data_dir, local_hostname="10.0.0.7:17777")) == 0
    assert other.get_hostname() == "10.0.0.7:17777"  # a port given: used as it is
    assert other.close() == 0


def test_setup_twice_starts_over_and_a_second_store_gets_its_own_segment(
        open_store: Opener, url: str, data_dir: Path) -> None:
    first, second = open_store(), open_store()
    assert first.get_hostname() != second.get_hostname()
    old = first.get_hostname()
    assert first.setup(config_for(url, data_dir)) == 0
    segments = Index.from_url(url, NAMESPACE).usage().segments
    assert {first.get_hostname(), second.get_hostname()} <= set(segments)
    assert old not in segments or old == first.get_hostname()


@pytest.mark.parametrize(("form", "size"), [
    ("4GB", 4 << 30), ("4 gb", 4 << 30), ("4g", 4 << 30), ("1.5MB", 3 << 19),
    ("2048KB", 2 << 20), ("2048K", 2 << 20), ("1048576", 1 << 20), ("1048576B", 1 << 20),
    (" 2MB ", 2 << 20), ("0x100000", 1 << 20), ("1e6", 1_000_000), (".5MB", 1 << 19),
    ("+2MB", 2 << 20), ("1TB", 1 << 40),
    ("2MiB", None), ("abc", None), ("-1", None), ("inf", None), ("nan", None), ("", None),
    ("MB", None), ("2 GB x", None), ("2PB", None)])
def test_sizes_parse_as_mooncake_parses_them(form: str, size: int | None) -> None:
    assert parse_size(form) == size


@pytest.mark.parametrize(("change", "code"), [
    ({"global_segment_size": "8MB"}, INVALID_PARAMS),  # Mooncake's allocator: >= 16 MiB
    ({"global_segment_size": "16MB"}, 0),
    ({"global_segment_size": "4GiB"}, INVALID_PARAMS),
    ({"local_buffer_size": "512"}, INVALID_PARAMS),  # 0, or 1 KiB .. 1 TiB
    ({"local_buffer_size": "2TB"}, INVALID_PARAMS),
    ({"local_buffer_size": 2.5}, INVALID_PARAMS),  # read as the text "2.5": 2 bytes
    ({"local_hostname": ""}, INVALID_PARAMS),
    ({"metadata_server": None}, INVALID_PARAMS),
    ({"protocol": "carrier-pigeon"}, -1),
    ({"master_server_addr": "http://localhost:8080"}, INVALID_PARAMS),
    ({"namespace": "no spaces"}, INVALID_PARAMS),
    ({"bogus": "ignored"}, 0)])
def test_setup_answers_bad_config_with_mooncakes_code(change: dict[str, Any], code: int,
                                                      tmp_path: Path) -> None:
    config = config_for(f"memory://setup-{next(_memory)}", tmp_path, **change)
    store = MooncakeDistributedStore()
    assert store.setup({k: v for k, v in config.items() if v is not None}) == code
    assert store.close() == 0


def test_a_mooncake_master_address_needs_the_redis_url_from_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
        ) -> None:
    monkeypatch.delenv("MOONCAKE_REDIS_URL", raising=False)
    config = config_for("localhost:50051", tmp_path)
    store = MooncakeDistributedStore()
    with caplog.at_level(logging.ERROR):
        assert store.setup(config) == INVALID_PARAMS
    assert "MOONCAKE_REDIS_URL" in caplog.text and "localhost:50051" in caplog.text
    url = f"memory://env-{next(_memory)}"
    monkeypatch.setenv("MOONCAKE_REDIS_URL", url)
    assert store.setup(config) == 0
    assert store.get_hostname() in Index.from_url(url, NAMESPACE).usage().segments
    assert store.close() == 0


def test_the_namespace_and_tenant_come_from_the_config_or_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"memory://names-{next(_memory)}"
    monkeypatch.setenv("MOONCAKE_REDIS_NAMESPACE", "from-env")
    config = config_for(url, tmp_path)
    del config["namespace"]
    for extra, namespace in (({}, "from-env"), ({"namespace": "given"}, "given"),
                             ({"tenant_id": "t1"}, "from-env.t1")):
        store = MooncakeDistributedStore()
        assert store.setup({**config, **extra}) == 0
        assert store.put("k", b"v") == 0
        assert Index.from_url(url, namespace).object_info("k") is not None
        assert store.close() == 0


def test_a_new_namespace_starts_with_mooncakes_defaults_and_a_stored_one_keeps_its_own(
        url: str, open_store: Opener) -> None:
    Index.from_url(url, "kept", lease_ttl_ms=500, probe_extends_lease=False)
    open_store(namespace="kept")
    kept = Index.from_url(url, "kept").settings
    assert (kept.lease_ttl_ms, kept.probe_extends_lease) == (500, False)
    open_store()
    created = Index.from_url(url, NAMESPACE).settings
    for name, value in MOONCAKE_DEFAULTS.items():
        assert getattr(created, name) == value
    assert created.lease_ttl_ms == 10_000  # mooncake_master 0.3.13's default_kv_lease_ttl


# -- put / get / exist / remove ------------------------------------------------------------


def test_put_get_and_the_bytes_on_disk(store: MooncakeDistributedStore, index: Index,
                                       data_dir: Path) -> None:
    value = bytes(range(256)) * 100
    assert store.put("k1", value) == 0
    assert store.get("k1") == value
    (replica,) = index.object_info("k1").replicas
    assert replica.segment == store.get_hostname() and replica.size == len(value)
    assert disk(data_dir) == {replica.location: len(value)}
    assert store.put("k1", b"other") == 0  # Mooncake's put: a stored key stays as it is
    assert store.get("k1") == value and len(disk(data_dir)) == 1  # no second file left
    assert store.put("k2", bytearray(b"ab")) == 0 and store.put("k3", memoryview(b"cd")) == 0
    assert store.put("k4", np.arange(4, dtype=np.int32)) == 0
    assert store.get("k4") == np.arange(4, dtype=np.int32).tobytes()
    assert store.get_batch(["k2", "nope", "k3", "k2"]) == [b"ab", b"", b"cd", b"ab"]
    assert store.get("nope") == b""
    assert store.get_size("k1") == len(value) and store.get_size("nope") == OBJECT_NOT_FOUND
    assert store.is_exist("k1") == 1 and store.is_exist("nope") == 0 and store.is_exist("") == 0
    assert store.batch_is_exist(["k1", "nope", "k2", ""]) == [1, 0, 1, 0]
    assert disk_matches_store(index, data_dir)


def test_the_longest_key_a_file_name_holds_is_stored(store: MooncakeDistributedStore,
                                                     index: Index, data_dir: Path) -> None:
    longest = ["k" * MAX_ENCODED_KEY, "%" * (MAX_ENCODED_KEY // 3)]  # "%" encodes as "%25"
    for key in longest:
        assert store.put(key, b"long") == 0 and store.upsert(key, b"longer") == 0
    assert store.get_batch(longest) == [b"longer", b"longer"]
    wait_until(lambda: len(disk(data_dir)) == 2, "the upserts' old files to go")
    assert disk_matches_store(index, data_dir)


def test_remove_refuses_a_leased_object_unless_forced(store: MooncakeDistributedStore,
                                                      index: Index, data_dir: Path) -> None:
    for key in ("read", "probed", "untouched", "twice"):
        assert store.put(key, b"x") == 0
    store.get("read")
    store.is_exist("probed")  # Mooncake's master leases on a probe too
    assert store.remove("read") == OBJECT_HAS_LEASE
    assert store.batch_remove(["probed", "untouched", "nope"]) == \
        [OBJECT_HAS_LEASE, 0, OBJECT_NOT_FOUND]
    assert store.remove("read", force=True) == 0 and index.object_info("read") is None
    assert store.batch_remove(["probed", "probed", "twice"], force=True) == \
        [0, OBJECT_NOT_FOUND, 0]
    assert store.remove("nope") == OBJECT_NOT_FOUND and store.batch_remove([]) == []
    assert index.usage().objects == 0
    wait_until(lambda: disk(data_dir) == {}, "the removed objects' files to go")


def test_remove_by_regex_and_remove_all_count_what_went(store: MooncakeDistributedStore,
                                                        index: Index) -> None:
    for key in ("user_session_1", "user_session_2", "other_1", "other_2"):
        assert store.put(key, b"x") == 0
    store.get("other_1")
    assert store.remove_by_regex("^user_session_") == 2
    assert store.remove_by_regex("([") == INVALID_PARAMS
    assert store.remove_all() == 1  # other_1 is leased
    assert store.remove_all(force=True) == 1 and index.usage().objects == 0
    assert store.remove_all() == 0


def test_put_batch_and_upsert_forms(store: MooncakeDistributedStore, index: Index,
                                    data_dir: Path) -> None:
    assert store.put_batch(["b1", "b2", "b2"], [b"1", b"22", b"ignored"]) == 0
    assert store.get_batch(["b1", "b2"]) == [b"1", b"22"]
    assert store.put_batch(["c1"], [b"1", b"2"]) == INVALID_PARAMS
    assert store.put_batch(["c1", "c2"], [b"1", b""]) == INVALID_PARAMS
    assert index.object_info("c1") is None  # a refused batch writes nothing
    assert store.put_parts("parts", b"ab", memoryview(b"cd"), bytearray(b"e")) == 0
    assert store.get("parts") == b"abcde"
    assert store.put_parts("none") == 0 and store.is_exist("none") == 0  # as Mooncake
    assert store.upsert("b1", b"replaced, longer") == 0 and store.get("b1") == b"replaced, longer"
    assert store.upsert_batch(["b2", "new"], [b"x", b"y"]) == 0
    assert store.upsert_parts("parts", b"z") == 0
    assert store.get_batch(["b2", "new", "parts"]) == [b"x", b"y", b"z"]
    assert store.upsert("empty", b"") == INVALID_PARAMS
    # the replaced copies' files go once their read leases end (10 s on this namespace)
    index.set_config(lease_ttl_ms=1)
    wait_until(lambda: disk_matches_store(index, data_dir), "the old copies' files to go",
               deadline_s=120)


def test_a_refused_put_leaves_no_file_and_no_object(open_store: Opener, data_dir: Path,
                                                    url: str) -> None:
    store = open_store(local_buffer_size="1MB")
    index = Index.from_url(url, NAMESPACE)
    zero = ReplicateConfig()
    zero.replica_num = 0
    ttl = ReplicateConfig()
    ttl.soft_pin_ttl_ms = 1000  # only with soft_pin_action ENABLE
    parent = ReplicateConfig()
    parent.parent_block_hash = "not a hash"
    assert store.put("", b"x") == INVALID_PARAMS
    assert store.put("k", b"") == INVALID_PARAMS
    assert store.put("k", b"x", zero) == INVALID_PARAMS
    assert store.put("k", b"x", ttl) == INVALID_PARAMS
    assert store.put(f"{A}__k", b"x", parent) == INVALID_PARAMS
    assert store.put("k", bytes(2 << 20)) == INVALID_PARAMS  # over local_buffer_size
    assert store.put("k" * 300, b"x") == INVALID_PARAMS  # a file name too long to make
    assert store.put("k" * (MAX_ENCODED_KEY + 1), b"x") == INVALID_PARAMS
    assert store.put("%" * (MAX_ENCODED_KEY // 3 + 1), b"x") == INVALID_PARAMS  # "%25" each
    big, address = memory(SEGMENT + 1)
    assert store.register_buffer(address, len(big)) == 0
    assert store.put_from("k", address, len(big)) == NO_AVAILABLE_HANDLE  # no segment that big
    assert index.usage().objects == 0 and disk(data_dir) == {}
    assert not list(data_dir.glob("segment-*/.*.tmp"))


def test_bad_argument_types_raise_type_error_as_mooncakes_binding_does(
        store: MooncakeDistributedStore) -> None:
    for call in (lambda: store.put(5, b"x"), lambda: store.put("k", "text"),
                 lambda: store.put("k", None), lambda: store.get(None),
                 lambda: store.get_batch("k"), lambda: store.get_into("k", -1, 10),
                 lambda: store.put("k", b"x", "config"), lambda: store.remove("k", "yes"),
                 lambda: store.setup(1, 2), lambda: store.register_buffer(1.5, 10),
                 lambda: setattr(ReplicateConfig(), "replica_num", -1),
                 lambda: setattr(ReplicateConfig(), "no_such_field", 1)):
        with pytest.raises((TypeError, AttributeError)):
            call()


def test_a_value_bigger_than_the_local_buffer_is_staged_nowhere(open_store: Opener) -> None:
    """Mooncake copies put/get values through its local buffer: bigger ones fail there,
    the zero-copy calls do not."""
    store = open_store(local_buffer_size="64KB")
    big, address = memory(128 << 10)
    assert store.register_buffer(address, len(big)) == 0
    assert store.put_from("big", address, len(big)) == 0
    assert store.get("big") == b"" and store.get_buffer("big") is None
    assert store.get_into("big", address, len(big)) == len(big)


def test_replica_locations_from_redis_name_only_files_in_the_segment(
        store: MooncakeDistributedStore, index: Index) -> None:
    """Whoever can write the namespace cannot make the drop-in read another file."""
    outside = Path(store._open.files.root).parent / "secret.bin"  # type: ignore[union-attr]
    outside.write_bytes(b"secret")
    for key, location in (("escape", "../secret.bin"), ("absolute", str(outside))):
        index.put_start(key, 6, replicas=[(store.get_hostname(), location, "disk")])
        index.put_end(key)
        assert store.get(key) == b"" and store.get_buffer(key) is None
        buffer, address = memory(64)
        assert store.register_buffer(address, 64) == 0
        assert store.get_into(key, address, 64) == -800  # TRANSFER_FAIL
        assert store.unregister_buffer(address) == 0


def test_redis_going_away_gets_codes_not_tracebacks(tmp_path: Path) -> None:
    server = RedisServer()
    store = MooncakeDistributedStore()
    try:
        assert store.setup(config_for(server.url, tmp_path)) == 0
        assert store.put("k", b"v") == 0
        server.stop()
        assert store.health_check() == 2
        assert store.put("k2", b"v") == RPC_FAIL
        assert store.get("k") == b"" and store.get_buffer("k") is None
        assert store.is_exist("k") == RPC_FAIL and store.get_size("k") == RPC_FAIL
        assert store.remove("k") == RPC_FAIL and store.remove_all() == RPC_FAIL
        assert store.close() == RPC_FAIL  # the unmount could not run; the store is closed
        assert store.health_check() == 1
    finally:
        server.stop()


def test_calls_before_setup_answer_without_crashing() -> None:
    store = MooncakeDistributedStore()
    assert store.put("k", b"x") == INVALID_PARAMS and store.get("k") == b""
    assert store.get_buffer("k") is None and store.is_exist("k") == INVALID_PARAMS
    assert store.remove("k") == INVALID_PARAMS and store.remove_all() == INVALID_PARAMS
    assert store.register_buffer(1, 1) == INVALID_PARAMS and store.close() == 0


# -- zero copy -----------------------------------------------------------------------------


def test_registered_buffers_and_zero_copy_puts_and_gets(store: MooncakeDistributedStore,
                                                        index: Index) -> None:
    buffer, address = memory(4096)
    ctypes.memmove(address, b"0123456789", 10)
    assert store.register_buffer(address, 4096) == 0
    assert store.register_buffer(address, 4096) == INVALID_PARAMS
    assert store.register_buffer(address + 8, 16) == INVALID_PARAMS  # overlaps
    assert store.register_buffer(0, 16) == INVALID_PARAMS
    assert store.put_from("pf", address, 10) == 0 and store.get("pf") == b"0123456789"
    assert store.put_from("zero", address, 0) == 0 and store.is_exist("zero") == 0
    assert store.get_into("pf", address + 100, 64) == 10
    assert bytes(buffer[100:110]) == b"0123456789"
    assert store.get_into("pf", address + 100, 4) == INVALID_PARAMS  # smaller than the value
    assert store.get_into("pf", address + 4090, 64) == INVALID_PARAMS  # past the buffer
    assert store.get_into("nope", address + 100, 64) == OBJECT_NOT_FOUND
    assert store.batch_put_from(["a", "b", "c", "d"], [address, address + 1, address, address],
                                [3, 4, 0, 5000]) == [0, 0, INVALID_PARAMS, INVALID_PARAMS]
    assert store.batch_put_from(["e"], [address, address], [3]) == [INVALID_PARAMS]
    assert store.batch_get_into(["a", "b", "nope"], [address + 200, address + 300, address],
                                [64, 64, 64]) == [3, 4, OBJECT_NOT_FOUND]
    assert bytes(buffer[200:203]) == b"012" and bytes(buffer[300:304]) == b"1234"
    assert store.upsert_from("a", address + 5, 2) == 0 and store.get("a") == b"56"
    assert store.batch_upsert_from(["b"], [address + 7], [3]) == [0]
    assert store.get("b") == b"789"
    # memory never registered is taken, as Mooncake's tcp transport takes it; a range
    # that starts in a registered buffer and runs past its end is refused
    other, elsewhere = memory(64)
    ctypes.memmove(elsewhere, b"elsewhere!", 10)
    assert store.put_from("u", elsewhere, 10) == 0 and store.get("u") == b"elsewhere!"
    assert store.get_into("pf", elsewhere, 64) == 10 and bytes(other[:10]) == b"0123456789"
    assert store.put_from("past", address + 4090, 10) == INVALID_PARAMS
    assert store.put_from("null", 0, 10) == INVALID_PARAMS
    assert store.put_from("unmapped", 4096, 10) == INVALID_PARAMS  # a crash on Mooncake
    assert store.get_into("pf", 4096, 64) == INVALID_PARAMS
    assert store.unregister_buffer(address) == 0
    assert store.unregister_buffer(address) == INVALID_PARAMS
    assert store.get_into("pf", address + 100, 64) == 10  # no registered buffer now
    info = index.object_info("u")
    assert info is not None and info.size == 10
    assert index.object_info("past") is None and index.object_info("null") is None
    assert index.object_info("unmapped") is None


def test_multi_buffer_puts_and_gets_join_and_spread_a_value(store: MooncakeDistributedStore
                                                            ) -> None:
    """SGLang's layer-first host pools: a value is several buffers, in order."""
    buffer, address = memory(4096)
    ctypes.memmove(address, b"0123456789abcdef", 16)
    assert store.register_buffer(address, 4096) == 0
    assert store.batch_put_from_multi_buffers(
        ["m1", "m2", "bad", "empty"], [[address, address + 10], [address + 4], [address, 1],
                                       []], [[4, 3], [2], [1, 1], []]) == [0, 0, -600, -600]
    assert store.get_batch(["m1", "m2"]) == [b"0123abc", b"45"]
    assert store.batch_get_into_multi_buffers(["m1", "m2", "nope"],
                                              [[address + 100, address + 200], [address + 300],
                                               [address + 400]], [[3, 4], [2], [8]]) == \
        [7, 2, OBJECT_NOT_FOUND]
    assert bytes(buffer[100:103]) == b"012" and bytes(buffer[200:204]) == b"3abc"
    assert bytes(buffer[300:302]) == b"45"
    assert store.batch_get_into_multi_buffers(["m1", "m1"], [[address + 100], [address + 100]],
                                              [[8], [6]]) == [-800, -600]  # Mooncake's codes


def test_get_into_ranges_reads_fragments_of_objects(store: MooncakeDistributedStore) -> None:
    buffer0, address0 = memory(32)
    buffer1, address1 = memory(32)
    assert store.register_buffer(address0, 32) == 0 and store.register_buffer(address1, 32) == 0
    assert store.put("key1", bytes(range(40))) == 0
    assert store.put("key2", bytes(range(100, 120))) == 0
    # the documented example: buffer 0 gets two fragments of key1 and one of key2, buffer 1
    # one of each
    results = store.get_into_ranges(
        [address0, address1], [["key1", "key2"], ["key2", "key1"]],
        [[[0, 20], [8]], [[4], [16]]], [[[1, 30], [2]], [[0], [10]]],
        [[[4, 3], [5]], [[6], [4]]])
    assert results == [[[4, 3], [5]], [[6], [4]]]
    assert bytes(buffer0[0:4]) == bytes(range(1, 5))
    assert bytes(buffer0[20:23]) == bytes([30, 31, 32])
    assert bytes(buffer0[8:13]) == bytes(range(102, 107))
    assert bytes(buffer1[4:10]) == bytes(range(100, 106))
    assert bytes(buffer1[16:20]) == bytes(range(10, 14))
    assert store.get_into_ranges([address0], [["key1"]], [[[0]]], [[[38]]], [[[5]]]) == [[[-600]]]
    assert store.get_into_ranges([address0], [["key1"]], [[[30]]], [[[0]]], [[[5]]]) == [[[-600]]]
    assert store.get_into_ranges([address0], [["nope", "key1"]], [[[0], [4]]], [[[0], [0]]],
                                 [[[2], [2]]]) == [[[OBJECT_NOT_FOUND], [2]]]
    assert store.get_into_ranges([address0], [["key1"]], [[[0, 1]]], [[[0]]], [[[2]]]) == \
        [[[-600, -600]]]
    assert store.get_into_ranges([address0, address1], [["key1"]], [[[0]]], [[[0]]],
                                 [[[2]]]) == [[[-600]], [[-600]]]
    assert store.get_into_ranges([], [], [], [], []) == []


def test_get_buffer_returns_a_buffer_handle(store: MooncakeDistributedStore) -> None:
    assert store.put("obj", b"0123456789") == 0
    handle = store.get_buffer("obj")
    assert isinstance(handle, BufferHandle) and handle
    assert handle.size() == len(handle) == 10 and handle.ptr() != 0
    assert bytes(memoryview(handle)) == b"0123456789"
    assert ctypes.string_at(handle.ptr(), 10) == b"0123456789"
    assert np.array(handle, copy=False).tobytes() == b"0123456789"
    assert store.get_buffer("nope") is None
    handles = store.batch_get_buffer(["obj", "nope"])
    assert handles[1] is None and bytes(handles[0]) == b"0123456789"


# -- replicas, pins, the tree ----------------------------------------------------------------


def test_replicas_go_to_distinct_segments_preferred_first(open_store: Opener, url: str
                                                          ) -> None:
    first, second = open_store(), open_store()
    index = Index.from_url(url, NAMESPACE)
    two = ReplicateConfig()
    two.replica_num = 3  # best effort: as many as there are segments
    assert first.put("two", b"x" * 100, two) == 0
    replicas = index.object_info("two").replicas
    assert sorted(r.segment for r in replicas) == sorted([first.get_hostname(),
                                                          second.get_hostname()])
    assert index.usage().segments[second.get_hostname()].used_bytes == 100
    there = ReplicateConfig()
    there.preferred_segment = second.get_hostname()
    assert first.put("there", b"y", there) == 0
    assert [r.segment for r in index.object_info("there").replicas] == [second.get_hostname()]
    nowhere = ReplicateConfig()
    nowhere.preferred_segments = ["no-such-host:1"]
    assert first.put("anywhere", b"z", nowhere) == 0  # falls back, as Mooncake's master
    assert len(index.object_info("anywhere").replicas) == 1
    assert second.get("there") == b"y" and second.get("two") == b"x" * 100
    assert first.close() == 0  # its replicas go; objects with another replica stay
    assert second.get("two") == b"x" * 100 and second.get("there") == b"y"
    assert [r.segment for r in index.object_info("two").replicas] == [second.get_hostname()]


def test_pins_from_the_replicate_config(store: MooncakeDistributedStore, index: Index) -> None:
    soft, hard, legacy, zero = (ReplicateConfig() for _ in range(4))
    soft.soft_pin_action = SoftPinAction.ENABLE
    hard.with_hard_pin = True
    legacy.with_soft_pin = True  # Mooncake 0.3.12's name
    zero.soft_pin_action = SoftPinAction.ENABLE
    zero.soft_pin_ttl_ms = 0  # "a value of zero commits the object as ordinary cache"
    for key, config in (("soft", soft), ("hard", hard), ("legacy", legacy), ("zero", zero)):
        assert store.put(key, b"x", config) == 0
    assert legacy.soft_pin_action == SoftPinAction.ENABLE and legacy.with_soft_pin
    pins = {key: (index.object_info(key).soft_pin, index.object_info(key).hard_pin)
            for key in ("soft", "hard", "legacy", "zero")}
    assert pins == {"soft": (True, False), "hard": (False, True), "legacy": (True, False),
                    "zero": (False, False)}
    assert store.upsert("soft", b"yy") == 0  # PRESERVE keeps the pin over an upsert
    assert index.object_info("soft").soft_pin
    disable = ReplicateConfig()
    disable.soft_pin_action = SoftPinAction.DISABLE
    assert store.upsert("soft", b"zz", disable) == 0 and not index.object_info("soft").soft_pin
    same_ttl = ReplicateConfig()
    same_ttl.soft_pin_action = SoftPinAction.ENABLE
    same_ttl.soft_pin_ttl_ms = index.settings.soft_pin_ttl_ms
    assert store.put("ttl", b"x", same_ttl) == 0
    other_ttl = ReplicateConfig()
    other_ttl.soft_pin_action = SoftPinAction.ENABLE
    other_ttl.soft_pin_ttl_ms = 1000  # differs from the namespace's: refused, said why
    assert store.put("ttl2", b"x", other_ttl) == INVALID_PARAMS
    assert "ReplicateConfig: { replica_num: 1, soft_pin_action: ENABLE" in str(other_ttl)


def test_parent_block_hash_builds_the_radix_tree_and_eviction_goes_leaf_first(
        url: str, data_dir: Path, open_store: Opener) -> None:
    Index.from_url(url, NAMESPACE, lease_ttl_ms=0, probe_extends_lease=False)
    store = open_store(global_segment_size="16MB")
    index = Index.from_url(url, NAMESPACE)
    chains = [[f"{c:02x}{n:02x}" * 16 for n in range(6)] for c in range(3)]
    for chain in chains:
        for number, prefix in enumerate(chain):
            config = ReplicateConfig()
            if number:
                config.parent_block_hash = chain[number - 1]
            assert store.put(f"{prefix}__k", bytes([number]) * (8 << 10), config) == 0
    node = index.get_node(chains[0][1])
    assert node is not None
    assert node.parent == chains[0][0] and node.children == [chains[0][2]]
    assert [index.match_prefix(chain) for chain in chains] == [6, 6, 6]
    # the store's eviction (what a full segment runs) takes leaves first: every chain
    # keeps a leading run (its first page stays longest), the oldest chain's run going
    # first: no later chain is shorter
    index.evict(target_ratio=index.usage().ratio / 2)
    runs = [index.match_prefix(chain) for chain in chains]
    for chain, run in zip(chains, runs):
        assert [store.is_exist(f"{prefix}__k") for prefix in chain] == [1] * run + [0] * (6 - run)
    assert runs == sorted(runs) and runs[-1] >= 1
    assert index.usage().objects <= 9
    wait_until(lambda: disk_matches_store(index, data_dir), "evicted pages' files to go")


def test_a_full_segment_evicts_and_the_bytes_on_disk_follow(url: str, data_dir: Path,
                                                          open_store: Opener) -> None:
    Index.from_url(url, NAMESPACE, lease_ttl_ms=0)
    store = open_store(global_segment_size="16MB")
    index = Index.from_url(url, NAMESPACE)
    page, address = memory(16 << 10)
    assert store.register_buffer(address, len(page)) == 0
    for batch in range(13):  # 1,300 pages of 16 KiB through a 16 MiB segment
        keys = [f"page-{batch}-{n}" for n in range(100)]
        assert store.batch_put_from(keys, [address] * 100, [len(page)] * 100) == [0] * 100
    assert 0 < index.usage().objects < 1300
    assert index.usage().used_bytes <= 16 << 20
    # the keeper may run one more watermark eviction after the puts: wait for the files
    # and the segment's count to agree once it is done, not for the first moment they do

    def settled() -> bool:
        used = index.usage().segments[store.get_hostname()].used_bytes
        return disk_matches_store(index, data_dir) and sum(disk(data_dir).values()) == used

    wait_until(settled, "evicted pages' files to go and the segment's bytes to match")
    assert store.remove_all(force=True) > 0
    wait_until(lambda: disk(data_dir) == {}, "removed pages' files to go")


# -- sharing a namespace -------------------------------------------------------------------


def test_the_keeper_heartbeats_and_mounts_again_after_an_unmount(
        store: MooncakeDistributedStore, index: Index, data_dir: Path) -> None:
    hostname = store.get_hostname()
    first = index.usage().segments[hostname].heartbeat_ms
    wait_until(lambda: index.usage().segments[hostname].heartbeat_ms > first, "a heartbeat")
    assert store.put("k", b"v") == 0
    assert index.unmount_segment(hostname).done  # e.g. the monitor, after missed heartbeats
    assert store.get("k") == b""
    wait_until(lambda: disk(data_dir) == {}, "the invalidated replica's file to go")
    # mounted again by its keeper (registry entry, then a flag in every shard): puts on
    # it work again once the last flag is set
    wait_until(lambda: store.put("k", b"again") == 0, "the segment mounted again")
    assert store.get("k") == b"again" and index.usage().segments[hostname].mounted


def test_threads_share_a_store(store: MooncakeDistributedStore) -> None:
    errors: list[str] = []

    def work(number: int) -> None:
        for item in range(20):
            key = f"t{number}-{item}"
            if store.put(key, key.encode()) != 0 or store.get(key) != key.encode():
                errors.append(key)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        joined(thread, "a thread's puts and gets")
    assert errors == []
    assert store.batch_is_exist([f"t{n}-{i}" for n in range(4) for i in range(20)]) == [1] * 80


CHILD = textwrap.dedent("""
    import sys
    from mooncake_redis.mooncake import MooncakeDistributedStore
    url, namespace, data_dir = sys.argv[1:4]
    store = MooncakeDistributedStore()
    code = store.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                        "master_server_addr": url, "namespace": namespace,
                        "data_dir": data_dir, "global_segment_size": "64MB"})
    assert code == 0, code
    assert store.put("from-child", b"child's bytes") == 0
    print("ready", store.get_hostname(), flush=True)
    assert sys.stdin.readline().strip() == "read"
    print("got", store.get("from-parent").decode(), flush=True)
    assert sys.stdin.readline().strip() == "close"
    print("closed", store.close(), flush=True)
""")


@pytest.mark.parametrize("backend", ["redis", "cluster"])
def test_two_processes_share_one_namespace(backend: str, request: pytest.FixtureRequest,
                                           tmp_path: Path) -> None:
    """memory:// lives in one process, so this runs on redis-server and the cluster."""
    url = str(request.getfixturevalue("redis_url" if backend == "redis" else "cluster_url"))
    data_dir = tmp_path / "data"
    child = subprocess.Popen([sys.executable, "-c", CHILD, url, NAMESPACE, str(data_dir)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
    store = MooncakeDistributedStore()
    try:
        assert child.stdout is not None and child.stdin is not None
        word, child_host = read_line(child.stdout, "the child's store").split()
        assert word == "ready"
        assert store.setup(config_for(url, data_dir)) == 0
        index = Index.from_url(url, NAMESPACE)
        assert set(index.usage().segments) == {child_host, store.get_hostname()}
        assert store.get("from-child") == b"child's bytes"  # from the child's segment
        assert [r.segment for r in index.object_info("from-child").replicas] == [child_host]
        here = ReplicateConfig()
        here.preferred_segment = store.get_hostname()
        assert store.put("from-parent", b"parent's bytes", here) == 0
        child.stdin.write("read\n")
        child.stdin.flush()
        assert read_line(child.stdout, "the child's get").split(None, 1) == [
            "got", "parent's bytes\n"]
        child.stdin.write("close\n")
        child.stdin.flush()
        assert read_line(child.stdout, "the child's close").split() == ["closed", "0"]
        assert child.wait(60) == 0
        assert store.get("from-child") == b"" and store.is_exist("from-child") == 0
        assert child_host not in index.usage().segments
        assert not (data_dir / f"segment-{child_host.replace(':', '%3A')}").exists()
        assert store.get("from-parent") == b"parent's bytes"
    finally:
        if child.poll() is None:
            child.kill()
        store.close()
