"""The object store with Mooncake's semantics, on real Redis, the cluster and fakeredis."""

from __future__ import annotations

import pytest
from clock import redis_now_ms
from helpers import assert_consistent, node_fields, page, snapshot

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
from mooncake_redis.prefix import NEW_SHARD_COUNT
from mooncake_redis.values import decode_object

A = page("a")
KEY = f"{A}_0_k"
GIB = 1 << 30


def stored(index: Index, key: str = KEY) -> str | None:
    """The packed value of an object in its node hash."""
    prefix_hash, suffix = index.ctx.split(key)
    return index.client.hget(index.ctx.schema.node(prefix_hash), "o:" + suffix)


def test_an_object_lives_in_its_prefix_node_as_one_short_field(index: Index) -> None:
    index.put_start(KEY, 100)
    value = stored(index)
    assert value is not None and value.startswith("1p,100,") and len(value) < 64
    assert set(node_fields(index, A)) >= {"o:_0_k", "no", "np", "b"}
    assert index.usage().used_bytes == 100
    assert not index.is_exist(KEY)  # not readable until put_end
    with pytest.raises(ObjectNotReady):
        index.get(KEY)


def test_put_end_completes_and_get_grants_a_lease_from_redis_time(index: Index) -> None:
    index.put_start(KEY, 100)
    index.put_end(KEY)
    assert index.is_exist(KEY)
    before = redis_now_ms(index)
    info = index.get(KEY)
    after = redis_now_ms(index)
    assert info is not None and info.state == "complete" and info.size == 100
    ttl = index.settings.lease_ttl_ms
    assert before + ttl <= info.lease_ms <= after + ttl  # Redis TIME during the get, + TTL
    decoded = decode_object(stored(index) or "")
    assert decoded is not None and decoded.time_ms == info.lease_ms
    leaves = index.ctx.schema.shard_keys(index.ctx.shard(A)).leaves
    assert index.client.zscore(leaves, A) == info.lease_ms  # the leaf's score follows


def test_existence_probes_do_not_extend_leases_by_default(index: Index) -> None:
    index.put_start(KEY, 1)
    index.put_end(KEY)
    before = stored(index)
    assert index.batch_is_exist([KEY, f"{A}_9_k", "no-such-key"]) == [True, False, False]
    assert stored(index) == before


def test_probes_extend_leases_when_configured(make_index) -> None:
    index = make_index(probe_extends_lease=True)
    index.put_start(KEY, 1)
    assert index.batch_is_exist([KEY]) == [False]
    index.put_end(KEY)
    before = decode_object(stored(index) or "")
    assert index.batch_is_exist([KEY, "missing"]) == [True, False]
    after = decode_object(stored(index) or "")
    assert before is not None and after is not None and after.time_ms >= before.time_ms + 9_000


def test_get_of_an_unknown_key_is_none(index: Index) -> None:
    assert index.get("nothing-here") is None


def test_batch_get_answers_each_key(index: Index) -> None:
    index.batch_put_start([(KEY, 1), (f"{A}_1_k", 2)])
    index.put_end(KEY)
    first, second, third = index.batch_get([KEY, f"{A}_1_k", "absent"])
    assert first.ok and first.value is not None and first.value.size == 1
    assert isinstance(second.error, ObjectNotReady) and second.error.key == f"{A}_1_k"
    assert third.ok and third.value is None


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
    assert index.usage().used_bytes == 0 and index.get_node(A) is None
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
    index = make_index(capacity_bytes=NEW_SHARD_COUNT * 100)  # 100 bytes per shard
    other = make_index()  # another writer (its own token)
    index.put_start(KEY, 60)
    before = snapshot(index)
    refusals = [
        (ObjectAlreadyExists, lambda: other.put_start(KEY, 1)),
        (NoSpace, lambda: index.put_start(f"{A}_1_k", NEW_SHARD_COUNT * 100 - 59)),
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
        (InvalidObjectState, lambda: index.put_revoke(KEY)),
        (ObjectAlreadyExists, lambda: other.put_start(KEY, 1)),
    ]:
        with pytest.raises(error):
            call()
        assert snapshot(index) == before, error


def test_a_resent_put_start_or_put_end_by_the_same_writer_succeeds(index: Index) -> None:
    """A re-send after a lost reply must answer as the first send did (writer tokens)."""
    index.put_start(KEY, 10)
    before = snapshot(index)
    index.put_start(KEY, 10)  # same Index, same token: a re-send, not a conflict
    assert snapshot(index) == before
    index.put_end(KEY)
    index.put_end(KEY)
    assert index.is_exist(KEY) and index.usage().used_bytes == 10
    with pytest.raises(ObjectAlreadyExists):  # after put_end it is no re-send: a new put
        index.put_start(KEY, 10)


def test_another_writer_cannot_complete_or_revoke_my_object(make_index) -> None:
    mine, theirs = make_index(), make_index()
    mine.put_start(KEY, 10)
    with pytest.raises(InvalidObjectState, match="another writer"):
        theirs.put_end(KEY)
    with pytest.raises(InvalidObjectState, match="another writer"):
        theirs.put_revoke(KEY)
    with pytest.raises(ObjectAlreadyExists):
        theirs.put_start(KEY, 10)
    mine.put_end(KEY)


