"""Leaf-first cascading eviction, on real Redis, the cluster and fakeredis."""

from __future__ import annotations

import random
import threading

import pytest
from clock import HANG_GUARD_S, joined, next_redis_millisecond, redis_now_ms, wait_for_redis_time
from helpers import assert_consistent, page, stream_events

from mooncake_redis import Index, InvalidArgument
from mooncake_redis.capacity.eviction import (
    LOCK_HELD,
    NO_CAPACITY,
    NOTHING_EVICTABLE,
    TARGET_REACHED,
    Evictor,
)


def store(index: Index, name: str, parent: str | None = None, size: int = 10,
          lease: bool = False, **pins: bool) -> str:
    """A page with one complete object; `lease` reads it so it is held for lease_ttl_ms."""
    prefix_hash = page(name)
    key = f"{prefix_hash}_0_k"
    index.put_start(key, size, parent_block_hash=page(parent) if parent else None, **pins)
    index.put_end(key)
    if lease:
        index.get(key)
    return prefix_hash


def alive(index: Index, *names: str) -> dict[str, bool]:
    return {name: index.get_node(page(name)) is not None for name in names}


def test_the_rfc_example_evicts_leaves_first_then_their_parent(index: Index) -> None:
    for name, parent in (("A", None), ("B", "A"), ("C", "A"), ("D", "B"), ("E", "B")):
        store(index, name, parent)
    store(index, "F", "C", lease=True)
    after_each_round: list[dict[str, bool]] = []
    report = Evictor(index.ctx).run(
        target_ratio=0, on_round=lambda _: after_each_round.append(alive(index, *"ABCDEF")))
    # A job's first round takes one leaf (D, the oldest), the next up to two: E, and B,
    # left a leaf by E and older than it, goes in that same round (the cascade evicts it
    # inside the round's calls); A keeps C, which keeps the leased F.
    assert after_each_round[0] == {"A": True, "B": True, "C": True, "D": False, "E": True,
                                   "F": True}
    assert after_each_round[1] == {"A": True, "B": False, "C": True, "D": False, "E": False,
                                   "F": True}
    assert report.stopped == NOTHING_EVICTABLE and report.leaves == 3 and report.rounds == 2
    assert alive(index, *"ACF") == {"A": True, "C": True, "F": True}
    assert_consistent(index)


def test_eviction_follows_lease_order_exactly_across_shards(make_index) -> None:
    """Leaves go oldest first across all shards, and a parent that becomes a leaf
    competes at once with its own (older) score, as in an in-memory LRU: it goes in the
    same round as its last child (older than the round's choice), before any younger leaf."""
    index: Index = make_index(leaves_per_round=1)
    order = []
    for i in range(12):  # scores: parent-0 < child-0 < parent-1 < child-1 < ...
        store(index, f"parent-{i}")
        next_redis_millisecond(index)
        store(index, f"child-{i}", f"parent-{i}")
        next_redis_millisecond(index)
        order.append({f"child-{i}", f"parent-{i}"})
    rounds: list[set[str]] = []
    names = [f"{kind}-{i}" for i in range(12) for kind in ("parent", "child")]

    def record(_: object) -> None:
        gone = {n for n in names if not alive(index, n)[n]}
        rounds.append(gone.difference(*rounds))

    Evictor(index.ctx).run(target_ratio=0, max_rounds=100, on_round=record)
    assert rounds == order


def test_the_tree_is_consistent_after_every_round(make_index) -> None:
    index: Index = make_index(leaves_per_round=7)
    rng = random.Random(3)
    names = ["root"]
    store(index, "root")
    for i in range(120):
        parent = rng.choice(names)
        names.append(f"n{i}")
        store(index, f"n{i}", parent, lease=rng.random() < 0.2)

    def check(_: object) -> None:
        assert_consistent(index)

    started = redis_now_ms(index)
    report = Evictor(index.ctx).run(target_ratio=0, max_rounds=1000, on_round=check)
    assert report.stopped == NOTHING_EVICTABLE and report.rounds > 3
    now = started  # leases held when the job began (a slow machine may outlive them)
    for name in names:  # only leased pages and their ancestors may remain
        if index.get_node(page(name)) is not None:
            subtree = index.get_subtree_keys(page(name))
            assert any(index.object_info(k).lease_ms > now for k in subtree)  # type: ignore[union-attr]


