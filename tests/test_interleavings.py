"""Every interleaving of small scenarios, step by step, with crashes, on real Redis: the
link protocol keeps invariant S in every state reached, and after the resolver nothing
dangles, no cycle is left, every counter is exact (tests/interleaving.py explains how)."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable

import pytest
from clock import HANG_GUARD_S
from helpers import default_shard, page
from interleaving import Explorer, Partition, Scenario, node_per_shard, one_cluster_node

from mooncake_redis import Index, NoSpace
from mooncake_redis.capacity.admission import read_shards, rebalance
from mooncake_redis.prefix import shard_names, shard_of


def distinct_shards(*names: str) -> list[str]:
    """A page hash per name, each in a shard of its own: the name's, or the first of
    name1, name2, ... whose shard is not taken yet."""
    hashes: list[str] = []
    for name in names:
        candidates = (page(name if i == 0 else f"{name}{i}") for i in range(1000))
        taken = {default_shard(h) for h in hashes}
        hashes.append(next(h for h in candidates if default_shard(h) not in taken))
    return hashes


PREEMPTIONS = int(os.environ.get("MOONCAKE_REDIS_CHECK_PREEMPTIONS", "1"))
"""The preemption bound of the scenarios too big to explore unbounded in CI (an eviction
job, three writers); MOONCAKE_REDIS_CHECK_PREEMPTIONS=2 runs them deeper (slowly: a few
of them then pass the checker's schedule cap, docs/RELIABILITY.md)."""

A, B, C, D, P, Q = distinct_shards("A", "B", "C", "D", "P", "Q")
X, Y, Z = [h for h in (page(f"same-{i}") for i in range(1000))
           if default_shard(h) == default_shard(page("same-0"))][:3]  # three pages of one shard
SHARDS = [default_shard(h) for h in (A, B, C, D, P, Q, X)]


def put(prefix_hash: str, parent: str | None = None, rank: int = 0, end: bool = True):
    def operation(index: Index) -> None:
        key = f"{prefix_hash}_{rank}_k"
        index.put_start(key, 10, parent_block_hash=parent)
        if end:
            index.put_end(key)
    operation.__name__ = f"put {prefix_hash[:4]} under {parent and parent[:4]}"
    return operation


def batch_put(*items: tuple[str, str | None], rank: int = 0):
    def operation(index: Index) -> list[bool]:
        results = index.batch_put_start([(f"{h}_{rank}_k", 10, p) for h, p in items])
        return [r.ok for r in results]
    return operation


def remove(prefix_hash: str, rank: int = 0):
    def operation(index: Index) -> None:
        index.remove(f"{prefix_hash}_{rank}_k", force=True)
    return operation


def register(prefix_hash: str, parent: str, rank: int = 0):
    def operation(index: Index) -> None:
        index.register_radix_tree_node(prefix_hash, parent, [f"{prefix_hash}_{rank}_k"])
    return operation


def evict(index: Index) -> int:
    return index.evict(target_ratio=0).objects


def resolver(index: Index) -> None:
    index.resolve(grace_ms=0)


def setup(*steps):
    def prepare(index: Index) -> None:
        for step in steps:
            step(index)
        index.close()
    return prepare


def settings(**changes):
    def prepare(index: Index) -> None:
        index.set_config(**changes)
    return prepare


def parent_of(index: Index, prefix_hash: str) -> str | None:
    node = index.get_node(prefix_hash)
    return None if node is None else node.parent


def not_both_linked(index: Index, outcomes: dict) -> None:
    assert not (parent_of(index, A) == B and parent_of(index, B) == A), "a cycle survived"


def one_parent_lists_c(index: Index, outcomes: dict) -> None:
    listing = [p for p in (P, Q) if (n := index.get_node(p)) is not None and C in n.children]
    assert len(listing) <= 1, "both parents list C"
    if index.get_node(C) is not None:
        assert listing == ([parent_of(index, C)] if parent_of(index, C) else [])


def acknowledged_links_kept(*links: tuple[str, str], may_lose: int):
    """End check of writers op i linking links[i] = (child, parent): the tree is acyclic and
    at most `may_lose` of the links whose writer was told OK (put_start and put_end
    returned) are gone (a cycle the writers closed at once loses its newest link)."""
    def check(index: Index, outcomes: dict) -> None:
        parents = {child: parent_of(index, child) for child, _ in links}
        for start in parents:
            seen, cursor = set(), start
            while cursor in parents and cursor not in seen:
                seen.add(cursor)
                cursor = parents[cursor]
            assert cursor not in seen, f"a cycle through {start[:8]} survived"
        lost = [child[:8] for number, (child, parent) in enumerate(links)
                if outcomes.get(number, "unknown") is None and parents[child] != parent]
        assert len(lost) <= may_lose, f"acknowledged links lost: {lost}"
    return check


def no_cycle_through(*hashes: str):
    """End check: walking up from each of these nodes reaches a root."""
    def check(index: Index, outcomes: dict) -> None:
        for start in hashes:
            seen, cursor = set(), start
            while cursor is not None and cursor not in seen:
                seen.add(cursor)
                cursor = parent_of(index, cursor)
            assert cursor is None, f"a cycle through {start[:8]} survived"
    return check


SCENARIOS = [
    Scenario("put/put, crossed parents, new nodes", setup(),
             [put(A, B), put(B, A)], crashable=[0, 1], check_end=not_both_linked),
    Scenario("put/put, crossed parents, existing roots", setup(put(A), put(B)),
             [put(A, B, rank=1), put(B, A, rank=1)], crashable=[0, 1],
             check_end=not_both_linked),
    Scenario("register/register, crossed parents", setup(put(A), put(B)),
             [register(A, B), register(B, A)], crashable=[0, 1], check_end=not_both_linked),
    Scenario("two writers of one page and a remover (fences)", setup(put(P)),
             [put(C, P, rank=1), put(C, P, rank=2), remove(C, rank=2)], crashable=[0],
             preemptions=PREEMPTIONS),
    Scenario("put/put, conflicting parents", setup(put(P), put(Q)),
             [put(C, P), put(C, Q, rank=1)], crashable=[0, 1], check_end=one_parent_lists_c),
    Scenario("put/remove of the same page", setup(put(P), put(C, P)),
             [remove(C), put(C, P, rank=1)], crashable=[0, 1]),
    Scenario("remove/re-put, remover crashes between steps", setup(put(P), put(C, P)),
             [remove(C), put(C, P)], crashable=[0]),
    Scenario("put/evict", setup(settings(lease_ttl_ms=0), put(P), put(C, P)),
             [evict, put(D, C)], crashable=[0, 1], preemptions=PREEMPTIONS),
    Scenario("re-put under an evicted chain", setup(settings(lease_ttl_ms=0), put(P), put(C, P)),
             [evict, put(C, P, rank=1)], crashable=[1], preemptions=PREEMPTIONS),
    Scenario("put/evict, a chain in one shard (the cascade inside the evict call)",
             setup(settings(lease_ttl_ms=0), put(X), put(Y, X)),
             [evict, put(Z, Y)], crashable=[0, 1], preemptions=PREEMPTIONS),
    Scenario("chain batch/removal in the middle", setup(put(A), put(B, A), put(C, B)),
             [batch_put((D, C), (P, D)), remove(B)], crashable=[0, 1]),
    Scenario("batch marker on an existing root/crossed writer",
             setup(put(A), put(B)),
             [batch_put((A, B), (B, None), rank=1), put(B, A, rank=2)], crashable=[0, 1],
             check_end=not_both_linked),
    Scenario("put/resolver", setup(put(A)),
             [put(B, A), resolver], crashable=[0], preemptions=PREEMPTIONS),
    # The resolver keeps a link a writer left pending (it crashed after step 1) by raising
    # the child's epoch to the link's: a removal of the child after that unlinks at the
    # raised epoch, so the parent's field goes; without the raise it stays, dangling.
    Scenario("a link the resolver keeps, then a removal", setup(put(P)),
             [put(C, P), put(C, P, rank=1), resolver, remove(C)], crashable=[1],
             preemptions=0),
    # Links within one node (DESIGN v4 item 2): the child names its parent and the parent
    # lists it in one script call, no pending entry, no fence. In one shard (X, Y, Z) that
    # holds in every topology; across shards only where one node serves both (one Redis,
    # the one-node view), so the same scenarios race a one-call link against a removal in
    # two steps and the other way round.
    Scenario("local link/removal of its parent, in one shard", setup(put(X)),
             [put(Y, X), remove(X)], crashable=[0, 1]),
    Scenario("local link/removal and re-put of its parent, in one shard", setup(put(X)),
             [put(Y, X), remove(X), put(X, rank=1)], crashable=[0, 1],
             preemptions=PREEMPTIONS),
    Scenario("remove/re-put of a child, in one shard", setup(put(X), put(Y, X)),
             [remove(Y), put(Y, X, rank=1)], crashable=[0, 1]),
    Scenario("put/removal of its parent", setup(put(P)),
             [put(C, P), remove(P)], crashable=[0, 1]),
    # A batch with a parent on its node and one elsewhere (Y under X: one shard; C under
    # P: one shard each): the first link in the call, the second in two steps, on a node
    # per shard; both parents removed meanwhile.
    Scenario("batch of a local and a cross-node link/removal of both parents",
             setup(put(X), put(P)),
             [batch_put((Y, X), (C, P)), remove(X), remove(P)], crashable=[0, 1],
             preemptions=PREEMPTIONS),
    # The same batch chaining a cross-node child under its local one, raced by a writer
    # closing a cycle through both (X under C).
    Scenario("batch of a local and a cross-node link/a writer closing a cycle",
             setup(put(X)),
             [batch_put((Y, X), (C, Y)), put(X, C, rank=1)], crashable=[0, 1],
             check_end=no_cycle_through(X, Y, C)),
    Scenario("three writers closing a cycle", setup(),
             [put(A, B), put(B, C), put(C, A)], crashable=[0, 1, 2], preemptions=PREEMPTIONS,
             check_end=acknowledged_links_kept((A, B), (B, C), (C, A), may_lose=1)),
    Scenario("three writers closing a cycle in one shard", setup(),
             [put(X, Y), put(Y, Z), put(Z, X)], crashable=[0, 1, 2], preemptions=PREEMPTIONS,
             check_end=acknowledged_links_kept((X, Y), (Y, Z), (Z, X), may_lose=0)),
]


for _scenario in SCENARIOS:
    _scenario.shards = SHARDS


TOPOLOGIES: dict[str, Callable[[int], Partition | None]] = {
    "one Redis": lambda op: None,
    "a node per shard": lambda op: node_per_shard,
    "mixed views": lambda op: node_per_shard if op % 2 else one_cluster_node,
}
"""Where each operation thinks the shards live: one Redis (every link written in one call,
the cascades inside the calls, no fence), a Redis Cluster node per shard (every link
across shards in the protocol's two steps, outbox unlinks, fences, the resolver), and,
on a cluster, one writer seeing every shard on one node while the next sees a node per
shard (a link one writer writes in one call raced by the same link, its unlink or its
resolver step in two: what clients with slot maps of different ages do while slots
move)."""


@pytest.mark.parametrize("topology", list(TOPOLOGIES))
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_every_interleaving_keeps_the_tree_safe(redis_url: str, scenario: Scenario,
                                               topology: str) -> None:
    view = TOPOLOGIES[topology]
    placed = dataclasses.replace(scenario, views=[view(op) for op in range(len(scenario.ops))])
    schedules = Explorer(redis_url, placed).explore()
    assert schedules > 1
    print(f"{scenario.name} ({topology}): {schedules:,} schedules explored")


def test_an_operation_that_hangs_fails_the_run_with_its_schedule(redis_url: str) -> None:
    """A protocol bug that blocks an operation must fail the test, not hang the suite: the
    gate's waits have a deadline (short here; the operation never ends, so no deadline is
    too short to be passed by a correct run, and none too long to be reached)."""
    released = threading.Event()

    def hangs(index: Index) -> None:
        index.put_start(f"{A}_0_k", 10)
        released.wait(timeout=HANG_GUARD_S)  # set only once the run failed: it is stuck

    scenario = Scenario("hangs", setup(), [put(B), hangs], shards=SHARDS)
    try:
        with pytest.raises(AssertionError, match=r"(?s)hangs, schedule #1: hung: waited 3 s "
                           r"for every operation .*running: \[1\]\).*step 1 "):
            Explorer(redis_url, scenario, wait_deadline_s=3).explore()
    finally:
        released.set()


# Borrowing limit (mooncake_redis/capacity/borrowing.py) racing another put and the keeper, in a
# namespace of 4 shards of 10 bytes each: S1 holds 8 bytes, 32 are free, and the two puts
# want 20 + 15, so one of them must be refused. After every step the used bytes stay within
# capacity, and so does the sum over shards of the larger of limit and usage (what the
# shards could hold without another move of limit).
BORROW_SHARDS = 4
BORROW_CAPACITY = 40
S0, S1, S2 = [next(h for h in (page(f"borrow-{s}-{i}") for i in range(1000))
                   if shard_of(h, BORROW_SHARDS) == f"{s:02x}")
              for s in range(3)]


def put_bytes(prefix_hash: str, size: int):
    def operation(index: Index) -> None:
        index.put_start(f"{prefix_hash}_0_k", size)
    return operation


def keeper(index: Index) -> None:
    rebalance(index.ctx)


def within_capacity(index: Index) -> list[str]:
    shards = read_shards(index.ctx)
    share = BORROW_CAPACITY // BORROW_SHARDS  # the limit of a shard that has none yet
    used = sum(s.used_bytes for s in shards)
    could = sum(max(share if s.limit is None else s.limit, s.used_bytes) for s in shards)
    return ([f"{used} bytes used, over the capacity of {BORROW_CAPACITY}"]
            * (used > BORROW_CAPACITY)
            + [f"limits allow {could} bytes, over the capacity"] * (could > BORROW_CAPACITY))


def keeper_gives_back_what_was_lost(index: Index, outcomes: dict) -> None:
    assert not within_capacity(index)
    index.client.delete(index.ctx.schema.eviction_lock)  # a crashed keeper's lock expires
    rebalance(index.ctx)
    assert sum(s.limit or 0 for s in read_shards(index.ctx)) == BORROW_CAPACITY


BORROWING = Scenario(
    "borrowing limit/another put/the keeper",
    setup(settings(capacity_bytes=BORROW_CAPACITY), put_bytes(S1, 8)),
    [put_bytes(S0, 20), put_bytes(S2, 15), keeper], crashable=[0, 2],
    preemptions=PREEMPTIONS, check_step=within_capacity, refusals=(NoSpace,),
    check_end=keeper_gives_back_what_was_lost,
    index_settings={"shard_count": BORROW_SHARDS},
    shards=shard_names(BORROW_SHARDS))


TWO_KEEPERS = Scenario(
    "borrowing limit/two keepers (one without the lock)",
    setup(settings(capacity_bytes=BORROW_CAPACITY), put_bytes(S1, 8)),
    [put_bytes(S0, 20), keeper, keeper], crashable=[0, 1],
    preemptions=PREEMPTIONS, check_step=within_capacity, refusals=(NoSpace,),
    check_end=keeper_gives_back_what_was_lost,
    index_settings={"shard_count": BORROW_SHARDS},
    shards=shard_names(BORROW_SHARDS))


@pytest.mark.parametrize("scenario", [BORROWING, TWO_KEEPERS], ids=lambda s: s.name)
def test_borrowing_never_takes_the_store_over_capacity(redis_url: str,
                                                       scenario: Scenario) -> None:
    schedules = Explorer(redis_url, scenario, namespace="mc-borrow").explore()
    assert schedules > 1
    print(f"{scenario.name}: {schedules:,} schedules explored")
