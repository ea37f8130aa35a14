"""Every script call the executors of a test send to Redis Cluster nodes, recorded with the
node it went to and its reply, to check the rule "every script call touches keys of one
Redis node" (DESIGN v4 item 1) on a real cluster.

A call's keys are its KEYS and, for a shard script, the keys it builds from the shard
tags its one packed argument carries (lua/_lib.lua): the shards the node serves (A[7],
which a cascade may reach) and the shard each item names (a script of one shard: its
first own argument). Which slots those are is read
off the packed argument as sent, not off the client's objects. Redis itself refuses a
script that touches a key its node does not serve ("non local key"); this checks that the
client never asks it to.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from redis.crc import key_slot

from mooncake_redis.executor import Executor, Queued, slot_moved
from mooncake_redis.layouts import HEADER_WIDTH


@dataclass(frozen=True)
class SentCall:
    script: str
    node: str
    """host:port of the node the call was sent to."""
    slots: frozenset[int]
    """The slots of every key the call names or may build."""
    owners: frozenset[str]
    """The nodes serving those slots in the sending client's slot map when it was sent."""
    reply: Any


def named_slots(item: Queued) -> frozenset[int]:
    """The slots of the keys a script call names (KEYS) or builds from the tags its packed
    argument carries."""
    args = item.args
    numkeys = int(args[2])
    keys = [str(key) for key in args[3:3 + numkeys]]
    call = item.call
    if call is not None:
        packed = json.loads(args[3 + numkeys])
        namespace, served = packed[0], packed[6]
        tags = set(served.split(",")) if served else set()
        own = packed[HEADER_WIDTH:HEADER_WIDTH + len(call.script_args)]
        if call.layout.per_shard:  # a script of one shard: its tag is its first argument
            tags.add(own[0])
        else:  # each item starts with its shard's tag
            fields = packed[HEADER_WIDTH + len(own):]
            tags |= {fields[start] for start, _ in call.layout.spans(fields)}
        if call.layout.any_shard and not served:
            raise AssertionError(f"{item.name}: a cascade into any shard, sent to a cluster "
                                 "node without the shards it serves")
        keys += [f"{namespace}:{{{tag}}}:stats" for tag in tags]
    return frozenset(key_slot(key.encode()) for key in keys)


class ScriptCalls:
    """Records every EVALSHA an Executor sends to a cluster node (install())."""

    def __init__(self) -> None:
        self.calls: list[SentCall] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> ScriptCalls:
        original = Executor._send_groups

        def send_groups(executor: Executor, groups: Any, queued: Any, shortfalls: Any,
                        **options: Any) -> Any:
            replies = original(executor, groups, queued, shortfalls, **options)
            if executor.cluster:
                slot_map = executor._client.nodes_manager
                for (node, group), (got, *_) in zip(groups, replies):
                    for position, reply in zip(group, got):
                        item = queued[position]
                        if node is None or item.args[0] != "EVALSHA":
                            continue
                        slots = named_slots(item)
                        owners = frozenset(slot_map.get_node_from_slot(slot).name
                                           for slot in slots)
                        self.calls.append(SentCall(item.name, node.name, slots, owners, reply))
            return replies

        monkeypatch.setattr(Executor, "_send_groups", send_groups)
        return self

    def scripts(self) -> set[str]:
        return {call.script for call in self.calls}

    def assert_one_node_each(self) -> None:
        """Each call named keys of the one node it was sent to, as the client's slot map
        had it when sending (a map a slot move made stale is the cluster's to correct:
        MOVED, ASK, "non local key", and nothing ran)."""
        wrong = [call for call in self.calls if call.owners != {call.node}]
        assert not wrong, wrong[:5]

    def assert_served_where_sent(self, owner_of: dict[int, str]) -> None:
        """Each call's keys are served by the node it went to, as the cluster has its slots
        (`owner_of`: slot -> host:port), and no call was refused for a slot elsewhere."""
        wrong = [call for call in self.calls
                 if {owner_of[slot] for slot in call.slots} != {call.node}
                 or slot_moved(call.reply)]
        assert not wrong, wrong[:5]
