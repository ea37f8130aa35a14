"""A slot moving while a batch runs, on the real local 3-master cluster (DESIGN v4 item 1:
a step of a batch is one script call per master, sent again per shard when a slot moves).

The move is driven here step by step (tests/redis_cluster.py SlotMove: CLUSTER SETSLOT
... IMPORTING / MIGRATING, MIGRATE ... KEYS, CLUSTER SETSLOT ... NODE), at a chosen point
of the batch: before a step is sent (a hook on the executor's send) or when the executor
pauses to retry (a hook on its slot-map refresh). No sleeps: each stage happens exactly
where the test puts it. Three stages:

- the slot is migrating, its keys partly moved (ASK for a missing key, TRYAGAIN or "non
  local key" for a script whose keys are split between the nodes): reads follow ASK;
  writes wait for the move to end and land then, or fail whole with a library error and
  land once when sent again;
- the slot moved completely after the client read its slot map (MOVED, or "non local key"
  for a call whose other shards stayed): the call is sent again shard by shard;
- the slot moved between the two steps of a put whose parent is on another master.

Each time every item lands exactly once (its object there, the shards' counters exact,
one 'stored' event per object of a one-phase put), nothing is half-written (invariant S
after every batch, fsck clean), every result is the right one, and every script call
named keys of one node (conftest.py script_calls).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers import assert_consistent, default_shard, page, snapshot, stream_events
from interleaving import invariant_s
from redis.crc import key_slot
from redis_cluster import LocalCluster, SlotMove
from script_calls import ScriptCalls

from mooncake_redis import ClusterUnavailable, Index, Result
from mooncake_redis.executor import Executor, Queued
from mooncake_redis.keys import SHARD_KEY_NAMES

NAMESPACE = "mig"


@pytest.fixture
def index(cluster_url: str) -> Index:
    return Index.from_url(cluster_url, namespace=NAMESPACE)


@pytest.fixture
def moves(redis_cluster: LocalCluster) -> Iterator[list[SlotMove]]:
    """The slot moves a test makes, each undone at the end (finished if a failure left it
    half-way, then moved back): the session's cluster keeps its layout."""
    made: list[SlotMove] = []
    yield made
    for move in reversed(made):
        if not move.opened:
            continue  # the test ended before it began
        if not move.closed:
            move.close()
        move.back()


def slot_of(index: Index, shard: str) -> int:
    return key_slot(index.ctx.routing_key(shard).encode())


def other_master(cluster: LocalCluster, index: Index, shard: str) -> Any:
    owner = cluster.owner(slot_of(index, shard))
    return next(m for m in cluster.masters() if m.port != owner.port)


def pages(name: str, count: int) -> list[str]:
    return [page(f"{name}-{number}") for number in range(count)]


def chain_items(chain: list[str], parent: str | None = None) -> list[tuple[str, int, Any]]:
    """put items of a chain: each page's parent is the page before it (the first's is
    `parent`), most of them in another shard, many on another master."""
    return [(f"{h}_0_k", 1 + number, p)
            for number, (h, p) in enumerate(zip(chain, [parent, *chain[:-1]]))]


def before_send(monkeypatch: pytest.MonkeyPatch, when: Callable[[list[Queued]], bool],
                action: Callable[[], None]) -> list[int]:
    """Run `action` once, just before the executor sends the first set of calls for which
    `when` holds (the client's slot map is already read: the calls are grouped by node).
    Returns a list that holds 1 once it ran."""
    original = Executor._send_groups
    ran: list[int] = []

    def send_groups(executor: Executor, groups: Any, queued: Any, shortfalls: Any,
                    **options: Any) -> Any:
        sent = [queued[position] for _, group in groups for position in group]
        if not ran and when(sent):
            ran.append(1)
            action()
        return original(executor, groups, queued, shortfalls, **options)

    monkeypatch.setattr(Executor, "_send_groups", send_groups)
    return ran


def on_refresh(monkeypatch: pytest.MonkeyPatch, action: Callable[[], None],
               at: int = 0) -> list[int]:
    """Run `action` when the executor re-reads the slot map to retry (after a call was
    refused for a slot elsewhere) for the at-th time (0: the first); returns the retries
    (their numbers) of every refresh."""
    original = Executor._refresh
    refreshes: list[int] = []

    def refresh(executor: Executor, retry: int) -> None:
        if len(refreshes) == at:
            action()
        refreshes.append(retry)
        original(executor, retry)

    monkeypatch.setattr(Executor, "_refresh", refresh)
    return refreshes


