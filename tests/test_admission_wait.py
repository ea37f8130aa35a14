"""put_start's admission wait on a real redis-server: a store full of evictable objects
refuses a put at once without a wait, and with one (argument or setting) makes room by
running an eviction job in the waiting call when no queue is configured."""

from __future__ import annotations

import os

import pytest
from helpers import assert_consistent

from mooncake_redis import Index, InvalidArgument, NoSpace
from mooncake_redis.prefix import NEW_SHARD_COUNT as SHARDS
from mooncake_redis.store import waiting

SHARD_SHARE = 1000
"""Capacity per shard: SHARDS x this in all."""
BIG = 900
"""More than a full store's free space, less than what one eviction job frees."""


@pytest.fixture(autouse=True)
def no_index_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("MOONCAKE_REDIS_"):
            monkeypatch.delenv(name)


def in_shard(shard: int, name: str) -> str:
    """An object key whose page hash lies in the given shard."""
    return f"{shard:x}{name.encode().hex():0<63}"[:64] + "_0_k"  # 16 shards: the 1st digit


def full_store(redis_url: str, **settings: object) -> Index:
    """Every shard holds one complete, evictable object of 950 bytes: 95% of capacity,
    above the high watermark, and 50 bytes left in each shard's share: 800 bytes free in
    all, less than BIG. An eviction job frees down to 85%."""
    index = Index.from_url(redis_url, namespace="wait", capacity_bytes=SHARDS * SHARD_SHARE,
                           lease_ttl_ms=1, **settings)
    keys = [in_shard(shard, "old") for shard in range(SHARDS)]
    index.batch_put_start([(key, 950) for key in keys])
    index.batch_put_end(keys)
    assert index.usage().used_bytes == SHARDS * 950
    return index


def test_without_a_wait_a_full_store_refuses_at_once_and_evicts_nothing(
        redis_url: str) -> None:
    index = full_store(redis_url)
    new = in_shard(0, "new")
    with pytest.raises(NoSpace):
        index.put_start(new, BIG)
    assert index.object_info(new) is None
    assert index.usage().objects == SHARDS  # no queue, no wait: nothing evicts


def test_with_a_wait_the_put_runs_an_eviction_job_and_succeeds(redis_url: str) -> None:
    index = full_store(redis_url)
    new = in_shard(0, "new")
    index.put_start(new, BIG, wait_ms=10_000)
    info = index.object_info(new)
    assert info is not None and info.size == BIG and info.state == "processing"
    usage = index.usage()
    target = index.settings.eviction_target_ratio * usage.capacity_bytes
    evicted = SHARDS - (usage.objects - 1)
    assert evicted > 0 and usage.used_bytes == (SHARDS - evicted) * 950 + BIG
    assert usage.used_bytes - BIG <= target  # the job ran down to its target
    assert_consistent(index)


def test_the_setting_gives_the_wait_and_only_refused_items_are_sent_again(
        redis_url: str) -> None:
    index = full_store(redis_url, put_wait_ms=10_000)
    other_writer = Index.from_url(redis_url, namespace="wait")
    taken = in_shard(7, "taken")
    other_writer.put_start(taken, 10)
    assert index.settings.put_wait_ms == 10_000
    results = index.batch_put_start([(in_shard(1, "small"), 10), (in_shard(2, "big"), 100),
                                     (taken, 10)])
    assert [type(r.error).__name__ for r in results] == ["NoneType", "NoneType",
                                                         "ObjectAlreadyExists"]
    assert index.object_info(taken).token == other_writer.ctx.token  # type: ignore[union-attr]
    assert index.object_info(in_shard(2, "big")) is not None
    assert_consistent(index)


class StepClock:
    """The waiting loop's clock (mooncake_redis.store.waiting reads time.monotonic and sleeps):
    time moves only when the loop sleeps, so the wait lasts as many sends as its pauses
    add up to, however slow the machine or the eviction job it runs."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_a_put_that_cannot_fit_still_reports_no_space_after_the_wait(
        redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    index = full_store(redis_url)
    too_big = in_shard(3, "huge")
    clock = StepClock()
    monkeypatch.setattr(waiting, "time", clock)
    with pytest.raises(NoSpace):  # bigger than the whole capacity: no eviction helps
        index.put_start(too_big, SHARDS * SHARD_SHARE + 1, wait_ms=1000)
    assert clock.now >= 1.0 and len(clock.sleeps) > 1  # it waited the whole second, resending
    assert index.object_info(too_big) is None
    assert index.usage().used_bytes <= index.settings.eviction_target_ratio * SHARDS * SHARD_SHARE


def test_wait_ms_must_be_a_non_negative_int(redis_url: str) -> None:
    index = Index.from_url(redis_url, namespace="bad-wait")
    for wrong in (-1, 1.5, True, "10"):
        with pytest.raises(InvalidArgument, match="wait_ms"):
            index.put_start(in_shard(0, "x"), 1, wait_ms=wrong)  # type: ignore[arg-type]
    assert index.usage().objects == 0
