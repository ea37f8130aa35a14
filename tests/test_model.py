"""Model-based test (v2): random sequences of operations by two writers against real Redis
and a plain Python model of the store and the tree. Per-item batch results, writer
tokens, leases, pins, eviction and the tree: after every step Redis and the model agree
on every object, node, leaf, usage count and match, and fsck finds nothing."""

from __future__ import annotations

import os
import random
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from helpers import page
from hypothesis import HealthCheck, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from mooncake_redis import (
    CycleDetected,
    Index,
    InvalidArgument,
    InvalidObjectState,
    MooncakeRedisError,
    ObjectAlreadyExists,
    ObjectLeased,
    ObjectNotFound,
    ObjectNotReady,
    ParentConflict,
    Result,
)
from mooncake_redis.models import ObjectInfo
from mooncake_redis.operations.fsck import check
from mooncake_redis.store.objects import object_info
from mooncake_redis.values import split_node

HASHES = [page(f"model-{i}") for i in range(5)]
PLAIN = "plain-object"
"""A key that is its own prefix (no hash: never a parent, shard from blake3)."""
KEYS = [f"{h}_{rank}_k" for h in HASHES for rank in range(2)] + [PLAIN]
SHARDS = sorted({h[:2] for h in HASHES} | {Index.from_url("memory://model").ctx.shard(PLAIN)})
WRITERS = 2
OUTCOMES: Counter[str] = Counter()

Refusal = type[MooncakeRedisError] | None


def prefix_of(key: str) -> str:
    return PLAIN if key == PLAIN else key[:64]


@dataclass
class Obj:
    size: int
    soft_pin: bool
    hard_pin: bool
    writer: int
    state: str = "processing"
    leased: bool = False


@dataclass
class Node:
    parent: str | None = None
    keys: set[str] = field(default_factory=set)
    children: set[str] = field(default_factory=set)


class Model:
    """What the store and tree must look like, written as plainly as possible."""

    def __init__(self) -> None:
        self.objects: dict[str, Obj] = {}
        self.nodes: dict[str, Node] = {}

    def reaches(self, start: str | None, target: str,
                intended: dict[str, str] | None = None) -> bool:
        """Whether walking up from `start` (stored parents, else intended ones) meets
        `target`."""
        seen: set[str] = set()
        cursor = start
        while cursor is not None and cursor not in seen:
            if cursor == target:
                return True
            seen.add(cursor)
            node = self.nodes.get(cursor)
            stored = node.parent if node is not None else None
            cursor = stored or (intended or {}).get(cursor)
        return False

    def link_refusal(self, prefix: str, parent: str | None) -> Refusal:
        """Step 2's answer for a link of prefix under parent (self-parents are refused
        before sending)."""
        node = self.nodes.get(prefix)
        if parent is None or node is None:
            return None
        if node.parent is not None:
            return ParentConflict if node.parent != parent else None
        if node.children and self.reaches(parent, prefix):
            return CycleDetected
        return None

    def is_resend(self, writer: int, key: str, size: int, parent: str | None) -> bool:
        """put_start of a key this writer started and has not completed, with the same size
        and parent: a re-send after a lost reply, answered OK, nothing changes."""
        obj = self.objects.get(key)
        node = self.nodes.get(prefix_of(key))
        return (obj is not None and obj.writer == writer and obj.state == "processing"
                and obj.size == size
                and (parent is None or (node is not None and node.parent == parent)))

    def put_refusal(self, writer: int, key: str, size: int, parent: str | None) -> Refusal:
        if self.is_resend(writer, key, size, parent):
            return None
        if key in self.objects:
            return ObjectAlreadyExists
        return self.link_refusal(prefix_of(key), parent)

    def attach(self, prefix: str, parent: str | None) -> None:
        node = self.nodes.setdefault(prefix, Node())
        if parent is not None:
            node.parent = node.parent or parent
            self.nodes.setdefault(parent, Node()).children.add(prefix)

    def put(self, writer: int, key: str, size: int, parent: str | None, soft: bool,
            hard: bool) -> None:
        self.attach(prefix_of(key), parent)
        self.nodes[prefix_of(key)].keys.add(key)
        self.objects[key] = Obj(size, soft, hard, writer)

    def delete(self, key: str) -> None:
        del self.objects[key]
        self.nodes[prefix_of(key)].keys.discard(key)
        self.settle(prefix_of(key))

    def settle(self, prefix: str | None) -> None:
        """An emptied node goes, and so does every ancestor it leaves empty."""
        while prefix is not None and prefix in self.nodes:
            node = self.nodes[prefix]
            if node.keys or node.children:
                return
            del self.nodes[prefix]
            if node.parent is not None and node.parent in self.nodes:
                self.nodes[node.parent].children.discard(prefix)
            prefix = node.parent

    def evictable(self, node: Node, soft_allowed: bool) -> bool:
        objects = [self.objects[k] for k in node.keys]
        return bool(objects) and not node.children and all(
            o.state == "complete" and not o.leased and not o.hard_pin
            and (soft_allowed or not o.soft_pin) for o in objects)

    def evict_all(self, soft_allowed: bool) -> None:
        """Leaf-first, whole nodes, parents once they become leaves, until none is left."""
        while leaves := [h for h, n in self.nodes.items() if self.evictable(n, soft_allowed)]:
            for leaf in leaves:
                for key in list(self.nodes[leaf].keys):
                    self.delete(key)

    def match(self, chain: Sequence[str]) -> int:
        matched = 0
        for prefix in chain:
            node = self.nodes.get(prefix)
            if node is None or not node.keys or any(
                    self.objects[k].state == "processing" for k in node.keys):
                break
            matched += 1
        return matched


