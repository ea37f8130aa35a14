"""The primary object store with Mooncake's semantics, on real Redis and fakeredis."""

from __future__ import annotations

import pytest
from helpers import assert_consistent, page, snapshot

from mooncake_redis import (
    Index,
    InvalidArgument,
    InvalidObjectState,
    NoSpace,
    ObjectAlreadyExists,
    ObjectLeased,
    ObjectNotFound,
    ObjectNotReady,
)

A = page("a")
KEY = f"{A}_0_k"


def stored(index: Index, key: str) -> dict[str, str]:
    return index.client.hgetall(index.schema.object_key(key, index.prefix_of(key)))


def test_put_start_creates_a_processing_object_counted_against_capacity(index: Index) -> None:
    index.put_start(KEY, 100)
    fields = stored(index, KEY)
    assert fields["state"] == "processing" and fields["size"] == "100"
    assert index.usage().used_bytes == 100
    assert not index.is_exist(KEY)  # not readable until put_end
    with pytest.raises(ObjectNotReady):
        index.get(KEY)


def test_put_end_completes_and_get_grants_a_lease_from_redis_time(index: Index) -> None:
    index.put_start(KEY, 100)
    index.put_end(KEY)
    assert index.is_exist(KEY)
    redis_now_ms = index.client.time()[0] * 1000
    info = index.get(KEY)
    assert info is not None and info.state == "complete" and info.size == 100
    assert redis_now_ms + 9_000 < info.lease_ms < redis_now_ms + 12_000
    assert int(stored(index, KEY)["lease_ms"]) == info.lease_ms
    shard_objects = index.schema.shard_keys(A[:2]).objects
    assert index.client.zscore(shard_objects, KEY) == info.lease_ms


def test_existence_probes_do_not_extend_leases_by_default(make_index) -> None:
    index = make_index()
    index.put_start(KEY, 1)
    index.put_end(KEY)
    before = stored(index, KEY)["lease_ms"]
    assert index.batch_is_exist([KEY, "missing"]) == [True, False]
    assert stored(index, KEY)["lease_ms"] == before


def test_probes_extend_leases_when_configured(make_index) -> None:
    index = make_index(probe_extends_lease=True)
    index.put_start(KEY, 1)
    assert index.batch_is_exist([KEY]) == [False]
    index.put_end(KEY)
    before = int(stored(index, KEY)["lease_ms"])
    assert index.batch_is_exist([KEY, "missing"]) == [True, False]
    assert int(stored(index, KEY)["lease_ms"]) >= before + 9_000


def test_get_of_an_unknown_key_is_none(index: Index) -> None:
    assert index.get("nothing-here") is None


def test_remove_is_refused_while_leased_unless_forced(index: Index) -> None:
    index.put_start(KEY, 5)
    index.put_end(KEY)
    index.get(KEY)
    before = snapshot(index)
    with pytest.raises(ObjectLeased) as refused:
        index.remove(KEY)
    assert refused.value.key == KEY
    assert snapshot(index) == before
    index.remove(KEY, force=True)
    assert index.object_info(KEY) is None
    assert index.usage().used_bytes == 0
    assert_consistent(index)


def test_remove_after_the_lease_expires(make_index) -> None:
    index = make_index(lease_ttl_ms=0)
    index.put_start(KEY, 5)
    index.put_end(KEY)
    index.get(KEY)
    index.remove(KEY)
    assert not index.is_exist(KEY)


def test_put_revoke_abandons_a_processing_object(index: Index) -> None:
    index.put_start(KEY, 7)
    index.put_revoke(KEY)
    assert index.object_info(KEY) is None and index.usage().used_bytes == 0
    assert index.get_node(A) is None
    assert_consistent(index)