def test_an_unfinished_put_start_is_taken_over_after_the_discard_timeout(make_index) -> None:
    mine = make_index(put_start_discard_timeout_ms=0)
    theirs = make_index()
    mine.put_start(KEY, 10)
    theirs.put_start(KEY, 25)  # mine is older than the (zero) discard timeout
    info = theirs.object_info(KEY)
    assert info is not None and info.token == theirs.ctx.token and info.size == 25
    assert theirs.usage().used_bytes == 25 and theirs.usage().objects == 1
    with pytest.raises(InvalidObjectState):
        mine.put_end(KEY)  # the writer that lost its object is told so
    theirs.put_end(KEY)
    assert_consistent(theirs)


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


def test_a_batch_answers_each_item_and_writes_only_the_accepted_ones(make_index) -> None:
    index, writer = make_index(), make_index()
    index.put_start(KEY, 1)
    other = f"{page('b')}_0_k"
    results = writer.batch_put_start([(f"{A}_1_k", 1), (KEY, 1), (other, 2)])
    assert [r.ok for r in results] == [True, False, True]
    assert isinstance(results[1].error, ObjectAlreadyExists) and results[1].error.key == KEY
    assert index.object_info(f"{A}_1_k") is not None and index.object_info(other) is not None
    assert index.usage().used_bytes == 4
    with pytest.raises(InvalidArgument):  # a caller error refuses the whole batch first
        index.batch_put_start([(f"{A}_2_k", 1), (f"{A}_2_k", 1)])
    assert index.object_info(f"{A}_2_k") is None


def test_batch_remove_reports_each_outcome(index: Index) -> None:
    keys = [f"{A}_{i}_k" for i in range(3)]
    index.batch_put_start([(k, 1) for k in keys])
    index.batch_put_end(keys[:2])
    index.get(keys[1])
    results = index.batch_remove(keys + ["missing"])
    assert [type(r.error).__name__ for r in results] == [
        "NoneType", "ObjectLeased", "InvalidObjectState", "ObjectNotFound"]
    assert index.get_keys_by_prefix(A) == keys[1:]
    assert_consistent(index)


def test_remove_by_regex_walks_every_shard(index: Index) -> None:
    keys = [f"{page(i)}_0_{kv}" for i in range(40) for kv in "kv"]
    index.batch_put_start([(k, 3) for k in keys])
    index.batch_put_end(keys)
    assert index.remove_by_regex(r"_v$") == 40
    assert sorted(index.batch_is_exist(keys)) == [False] * 40 + [True] * 40
    assert all(index.is_exist(k) == k.endswith("_k") for k in keys)
    assert index.usage().used_bytes == 120
    assert_consistent(index)


@pytest.mark.parametrize("pattern", ["([unclosed", "", 7])
def test_remove_by_regex_refuses_bad_patterns(index: Index, pattern) -> None:
    with pytest.raises(InvalidArgument):
        index.remove_by_regex(pattern)


def test_remove_by_regex_runs_in_linear_time(index: Index) -> None:
    """A pattern that backtracks catastrophically in Python's re finishes at once in RE2."""
    index.batch_put_start([(f"{page(i)}_0_k", 1) for i in range(20)])
    assert index.remove_by_regex(r"^([0-9a-f]+)+x$") == 0


def test_remove_all_keeps_leased_and_processing_objects_unless_forced(index: Index) -> None:
    keys = [f"{page(i)}_0_k" for i in range(10)]
    index.batch_put_start([(k, 1) for k in keys])
    index.batch_put_end(keys[:9])
    index.get(keys[0])
    assert index.remove_all() == 8
    assert index.usage().objects == 2
    assert index.remove_all(force=True) == 2
    assert index.usage().objects == 0 and index.usage().nodes == 0
    assert_consistent(index)


def test_pins_are_stored_per_object_and_a_hard_pin_keeps_the_leaf(index: Index) -> None:
    index.put_start(KEY, 1, soft_pin=True)
    index.put_start(f"{A}_1_k", 1, hard_pin=True)
    index.batch_put_end([KEY, f"{A}_1_k"])
    soft, hard = index.object_info(KEY), index.object_info(f"{A}_1_k")
    assert soft is not None and soft.soft_pin and not soft.hard_pin
    assert hard is not None and hard.hard_pin and not hard.soft_pin
    soft_leaves = index.ctx.schema.shard_keys(index.ctx.shard(A)).soft_leaves
    assert index.client.zscore(soft_leaves, A) == float("inf")


def test_a_put_that_fits_the_free_capacity_borrows_limit_from_other_shards(
        make_index) -> None:
    index = make_index(capacity_bytes=NEW_SHARD_COUNT * GIB)  # 1 GiB per shard at first
    index.put_start(KEY, GIB)
    index.put_start(f"{A}_1_k", GIB)  # past its shard's share: it borrows from the others
    schema = index.ctx.schema
    stats = [schema.shard_keys(shard).stats for shard in index.ctx.all_shards()]
    limits = [int(index.client.hget(key, "limit") or GIB) for key in stats]
    assert sum(limits) == NEW_SHARD_COUNT * GIB  # moved, never made
    assert limits[stats.index(schema.shard_keys(index.ctx.shard(A)).stats)] >= 2 * GIB
    free = NEW_SHARD_COUNT * GIB - 2 * GIB
    with pytest.raises(NoSpace, match="shard"):  # more than the free capacity: refused
        index.put_start(f"{page('elsewhere')}_0_k", free + 1)
    index.put_start(f"{page('elsewhere')}_0_k", free)  # all of it
    assert index.usage().used_bytes == NEW_SHARD_COUNT * GIB
    with pytest.raises(NoSpace):
        index.put_start(f"{page('one more')}_0_k", 1)