def in_batch_refusals(items: Sequence[tuple[str, int, str | None]]) -> list[Refusal]:
    """The documented rules checked before a batch is sent: a node names one parent,
    never itself, and the batch's links form no cycle."""
    parents: dict[str, str] = {}
    refusals: list[Refusal] = []
    for key, _, parent in items:
        child = prefix_of(key)
        refusal: Refusal = None
        if parent is not None:
            if parent == child:
                refusal = CycleDetected
            elif parents.get(child, parent) != parent:
                refusal = ParentConflict
            elif child not in parents and reaches_intended(parents, parent, child):
                refusal = CycleDetected
            else:
                parents[child] = parent
        refusals.append(refusal)
    return refusals


def reaches_intended(parents: dict[str, str], start: str, target: str) -> bool:
    cursor: str | None = start
    for _ in range(len(parents) + 1):
        if cursor is None:
            return False
        if cursor == target:
            return True
        cursor = parents.get(cursor)
    return False


def pages() -> st.SearchStrategy[str | None]:
    return st.none() | st.sampled_from(HASHES)


def item() -> st.SearchStrategy[tuple[str, int, str | None]]:
    return st.tuples(st.sampled_from(KEYS), st.integers(1, 100), pages()).map(
        lambda t: (t[0], t[1], None if t[0] == PLAIN else t[2]))


def has_objects(machine: StoreMachine) -> bool:
    return bool(machine.model.objects)


