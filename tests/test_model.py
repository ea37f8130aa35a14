"""Model-based test: random sequences of every operation against real Redis and a small
pure-Python reference model. After every step the two agree and fsck is clean."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from helpers import page
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

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
)
from mooncake_redis.fsck import check

HASHES = [page(f"model-{i}") for i in range(5)]
KEYS = [f"{h}_{rank}_k" for h in HASHES for rank in range(2)]
STEPS = {"count": 0}


@dataclass
class Obj:
    size: int
    soft_pin: bool
    hard_pin: bool
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

    def ancestors(self, start: str) -> list[str]:
        seen, cursor = [], start
        while cursor is not None and cursor in self.nodes and cursor not in seen:
            seen.append(cursor)
            cursor = self.nodes[cursor].parent
        return seen

    def link_refusal(self, prefix: str, parent: str | None) -> type[MooncakeRedisError] | None:
        if parent is None:
            return None
        if parent == prefix:
            return CycleDetected
        node = self.nodes.get(prefix)
        if node is not None and node.parent not in (None, parent):
            return ParentConflict
        if node is not None and node.children and prefix in self.ancestors(parent):
            return CycleDetected
        return None

    def attach(self, prefix: str, parent: str | None) -> None:
        node = self.nodes.setdefault(prefix, Node())
        if parent is not None:
            node.parent = node.parent or parent
            self.nodes.setdefault(parent, Node()).children.add(prefix)

    def delete(self, key: str) -> None:
        del self.objects[key]
        prefix = key[:64]
        self.nodes[prefix].keys.discard(key)
        self.settle(prefix)

    def settle(self, prefix: str | None) -> None:
        while prefix is not None and prefix in self.nodes:
            node = self.nodes[prefix]
            if node.keys or node.children:
                return
            del self.nodes[prefix]
            if node.parent is not None and node.parent in self.nodes:
                self.nodes[node.parent].children.discard(prefix)
            prefix = node.parent

    def evict_all(self, soft_allowed: bool) -> None:
        def evictable(node: Node) -> bool:
            objects = [self.objects[k] for k in node.keys]
            return bool(objects) and not node.children and all(
                o.state == "complete" and not o.leased and not o.hard_pin
                and (soft_allowed or not o.soft_pin) for o in objects)

        while True:
            leaves = [h for h, n in self.nodes.items() if evictable(n)]
            if not leaves:
                return
            for leaf in leaves:
                for key in list(self.nodes[leaf].keys):
                    self.delete(key)


class StoreMachine(RuleBasedStateMachine):
    url = ""

    def __init__(self) -> None:
        super().__init__()
        self.index = Index.from_url(self.url, namespace=f"model-{uuid.uuid4().hex[:8]}",
                                    max_rounds_per_job=1000, lease_ttl_ms=600_000)
        self.model = Model()

    def expect(self, refusal: type[MooncakeRedisError] | None, call) -> bool:  # type: ignore[no-untyped-def]
        STEPS["count"] += 1
        if refusal is None:
            call()
            return True
        with pytest.raises(refusal):
            call()
        return False

    @rule(key=st.sampled_from(KEYS), size=st.integers(0, 100),
          parent=st.none() | st.sampled_from(HASHES), soft=st.booleans(),
          hard=st.sampled_from([False, False, False, True]))
    def put_start(self, key: str, size: int, parent: str | None, soft: bool, hard: bool) -> None:
        prefix = key[:64]
        # the API's order: argument checks (a self-parent) first, then the stored state
        refusal = CycleDetected if parent == prefix else \
            ObjectAlreadyExists if key in self.model.objects else \
            self.model.link_refusal(prefix, parent)
        if self.expect(refusal, lambda: self.index.put_start(key, size, parent, soft, hard)):
            self.model.attach(prefix, parent)
            self.model.nodes[prefix].keys.add(key)
            self.model.objects[key] = Obj(size, soft, hard)

    @rule(key=st.sampled_from(KEYS))
    def put_end(self, key: str) -> None:
        obj = self.model.objects.get(key)
        refusal = ObjectNotFound if obj is None else \
            InvalidObjectState if obj.state != "processing" else None
        if self.expect(refusal, lambda: self.index.put_end(key)):
            self.model.objects[key].state = "complete"

    @rule(key=st.sampled_from(KEYS))
    def put_revoke(self, key: str) -> None:
        obj = self.model.objects.get(key)
        refusal = ObjectNotFound if obj is None else \
            InvalidObjectState if obj.state != "processing" else None
        if self.expect(refusal, lambda: self.index.put_revoke(key)):
            self.model.delete(key)

    @rule(key=st.sampled_from(KEYS))
    def get(self, key: str) -> None:
        obj = self.model.objects.get(key)
        if obj is not None and obj.state == "processing":
            self.expect(ObjectNotReady, lambda: self.index.get(key))
            return
        STEPS["count"] += 1
        info = self.index.get(key)
        assert (info is None) == (obj is None)
        if obj is not None:
            obj.leased = True

    @rule(key=st.sampled_from(KEYS), force=st.booleans())
    def remove(self, key: str, force: bool) -> None:
        obj = self.model.objects.get(key)
        refusal = ObjectNotFound if obj is None else None
        if obj is not None and not force:
            refusal = InvalidObjectState if obj.state == "processing" else \
                ObjectLeased if obj.leased else None
        if self.expect(refusal, lambda: self.index.remove(key, force=force)):
            self.model.delete(key)

    @rule(prefix=st.sampled_from(HASHES), parent=st.none() | st.sampled_from(HASHES))
    def register(self, prefix: str, parent: str | None) -> None:
        keys = sorted(k for k in self.model.objects if k.startswith(prefix))
        refusal = self.model.link_refusal(prefix, parent)
        if refusal is None and not keys and prefix not in self.model.nodes:
            refusal = InvalidArgument
        if self.expect(refusal, lambda: self.index.register_radix_tree_node(prefix, parent, keys)):
            self.model.attach(prefix, parent)

    @rule(soft_allowed=st.booleans())
    def evict(self, soft_allowed: bool) -> None:
        STEPS["count"] += 1
        self.index.set_config(allow_soft_pin_eviction=soft_allowed)
        self.index.evict(target_ratio=0)
        self.model.evict_all(soft_allowed)

    @invariant()
    def redis_agrees_with_the_model(self) -> None:
        for key in KEYS:
            info = self.index.object_info(key)
            obj = self.model.objects.get(key)
            assert (info is None) == (obj is None), key
            if info is not None and obj is not None:
                assert (info.state, info.size, info.soft_pin, info.hard_pin) == (
                    obj.state, obj.size, obj.soft_pin, obj.hard_pin), key
        for prefix in HASHES:
            node, expected = self.index.get_node(prefix), self.model.nodes.get(prefix)
            assert (node is None) == (expected is None), prefix
            if node is not None and expected is not None:
                assert (node.parent, set(node.children), set(node.keys)) == (
                    expected.parent, expected.children, expected.keys), prefix
        report = check(self.index)
        assert report.clean, report.problems


def test_random_operations_agree_with_the_model(redis_url: str) -> None:
    StoreMachine.url = redis_url
    run_state_machine_as_test(StoreMachine, settings=settings(
        max_examples=60, stateful_step_count=30, deadline=None,
        suppress_health_check=list(HealthCheck)))
    print(f"model test: {STEPS['count']} operations checked against real Redis")