def test_refusals_leave_state_unchanged(make_index) -> None:
    index = make_index(capacity_bytes=100)
    index.put_start(KEY, 60)
    before = snapshot(index)
    refusals = [
        (ObjectAlreadyExists, lambda: index.put_start(KEY, 1)),
        (NoSpace, lambda: index.put_start(f"{A}_1_k", 41)),
        (InvalidObjectState, lambda: index.remove(KEY)),  # processing: use put_revoke
        (ObjectNotFound, lambda: index.put_end("unknown")),
        (ObjectNotFound, lambda: index.put_revoke("unknown")),
        (ObjectNotFound, lambda: index.remove("unknown")),
    ]
    for error, call in refusals:
        with pytest.raises(error):
            call()
        assert snapshot(index) == before, error
    index.put_end(KEY)
    before = snapshot(index)
    for error, call in [
        (InvalidObjectState, lambda: index.put_end(KEY)),
        (InvalidObjectState, lambda: index.put_revoke(KEY)),
        (ObjectAlreadyExists, lambda: index.put_start(KEY, 1)),
    ]:
        with pytest.raises(error):
            call()
        assert snapshot(index) == before, error


@pytest.mark.parametrize(
    "key, size",
    [("", 1), (None, 1), (b"bytes-key", 1), (7, 1), ("k" * 5000, 1), ("\udcff", 1),
     ("k", -1), ("k", 1.5), ("k", True), ("k", "10"), ("k", 1 << 60)],
)
def test_malformed_input_is_refused_before_anything_is_written(index: Index, key, size) -> None:
    before = snapshot(index)
    with pytest.raises(InvalidArgument):
        index.put_start(key, size)
    assert snapshot(index) == before


def test_a_batch_with_one_bad_item_writes_nothing(index: Index) -> None:
    index.put_start(KEY, 1)
    before = snapshot(index)
    with pytest.raises(ObjectAlreadyExists):
        index.batch_put_start([(f"{A}_1_k", 1, None), (KEY, 1, None)])
    with pytest.raises(InvalidArgument):
        index.batch_put_start([(f"{A}_1_k", 1, None), (f"{A}_1_k", 1, None)])
    assert snapshot(index) == before


def test_batch_remove_reports_each_outcome(index: Index) -> None:
    keys = [f"{A}_{i}_k" for i in range(3)]
    index.batch_put_start([(k, 1, None) for k in keys])
    index.put_end(keys[0])
    index.put_end(keys[1])
    index.get(keys[1])
    outcome = index.batch_remove(keys + ["missing"])
    assert outcome == {keys[0]: "deleted", keys[1]: "leased", keys[2]: "processing",
                       "missing": "missing"}
    assert index.get_keys_by_prefix(A) == keys[1:]
    assert_consistent(index)


def test_remove_by_regex_walks_every_shard(index: Index) -> None:
    keys = [f"{page(i)}_0_{kv}" for i in range(40) for kv in "kv"]
    index.batch_put_start([(k, 3, None) for k in keys])
    for key in keys:
        index.put_end(key)
    assert index.remove_by_regex(r"_v$") == 40
    assert sorted(index.batch_is_exist(keys)) == [False] * 40 + [True] * 40
    assert all(index.is_exist(k) == k.endswith("_k") for k in keys)
    assert index.usage().used_bytes == 120
    assert_consistent(index)


def test_remove_by_regex_refuses_a_pattern_that_does_not_compile(index: Index) -> None:
    with pytest.raises(InvalidArgument, match="does not compile"):
        index.remove_by_regex("([unclosed")


def test_remove_all_keeps_leased_and_processing_objects_unless_forced(index: Index) -> None:
    index.batch_put_start([(f"{page(i)}_0_k", 1, None) for i in range(10)])
    for i in range(9):
        index.put_end(f"{page(i)}_0_k")
    index.get(f"{page(0)}_0_k")
    assert index.remove_all() == 8
    assert index.usage().objects == 2
    assert index.remove_all(force=True) == 2
    assert index.usage() .objects == 0 and index.usage().nodes == 0
    assert_consistent(index)


def test_pins_are_stored_per_object(index: Index) -> None:
    index.put_start(KEY, 1, soft_pin=True)
    index.put_start(f"{A}_1_k", 1, hard_pin=True)
    index.put_end(KEY)
    index.put_end(f"{A}_1_k")
    soft, hard = index.object_info(KEY), index.object_info(f"{A}_1_k")
    assert soft is not None and soft.soft_pin and not soft.hard_pin
    assert hard is not None and hard.hard_pin and not hard.soft_pin
    objects = index.schema.shard_keys(A[:2]).objects
    assert index.client.zscore(objects, f"{A}_1_k") == float("inf")