class StoreMachine(RuleBasedStateMachine):
    url = ""

    def __init__(self) -> None:
        super().__init__()
        namespace = f"model-{uuid.uuid4().hex[:8]}"
        self.writers = [Index.from_url(self.url, namespace=namespace, lease_ttl_ms=600_000,
                                       max_rounds_per_job=1000) for _ in range(WRITERS)]
        self.index = self.writers[0]
        self.model = Model()

    def expect(self, name: str, refusal: Refusal, call: Callable[[], Any]) -> bool:
        """Run the call; it must succeed, or raise exactly the expected refusal."""
        try:
            call()
        except MooncakeRedisError as error:
            assert type(error) is refusal, f"{name}: expected {refusal}, got {error!r}"
            OUTCOMES[f"{name} {type(error).__name__}"] += 1
            return False
        assert refusal is None, f"{name}: expected {refusal.__name__}, it succeeded"
        OUTCOMES[f"{name} ok"] += 1
        return True

    # -- objects -------------------------------------------------------------------------

    @rule(writer=st.integers(0, WRITERS - 1), entry=item(), soft=st.booleans(),
          hard=st.sampled_from([False, False, False, True]))
    def put_start(self, writer: int, entry: tuple[str, int, str | None], soft: bool,
                  hard: bool) -> None:
        key, size, parent = entry
        refusal = in_batch_refusals([entry])[0] or self.model.put_refusal(writer, key, size,
                                                                          parent)
        resend = self.model.is_resend(writer, key, size, parent)
        call = lambda: self.writers[writer].put_start(key, size, parent, soft, hard)  # noqa: E731
        if self.expect("put_start", refusal, call) and not resend:
            self.model.put(writer, key, size, parent, soft, hard)

    @rule(writer=st.integers(0, WRITERS - 1),
          items=st.lists(item(), min_size=2, max_size=4, unique_by=lambda t: t[0]),
          soft=st.booleans())
    def batch_put_start(self, writer: int, items: list[tuple[str, int, str | None]],
                        soft: bool) -> None:
        results = self.writers[writer].batch_put_start(items, soft_pin=soft)
        assert [r.key for r in results] == [key for key, _, _ in items]
        self.check_batch(writer, items, results, soft)

    def check_batch(self, writer: int, items: list[tuple[str, int, str | None]],
                    results: list[Result[None]], soft: bool) -> None:
        """Each item answers on its own: in-batch refusals exactly; the rest as the model
        answers them in order, except that a cycle refusal may also come from the links
        other items of the batch wrote or meant to write (the walk sees them)."""
        model = self.model
        before = in_batch_refusals(items)
        cycle_checks: list[tuple[str, str]] = []
        for (key, size, parent), refused, result in zip(items, before, results):
            got = None if result.ok else type(result.error)
            OUTCOMES[f"batch item {got.__name__ if got else 'ok'}"] += 1
            if refused is not None:
                assert got is refused, (key, refused, result)
                continue
            expected = model.put_refusal(writer, key, size, parent)
            if got is CycleDetected and expected in (None, CycleDetected):
                cycle_checks.append((prefix_of(key), parent or ""))
                continue
            assert got is expected, (key, expected, result)
            if expected is None and not model.is_resend(writer, key, size, parent):
                model.put(writer, key, size, parent, soft, False)
        intended = {prefix_of(key): parent for (key, _, parent), result in zip(items, results)
                    if parent is not None and not result.ok}
        for child, parent in cycle_checks:
            assert model.reaches(parent, child, intended), \
                f"{child} under {parent} was refused as a cycle, but it closes none"

    def stored_key(self, data: st.DataObject) -> tuple[str, Obj]:
        key = data.draw(st.sampled_from(sorted(self.model.objects)))
        return key, self.model.objects[key]

    def some_writer(self, data: st.DataObject, obj: Obj) -> int:
        """Mostly the object's own writer."""
        return data.draw(st.sampled_from([obj.writer] * 3 + list(range(WRITERS))))

    @precondition(has_objects)
    @rule(data=st.data())
    def put_end(self, data: st.DataObject) -> None:
        key, obj = self.stored_key(data)
        writer = self.some_writer(data, obj)
        refusal = InvalidObjectState if obj.writer != writer else None
        if self.expect("put_end", refusal, lambda: self.writers[writer].put_end(key)):
            obj.state = "complete"  # again if complete already: a re-send

    @precondition(has_objects)
    @rule(data=st.data())
    def put_revoke(self, data: st.DataObject) -> None:
        key, obj = self.stored_key(data)
        writer = self.some_writer(data, obj)
        refusal = InvalidObjectState if obj.state != "processing" or obj.writer != writer \
            else None
        if self.expect("put_revoke", refusal, lambda: self.writers[writer].put_revoke(key)):
            self.model.delete(key)

    @precondition(has_objects)
    @rule(data=st.data())
    def get(self, data: st.DataObject) -> None:
        key, obj = self.stored_key(data)
        if obj.state == "processing":
            self.expect("get", ObjectNotReady, lambda: self.index.get(key))
            return
        info = self.index.get(key)
        assert info is not None and info.lease_ms > self.index.ctx.redis_time_ms(), key
        OUTCOMES["get lease"] += 1
        obj.leased = True

    @precondition(has_objects)
    @rule(data=st.data(), force=st.booleans())
    def remove(self, data: st.DataObject, force: bool) -> None:
        key, obj = self.stored_key(data)
        refusal = None if force else InvalidObjectState if obj.state == "processing" else \
            ObjectLeased if obj.leased else None
        if self.expect("remove", refusal, lambda: self.index.remove(key, force=force)):
            self.model.delete(key)

    @precondition(has_objects)
    @rule(writer=st.integers(0, WRITERS - 1), key=st.sampled_from(KEYS),
          name=st.sampled_from(["put_end", "put_revoke", "remove", "get"]))
    def call_on_an_absent_key(self, writer: int, key: str, name: str) -> None:
        if key in self.model.objects:
            return
        if name == "get":
            assert self.writers[writer].get(key) is None
            return
        self.expect(name, ObjectNotFound, lambda: getattr(self.writers[writer], name)(key))

    # -- tree and eviction ---------------------------------------------------------------

    @precondition(lambda machine: bool(machine.model.nodes))
    @rule(data=st.data(), parent=pages())
    def register(self, data: st.DataObject, parent: str | None) -> None:
        """Mostly a node that exists, with keys of it that are stored (rank 2 never is)."""
        prefix = data.draw(st.sampled_from(
            [h for h in HASHES if h in self.model.nodes] * 8 + HASHES))
        stored = sorted(k for k in self.model.objects if prefix_of(k) == prefix)
        keys = sorted(data.draw(st.sets(st.sampled_from([*stored, f"{prefix}_2_k"]),
                                        max_size=2)))
        node = self.model.nodes.get(prefix)
        refusal: Refusal = CycleDetected if parent == prefix else \
            ObjectNotFound if any(k not in self.model.objects for k in keys) else \
            InvalidArgument if node is None else self.model.link_refusal(prefix, parent)
        call = lambda: self.index.register_radix_tree_node(prefix, parent, keys)  # noqa: E731
        if self.expect("register", refusal, call):
            self.model.attach(prefix, parent)

    @precondition(lambda machine: any(machine.model.evictable(node, True)
                                      for node in machine.model.nodes.values()))
    @rule(soft_allowed=st.booleans())
    def evict(self, soft_allowed: bool) -> None:
        self.index.set_config(allow_soft_pin_eviction=soft_allowed)
        report = self.index.evict(target_ratio=0)
        before = len(self.model.objects)
        self.model.evict_all(soft_allowed)
        assert report.objects == before - len(self.model.objects), report
        OUTCOMES["evict"] += 1

    # -- what must agree after every step ------------------------------------------------

    @invariant()
    def redis_agrees_with_the_model(self) -> None:
        model, index = self.model, self.index
        tokens = [writer.ctx.token for writer in self.writers]
        stored = self.stored_objects()
        assert set(stored) == set(model.objects)
        for key, info in stored.items():
            obj = model.objects[key]
            assert (info.state, info.size, info.soft_pin, info.hard_pin, info.token) == (
                obj.state, obj.size, obj.soft_pin, obj.hard_pin, tokens[obj.writer]), key
        assert index.batch_is_exist(KEYS) == [
            key in model.objects and model.objects[key].state == "complete" for key in KEYS]
        for prefix in HASHES:
            node, expected = index.get_node(prefix), model.nodes.get(prefix)
            assert (node is None) == (expected is None), prefix
            if node is not None and expected is not None:
                assert (node.parent, set(node.children), set(node.keys)) == (
                    expected.parent, expected.children, expected.keys), prefix
                is_leaf = bool(expected.keys) and not expected.children
                assert (node.eviction_score is not None) == is_leaf, prefix
        assert index.match_prefix(HASHES) == model.match(HASHES)
        for writer in self.writers:
            writer.close()
        report = check(index.ctx, shards=SHARDS)  # counters, leaf index, stats, links
        assert report.clean, report.problems

    def stored_objects(self) -> dict[str, ObjectInfo]:
        """Every object in the nodes of the model's prefixes, read in one round trip."""
        batch = self.index.ctx.batch()
        prefixes = [*HASHES, PLAIN]
        for prefix in prefixes:
            batch.command("HGETALL", self.index.ctx.schema.node(prefix))
        found = {}
        for prefix, fields in zip(prefixes, batch.execute()):
            for suffix, value in split_node(fields).objects.items():
                info = object_info(prefix + suffix, prefix, value)
                assert info is not None, value
                found[prefix + suffix] = info
        return found

    def teardown(self) -> None:
        usage = self.index.usage()
        assert (usage.used_bytes, usage.objects, usage.nodes) == (
            sum(o.size for o in self.model.objects.values()), len(self.model.objects),
            len(self.model.nodes))


SEED_VARIABLE = "MOONCAKE_REDIS_MODEL_SEED"
"""Replays a run: the test prints the seed it ran with (shown with a failure)."""


def test_random_operations_agree_with_the_model(redis_url: str) -> None:
    """Seeded: every run prints MOONCAKE_REDIS_MODEL_SEED=<n>; setting that variable runs
    the same operations again (hypothesis draws them from the seed; its example database
    is off, so nothing but the seed decides a run). A failure also shows hypothesis's own
    shrunk program of steps."""
    StoreMachine.url = redis_url
    OUTCOMES.clear()
    chosen = int(os.environ.get(SEED_VARIABLE) or random.SystemRandom().randrange(2**32))
    print(f"{SEED_VARIABLE}={chosen}")

    @seed(chosen)
    def machine() -> StoreMachine:
        return StoreMachine()

    run_state_machine_as_test(machine, settings=settings(
        max_examples=30, stateful_step_count=30, deadline=None, database=None,
        suppress_health_check=list(HealthCheck)))
    print(f"\nmodel test: {sum(OUTCOMES.values())} operations checked against real Redis: "
          + ", ".join(f"{name} {count}" for name, count in sorted(OUTCOMES.items())))