def test_a_leaf_with_a_processing_object_is_never_partly_evicted(make_index) -> None:
    index: Index = make_index(allow_path_breaking_eviction=True)
    prefix_hash = page("half")
    index.put_start(f"{prefix_hash}_0_k", 10)
    index.put_end(f"{prefix_hash}_0_k")
    index.put_start(f"{prefix_hash}_1_k", 10)  # still processing
    report = index.evict(target_ratio=0)
    assert report.objects == 0
    assert index.get_keys_by_prefix(prefix_hash) == [f"{prefix_hash}_0_k", f"{prefix_hash}_1_k"]
    index.put_end(f"{prefix_hash}_1_k")
    assert index.evict(target_ratio=0).objects == 2
    assert index.get_node(prefix_hash) is None


def test_an_unfinished_object_becomes_evictable_after_the_release_timeout(make_index) -> None:
    """A zombie (a put_start never finished) at the tip of a chain must not pin the chain."""
    index: Index = make_index(put_start_release_timeout_ms=1)
    chain = [store(index, "zombie-root")]
    for i in range(5):
        chain.append(store(index, f"zombie-{i}", "zombie-root" if i == 0 else f"zombie-{i - 1}"))
    tip = page("zombie-tip")
    index.put_start(f"{tip}_0_k", 10, parent_block_hash=chain[-1])  # never finished
    zombie = index.object_info(f"{tip}_0_k")
    assert zombie is not None and zombie.started_ms is not None
    wait_for_redis_time(index, zombie.started_ms + 2)  # past its 1 ms release timeout
    report = index.evict(target_ratio=0)
    assert report.objects == 7 and index.usage().nodes == 0
    assert_consistent(index)


def test_soft_pins_wait_for_the_second_pass(index: Index) -> None:
    store(index, "soft-and-old", size=40, soft_pin=True)
    store(index, "plain-and-newer", size=50)
    index.set_config(capacity_bytes=100, high_watermark=0.9, eviction_ratio=0.1)
    report = index.evict()  # 90 used, target 80: one leaf must go
    assert report.stopped == TARGET_REACHED
    assert alive(index, "soft-and-old", "plain-and-newer") == {"soft-and-old": True,
                                                               "plain-and-newer": False}
    report = index.evict(target_ratio=0)
    assert report.leaves == 1 and not alive(index, "soft-and-old")["soft-and-old"]


def test_soft_pins_stay_when_their_eviction_is_not_allowed(make_index) -> None:
    index: Index = make_index(allow_soft_pin_eviction=False)
    store(index, "soft", soft_pin=True)
    assert index.evict(target_ratio=0).objects == 0
    assert alive(index, "soft") == {"soft": True}


def test_hard_pins_never_go(make_index) -> None:
    index: Index = make_index(allow_path_breaking_eviction=True)
    store(index, "hard-root", hard_pin=True)
    store(index, "hard", "hard-root", hard_pin=True)
    index.put_start("outside", 5, hard_pin=True)
    index.put_end("outside")
    assert index.evict(target_ratio=0).objects == 0
    assert index.usage().objects == 3


def test_a_read_keeps_its_leaf_and_the_oldest_unread_leaf_goes_first(index: Index) -> None:
    for name in ("oldest", "read", "newest"):
        store(index, name)
        next_redis_millisecond(index)  # distinct completion times (scores are in ms)
    index.get(f"{page('read')}_0_k")
    leaves = index.ctx.schema.shard_keys(index.ctx.shard(page("read"))).leaves
    assert index.client.zscore(leaves, page("read")) > redis_now_ms(index)
    index.set_config(capacity_bytes=30, high_watermark=0.9, eviction_ratio=0.2)
    index.evict()  # 30 used, target 21: one leaf
    assert alive(index, "oldest", "read", "newest") == {"oldest": False, "read": True,
                                                        "newest": True}
    index.evict(target_ratio=0)
    assert alive(index, "read", "newest") == {"read": True, "newest": False}