def script_named(name: str) -> Callable[[list[Queued]], bool]:
    return lambda sent: any(item.name == name for item in sent)


def assert_all_ok(results: list[Result[None]]) -> None:
    failed = [(result.key, result.error) for result in results if not result.ok]
    assert not failed, failed


def assert_landed_once(index: Index, keys: list[str], objects: int, state: str) -> None:
    """Each key is there once (in `state`), the shards' exact counters count `objects` in
    all, links hold invariant S as written, and fsck finds nothing once links settle."""
    infos = [index.object_info(key) for key in keys]
    assert [info is not None and info.state for info in infos] == [state] * len(keys)
    assert index.usage().objects == objects
    assert invariant_s(index) == []
    assert_consistent(index)


def assert_stored_once(index: Index, keys: list[str]) -> None:
    """One 'stored' event per object of a one-phase put: no call ran twice."""
    stored = Counter(event.key for shard in index.ctx.all_shards()
                     for event in stream_events(index, shard) if event.type == "stored")
    assert {key: stored[key] for key in keys} == dict.fromkeys(keys, 1)


# -- stage 1: the slot is migrating, its keys partly moved --------------------------------


def busiest_shard(hashes: list[str], also_of: list[str] | None = None) -> str:
    """The shard most of these pages are in (so its slot has several keys to move), of
    those that hold one of `also_of` too (the batch's pages)."""
    wanted = None if also_of is None else set(map(default_shard, also_of))
    counts = Counter(shard for shard in map(default_shard, hashes)
                     if wanted is None or shard in wanted)
    return counts.most_common(1)[0][0]


def migrating(cluster: LocalCluster, index: Index, shard: str,
              moves: list[SlotMove]) -> SlotMove:
    """Open a move of the shard's slot to another master and migrate every second key of
    it: the stats key and some node keys are on each side."""
    move = cluster.move_slot(slot_of(index, shard), other_master(cluster, index, shard))
    moves.append(move)
    move.open()
    keys = sorted(move.keys())
    assert len(keys) >= 4, keys
    move.move_keys(keys[::2])
    return move