def test_a_child_registered_under_a_chosen_leaf_saves_it(index: Index, monkeypatch) -> None:
    store(index, "parent")
    original = Evictor._evict

    def register_child_first(self, chosen, *args):  # type: ignore[no-untyped-def]
        store(index, "late-child", "parent", lease=True)  # between choice and eviction
        monkeypatch.setattr(Evictor, "_evict", original)
        return original(self, chosen, *args)

    monkeypatch.setattr(Evictor, "_evict", register_child_first)
    report = index.evict(target_ratio=0)
    assert report.objects == 0 and report.stopped == NOTHING_EVICTABLE
    node = index.get_node(page("parent"))
    assert node is not None and node.children == [page("late-child")]
    assert_consistent(index)


def test_a_lease_granted_after_the_choice_sends_the_leaf_back(index: Index, monkeypatch) -> None:
    store(index, "read-late")
    original = Evictor._evict

    def read_first(self, chosen, *args):  # type: ignore[no-untyped-def]
        index.get(f"{page('read-late')}_0_k")
        monkeypatch.setattr(Evictor, "_evict", original)
        return original(self, chosen, *args)

    monkeypatch.setattr(Evictor, "_evict", read_first)
    assert index.evict(target_ratio=0).objects == 0
    assert alive(index, "read-late") == {"read-late": True}


def test_registration_racing_eviction_leaves_a_consistent_tree(redis_url: str) -> None:
    index = Index.from_url(redis_url, namespace="race")
    writer = Index.from_url(redis_url, namespace="race")
    store(index, "root")
    stop = threading.Event()
    errors: list[BaseException] = []

    def evict_continuously() -> None:
        try:
            while not stop.is_set():
                Evictor(index.ctx).run(target_ratio=0, max_rounds=50)
        except BaseException as error:  # surfaced below
            errors.append(error)

    thread = threading.Thread(target=evict_continuously)
    thread.start()
    try:
        for i in range(300):
            store(writer, f"child-{i}", "root" if i % 3 == 0 else f"child-{i - 1}")
    finally:
        stop.set()
        joined(thread, "the evictor to stop")
    assert not errors
    writer.close()
    assert_consistent(index)


def test_only_one_job_evicts_at_a_time(index: Index, monkeypatch) -> None:
    """A job holds the namespace's lock from its first round to its last: jobs started
    while it is inside a round stop at once, evicting nothing, and it evicts everything.
    The first job is held inside its first round until the others are done, so they surely
    start while it runs (threads left to race each other almost never overlapped, and the
    test passed whether they did or not)."""
    for i in range(40):
        store(index, f"leaf-{i}")
    inside, release = threading.Event(), threading.Event()
    original = Evictor._round

    def first_round_waits(self, *args):  # type: ignore[no-untyped-def]
        if not inside.is_set():
            inside.set()
            assert release.wait(timeout=HANG_GUARD_S)
        return original(self, *args)

    monkeypatch.setattr(Evictor, "_round", first_round_waits)
    first = []
    holder = threading.Thread(target=lambda: first.append(index.evict(target_ratio=0)))
    holder.start()
    try:
        assert inside.wait(timeout=HANG_GUARD_S)
        others = [index.evict(target_ratio=0) for _ in range(3)]
    finally:
        release.set()
        holder.join(timeout=HANG_GUARD_S)
    assert not holder.is_alive()
    assert [(r.stopped, r.objects) for r in others] == [(LOCK_HELD, 0)] * 3
    assert (first[0].stopped, first[0].objects) == (TARGET_REACHED, 40)
    assert index.usage().objects == 0


def test_a_held_lock_makes_a_job_stop_without_evicting(index: Index) -> None:
    store(index, "leaf")
    index.client.set(index.ctx.schema.eviction_lock, "someone-else", px=60_000)
    report = index.evict(target_ratio=0)
    assert report.stopped == LOCK_HELD and report.objects == 0
    assert index.client.get(index.ctx.schema.eviction_lock) == "someone-else"