def test_reads_follow_ask_while_a_slot_migrates(
        redis_cluster: LocalCluster, index: Index, moves: list[SlotMove],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Read-only commands of a migrating slot are answered at once: a key gone from the
    source is read on the target after ASKING, without waiting for the move to end."""
    chain = pages("read", 48)
    shard = busiest_shard(chain)
    assert_all_ok(index.batch_put(chain_items(chain)))
    keys = [f"{h}_0_k" for h in chain]
    move = migrating(redis_cluster, index, shard, moves)
    refreshes = on_refresh(monkeypatch, lambda: None)
    assert index.batch_is_exist(keys + [f"{page('absent')}_0_k"]) == [True] * 48 + [False]
    assert index.match_prefix(chain) == 48
    assert index.get_keys_by_prefix(chain[0]) == [keys[0]]
    assert [index.object_info(key) is not None for key in keys] == [True] * 48
    assert not move.closed and refreshes == []  # answered while it migrates, no retry
    move.close()
    assert index.batch_is_exist(keys) == [True] * 48


@pytest.mark.parametrize("ends_at", [0, 1], ids=["first-retry", "second-retry"])
@pytest.mark.parametrize("one_phase", [True, False], ids=["put", "put_start-chain"])
def test_a_batch_meeting_a_migrating_slot_lands_once_the_move_ends(
        redis_cluster: LocalCluster, index: Index, moves: list[SlotMove],
        monkeypatch: pytest.MonkeyPatch, one_phase: bool,
        ends_at: int) -> None:
    """The migrating shard's calls are refused (ASK, TRYAGAIN, "non local key": nothing of
    them ran); the executor re-reads the slot map and sends them again, split per shard,
    pausing while the slot still migrates. Here the move ends at the first retry (the
    node's call split), or the second (the shard's own call met the migrating slot too),
    so the whole batch lands, each item once."""
    chain = pages(f"mid-{one_phase}-{ends_at}", 64)
    first, second = chain[:32], chain[32:]
    shard = busiest_shard(first, second)
    assert_all_ok(index.batch_put(chain_items(first)))
    move = migrating(redis_cluster, index, shard, moves)
    refreshes = on_refresh(monkeypatch, move.close, at=ends_at)
    items = chain_items(second, parent=first[-1])
    assert any(default_shard(h) == shard for h in second)
    results = index.batch_put(items) if one_phase else index.batch_put_start(items)
    assert_all_ok(results)
    assert move.closed and len(refreshes) > ends_at, "the batch never met the migration"
    keys = [f"{h}_0_k" for h in chain]
    assert_landed_once(index, keys[:32], 64, "complete")
    assert_landed_once(index, keys[32:], 64, "complete" if one_phase else "processing")
    if one_phase:
        assert_stored_once(index, keys)


def test_a_batch_refused_until_its_retries_end_wrote_nothing_of_the_migrating_shard(
        redis_cluster: LocalCluster, cluster_url: str, moves: list[SlotMove]) -> None:
    """A move that outlasts the retries: the batch raises ClusterUnavailable (a library
    error) and the migrating shard holds nothing of it; sent again once the move ended,
    each item lands once, the ones that landed the first time answered as such."""
    index = Index.from_url(cluster_url, namespace=NAMESPACE, cluster_retries=2,
                           cluster_retry_backoff_ms=1)
    chain = pages("stuck", 64)
    shard = busiest_shard(chain[:32], chain[32:])
    assert_all_ok(index.batch_put(chain_items(chain[:32])))
    move = migrating(redis_cluster, index, shard, moves)
    # the put's confirmed links leave their pending entries for the client's next batch
    # to drop (a deferred cleanup): a read takes them now, so what follows is the batch's
    assert index.batch_is_exist([f"{h}_0_k" for h in chain[:32]]) == [True] * 32
    before = {key: value for key, value in snapshot(index).items()
              if key.startswith(f"{NAMESPACE}:{{{shard}}}:")}
    items = [(f"{h}_0_k", 1, None) for h in chain[32:]]
    assert any(default_shard(h) == shard for h in chain[32:])
    with pytest.raises(ClusterUnavailable):
        index.batch_put(items)
    after = {key: value for key, value in snapshot(index).items()
             if key.startswith(f"{NAMESPACE}:{{{shard}}}:")}
    assert after == before  # on both nodes: nothing of the refused calls was written
    move.close()
    assert_all_ok(index.batch_put(items))
    keys = [f"{h}_0_k" for h in chain]
    assert_landed_once(index, keys, 64, "complete")
    assert_stored_once(index, keys)


PLANTED = "planted"


@pytest.mark.parametrize("emptied", ["leaves", "fences"])
def test_a_call_that_empties_a_key_and_writes_it_again_runs_whole_on_a_migrating_slot(
        redis_cluster: LocalCluster, index: Index, moves: list[SlotMove], emptied: str) -> None:
    """On the source of a migrating slot a script runs only if every key it touches is
    still there; but a key it empties (its last member removed) is gone for its next
    command, which Redis then refuses ("non local key") half-way through the call. A
    delete empties the leaf index (its only leaf goes, the parent comes in) or the fences
    (an expired one trimmed, the deleted child's own added): each key must be written in
    an order that never leaves it empty before its last write. Here every key of the
    shard is on the source (the link entries planted so that the call may run at all)."""
    parent = page(f"empties-{emptied}")
    shard = default_shard(parent)
    same = [h for h in pages(f"empties-{emptied}", 400) if default_shard(h) == shard]
    child, soft, other_leaf = same[:3]
    index.put(f"{parent}_0_k", 1)
    index.put(f"{child}_0_k", 1, parent_block_hash=parent)
    index.put(f"{soft}_0_k", 1, soft_pin=True)  # the soft leaf index exists
    keys = index.ctx.schema.shard_keys(shard)
    client = index.client
    if emptied == "fences":  # the leaf index keeps a leaf; the fences only an expired one
        index.put(f"{other_leaf}_0_k", 1)
        client.zadd(keys.fences, {page(PLANTED): 1})
    else:  # the child is the only leaf; a live fence stays
        client.zadd(keys.fences, {page(PLANTED): index.redis_time_ms()})
    client.hincrby(keys.stats, "fences", 1)
    client.zadd(keys.outbox, {PLANTED: 1})
    client.zadd(keys.pending, {PLANTED: 1})
    assert all(client.exists(getattr(keys, name)) for name in SHARD_KEY_NAMES)
    move = redis_cluster.move_slot(slot_of(index, shard), other_master(redis_cluster, index,
                                                                         shard))
    moves.append(move)
    move.open()  # nothing moved yet: every key of the shard is on the source
    index.remove(f"{child}_0_k")
    assert index.object_info(f"{child}_0_k") is None
    move.close()
    client.zrem(keys.outbox, PLANTED)
    client.zrem(keys.pending, PLANTED)
    assert client.zscore(keys.leaves, parent) is not None
    objects = 3 if emptied == "fences" else 2
    assert_landed_once(index, [f"{parent}_0_k", f"{soft}_0_k"], objects, "complete")


# -- stage 2: the slot moved completely after the client read its slot map -----------------


@pytest.mark.parametrize("which", ["routing", "other"])
def test_a_slot_moved_after_the_map_was_read_is_sent_again_per_shard(
        redis_cluster: LocalCluster, index: Index, moves: list[SlotMove],
        monkeypatch: pytest.MonkeyPatch, script_calls: ScriptCalls, which: str) -> None:
    """One call per master; one shard of a master's call moves away just before the call
    is sent. The shard whose key routes the call: MOVED; another shard of that call:
    "non local key" at its first key, before any write. Either way the call is sent again
    as calls of one shard each, which land where their shard is now."""
    chain = pages(f"moved-{which}", 64)
    owner = {h: redis_cluster.owner(slot_of(index, default_shard(h))).port for h in chain}
    node = owner[chain[0]]
    shards = list(dict.fromkeys(default_shard(h) for h in chain if owner[h] == node))
    assert len(shards) >= 2
    shard = shards[0] if which == "routing" else shards[1]
    move = redis_cluster.move_slot(slot_of(index, shard), other_master(redis_cluster, index,
                                                                         shard))
    moves.append(move)
    ran = before_send(monkeypatch, script_named("put"), move.run)
    items = [(f"{h}_0_k", 1, None) for h in chain]
    assert_all_ok(index.batch_put(items))
    assert ran and move.closed
    keys = [f"{h}_0_k" for h in chain]
    assert_landed_once(index, keys, 64, "complete")
    assert_stored_once(index, keys)
    assert any(call.script == "put" and call.node != f"127.0.0.1:{node}"
               and slot_of(index, shard) in call.slots for call in script_calls.calls)


# -- stage 3: the slot moved between the two steps of a put --------------------------------


def cross_master_pair(cluster: LocalCluster, index: Index, name: str) -> tuple[str, str]:
    """A parent page and a child page whose shards are on different masters."""
    parent = page(f"{name}-parent")
    home = cluster.owner(slot_of(index, default_shard(parent))).port
    child = next(h for h in pages(name, 100)
                 if cluster.owner(slot_of(index, default_shard(h))).port != home)
    return parent, child


@pytest.mark.parametrize("moved", ["child", "parent", "child-half"])
def test_a_slot_moved_between_the_steps_of_a_put_lands_it_once(
        redis_cluster: LocalCluster, index: Index, moves: list[SlotMove],
        monkeypatch: pytest.MonkeyPatch, moved: str) -> None:
    """A put whose parent is on another master: step 1 lists the child in the parent's
    shard, step 2 writes the child in its own. Between them the child's slot moves (whole,
    or half-way, ending at the executor's pause), or the parent's does (its pending link
    moves with it and is confirmed where it lands)."""
    parent, child = cross_master_pair(redis_cluster, index, f"steps-{moved}")
    index.put(f"{parent}_0_k", 1)
    index.put(f"{child}_1_k", 1)  # the child's shard has keys to move
    shard = default_shard(parent if moved == "parent" else child)
    move = redis_cluster.move_slot(slot_of(index, shard), other_master(redis_cluster, index,
                                                                         shard))
    moves.append(move)
    if moved == "child-half":
        def half() -> None:
            move.open()
            move.move_keys(sorted(move.keys())[::2])
        on_refresh(monkeypatch, move.close)
        ran = before_send(monkeypatch, script_named("put"), half)
    else:
        ran = before_send(monkeypatch, script_named("put"), move.run)
    others = [(f"{h}_0_k", 1, parent) for h in pages(f"steps-{moved}-more", 8)]
    results = index.batch_put_start([(f"{child}_0_k", 5, parent), *others])
    assert_all_ok(results)
    assert ran and move.closed
    child_node, parent_node = index.get_node(child), index.get_node(parent)
    assert child_node is not None and child_node.parent == parent
    assert parent_node is not None and child in parent_node.children
    keys = [f"{child}_0_k", *(key for key, _, _ in others)]
    assert_landed_once(index, keys, 3 + len(others), "processing")