def test_a_job_waits_for_a_keeper_that_holds_the_lock(
        index: Index, monkeypatch: pytest.MonkeyPatch) -> None:
    """A keeper (the monitor's, set_config's) holds the eviction lock for milliseconds: a
    job that finds it waits for it, not stops. The keeper's end is the first wait's."""
    from mooncake_redis.capacity import admission

    store(index, "leaf")
    lock = index.ctx.schema.eviction_lock
    index.client.set(lock, admission.KEEPER_TOKEN_PREFIX + "run", px=60_000)
    waits = []

    def keeper_finishes(seconds: float) -> None:
        waits.append(seconds)
        index.client.delete(lock)

    monkeypatch.setattr(admission.time, "sleep", keeper_finishes)
    report = index.evict(target_ratio=0)
    assert len(waits) == 1 and report.stopped != LOCK_HELD and report.objects == 1


def test_lease_ordered_eviction_without_the_tree(make_index) -> None:
    index: Index = make_index(enable_radix_tree=False)
    for i in range(10):
        index.put_start(f"obj-{i}", 10, soft_pin=i == 0)
        index.put_end(f"obj-{i}")
        next_redis_millisecond(index)
    index.get("obj-1")
    index.set_config(capacity_bytes=100, high_watermark=0.9, eviction_ratio=0.2)
    report = index.evict()  # 100 used, target 70
    assert report.objects == 3 and report.stopped == TARGET_REACHED
    assert index.batch_is_exist([f"obj-{i}" for i in range(10)]) == [
        True, True, False, False, False, True, True, True, True, True]
    assert_consistent(index)


def test_path_breaking_eviction_only_when_allowed(index: Index) -> None:
    store(index, "interior")
    store(index, "leased-child", "interior", lease=True)
    assert index.evict(target_ratio=0).objects == 0
    index.set_config(allow_path_breaking_eviction=True)
    report = index.evict(target_ratio=0)
    assert report.objects == 1 and report.interior_nodes == 1
    node = index.get_node(page("interior"))
    assert node is not None and node.is_shell and node.children == [page("leased-child")]
    assert index.match_prefix([page("interior"), page("leased-child")]) == 0
    assert_consistent(index)


def test_every_eviction_is_announced_on_the_shards_events_stream(index: Index) -> None:
    leaf = store(index, "announced")
    index.evict(target_ratio=0)
    events = stream_events(index, index.ctx.shard(leaf))
    assert [(e.type, e.key) for e in events] == [("stored", f"{leaf}_0_k"),
                                                  ("evicted", f"{leaf}_0_k")]


def test_targets(make_index) -> None:
    unlimited: Index = make_index(namespace="unlimited")
    assert unlimited.evict().stopped == NO_CAPACITY
    with pytest.raises(InvalidArgument):
        unlimited.evict(target_ratio=0.5)
    with pytest.raises(InvalidArgument):
        unlimited.evict(target_ratio=1.5)
    bounded: Index = make_index(namespace="bounded", capacity_bytes=256_000)
    store(bounded, "x", size=100)
    assert bounded.evict().stopped == TARGET_REACHED and bounded.usage().objects == 1


def test_a_leaf_holding_a_value_no_version_writes_is_evicted_whole(index: Index) -> None:
    """A planted object value (not one the scripts can read) must not stop eviction: it
    goes with its node, unannounced; the readable objects are announced as ever."""
    leaf = store(index, "planted-leaf")
    index.client.hset(index.ctx.schema.node(leaf), "o:_9_k", "garbage")
    index.set_config(capacity_bytes="1MiB")
    report = index.evict(target_ratio=0)
    assert report.leaves == 1 and report.objects == 1, report  # the readable one
    assert index.get_node(leaf) is None
    events = list(index.events(start="earliest", follow=False))
    assert [(e.type, e.suffix) for e in events if e.type == "evicted"] == [("evicted", "_0_k")]
