"""The Lua scripts of lua/ and the one way to build a call of a shard script.

A shard script takes one packed argument (the common header of lua/_lib.lua, its own
arguments, its items: layouts.py) and gets the parts of lua/_lib.lua it names (its
'-- uses:' line; all of them without one). Each module that drives one builds its calls
through NodeCalls: one call per Redis node for the shards that node serves (DESIGN v4,
"calls per node"), whose items each name their shard; a call Redis Cluster refuses whole
(a slot moved) is sent again shard by shard (NodeCall.split, run by the executor).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from importlib import resources
from typing import Any, Generic, Protocol, TypeVar

from .executor import Batch, LuaScript, Queued
from .layouts import LAYOUTS

T = TypeVar("T")

LIBRARY = "_lib"
SHARD_SCRIPTS = (
    "link", "put", "register", "put_end", "grant_lease", "delete", "evict", "unlink",
    "resolve", "repair_node", "recount_shard", "trim_fences", "invalidate", "scrub",
)
OTHER_SCRIPTS = ("lock_token", "segment", "segment_flag", "read_events", "lend")
SCRIPT_NAMES = SHARD_SCRIPTS + OTHER_SCRIPTS

RETRY_SAFE = frozenset({"link", "put", "register", "put_end", "grant_lease", "unlink",
                        "resolve", "lock_token", "trim_fences", "invalidate", "segment_flag"})
"""Scripts whose second run leaves the same state and gives an answer the caller accepts:
link and unlink compare epochs, put/put_end/register recognise the writer's token,
a lease only grows, resolve re-checks, invalidate finds nothing left to drop (its counts
then read low), segment_flag sets or clears the same flag again. delete, evict and the
repairs are not: a second run answers differently (NOT_FOUND, skipped), so a lost reply
raises OutcomeUnknown. So does read_events: what a lost reply delivered waits in the
group's pending list, and the consumer reads that list again rather than the next
entries (events.py)."""


def read_lua(name: str) -> str:
    return resources.files("mooncake_redis.lua").joinpath(f"{name}.lua").read_text("utf-8")


PART = re.compile(r"^-- @part (\w+)(?:: needs ([\w ]+))?$", re.MULTILINE)
USES = re.compile(r"^-- uses:([\w ]*)$", re.MULTILINE)


def library_parts() -> tuple[str, dict[str, tuple[list[str], str]]]:
    """The library's opening comments, and its parts in file order: name -> (the parts it
    needs, its text)."""
    text = read_lua(LIBRARY)
    marks = list(PART.finditer(text))
    parts = {}
    for mark, end in zip(marks, [m.start() for m in marks[1:]] + [len(text)]):
        parts[mark.group(1)] = ((mark.group(2) or "").split(), text[mark.start():end])
    return text[:marks[0].start()] if marks else text, parts


def _with_needs(names: list[str], parts: dict[str, tuple[list[str], str]]) -> set[str]:
    """The parts named and every part they need."""
    wanted: set[str] = set()
    todo = list(names)
    while todo:
        part = todo.pop()
        if part not in wanted:
            wanted.add(part)
            todo.extend(parts[part][0])
    return wanted


def _prelude_parts(body: str, parts: dict[str, tuple[list[str], str]]) -> set[str]:
    uses = USES.search(body)
    return set(parts) if uses is None else _with_needs(uses.group(1).split(), parts)


def library_for(body: str) -> str:
    """The helpers a script gets: the parts its '-- uses:' line names and those they need,
    in the library's order; every part for a script without one, nothing for a script
    whose line names none."""
    opening, parts = library_parts()
    wanted = _prelude_parts(body, parts)
    if not wanted:
        return ""
    return opening + "".join(text for name, (_, text) in parts.items() if name in wanted)


def build_script(name: str, shebang: bool = True) -> LuaScript:
    """The script with the helpers it uses prepended (library_for). Its first line may be
    a Redis 7 shebang: `allow-cross-slot-keys` on every shard script (a call works in the
    shards of one Redis Cluster node, several slots), `allow-oom` on scripts that free
    memory (they must run when Redis is at maxmemory; without it Redis refuses the whole
    script up front there, never half-way through). It stays first. shebang=False drops
    it (fakeredis 2.41 reads no shebang)."""
    body = read_lua(name)
    first, _, rest = body.partition("\n")
    header = ""
    if first.startswith("#!lua"):
        header, body = (first + "\n" if shebang else ""), rest
    source = header + library_for(body) + "\n" + body
    return LuaScript(name, source, hashlib.sha1(source.encode()).hexdigest())


class Scripts:
    """Every script, loaded once per process and called by EVALSHA."""

    def __init__(self, shebang: bool = True) -> None:
        self.all = [build_script(name, shebang) for name in SCRIPT_NAMES]
        self.by_name = {script.name: script for script in self.all}

    def __getitem__(self, name: str) -> LuaScript:
        return self.by_name[name]


class Placement(Protocol):
    """Where shards live, as the calls need it (Context is one): the header of a call for
    the shards of one Redis node, a key routing to a shard's node, and which node serves a
    shard now."""

    def header(self, served: str) -> list[Any]: ...

    def routing_key(self, shard: str) -> str: ...

    def node_of(self, shard: str) -> str: ...

    def served(self, node: str) -> str: ...


class NodeCall:
    """One call of a shard script: for the shards one Redis node serves (a script of
    several shards: every item names its shard), or for one shard (`per_shard`). The
    common header, the script's own arguments and the items go as ONE JSON argument,
    checked against the script's layout (layouts.py) when the call is made and queued."""

    def __init__(self, script: LuaScript, placement: Placement, served: str,
                 routing_shard: str | None, script_args: Sequence[Any]):
        self.script = script
        self.layout = LAYOUTS[script.name]
        self.placement = placement
        self.served = served
        self.routing_shard = routing_shard
        self.script_args = list(script_args)
        problem = self.layout.problem(placement.header(served), self.script_args)
        if problem:
            raise ValueError(f"script {script.name}: {problem} (layouts.py)")
        self.read_only = False
        self.fields: list[Any] = []
        """The items, flat, in order (each starting with its shard's tag)."""
        self.shards: dict[str, None] = {}
        """The shards the items name, in first-use order."""

    def add(self, *fields: Any) -> None:
        """Fields of an item of a script of one shard (whose items name no shard)."""
        self.fields += fields

    def item(self, shard: str, *fields: Any) -> None:
        """An item of a script of several shards: its shard's tag, then its fields."""
        if shard not in self.shards:
            self.shards[shard] = None
            if self.routing_shard is None:
                self.routing_shard = shard
        self.fields.append(shard)
        self.fields += fields

    def packed(self) -> str:
        problem = self.layout.items_problem(self.fields)
        if problem:
            raise ValueError(f"script {self.script.name}: {problem} (layouts.py)")
        return json.dumps([*self.placement.header(self.served), *self.script_args,
                           *self.fields], separators=(",", ":"))

    def tags(self) -> frozenset[str] | None:
        """The shard tags the call may touch (None: any its node serves: a cascade, a
        cycle walk)."""
        if self.layout.any_shard and self.served != self.routing_shard:
            return None
        touched = set(self.shards)
        if self.routing_shard is not None:
            touched.add(self.routing_shard)
        return frozenset(touched)

    def queue(self, batch: Batch, read_only: bool = False) -> int:
        self.read_only = read_only
        return batch.node_call(self)

    def as_queued(self, segment: int) -> Queued:
        """The call as the executor queues it: EVALSHA with one key routing to the node of
        its first shard (KEYS[1]: on a cluster Redis checks its slot before the call runs)
        and the packed argument."""
        key = None if self.routing_shard is None else \
            self.placement.routing_key(self.routing_shard)
        keys = () if key is None else (key,)
        return Queued(self.script.name, ("EVALSHA", self.script.sha, len(keys), *keys,
                                         self.packed()),
                      key, self.read_only or self.script.name in RETRY_SAFE,
                      not self.read_only, segment, self)

    def splittable(self) -> bool:
        """Whether sending it shard by shard would change it: it names several shards, or
        lets its cascades count other shards as served here."""
        return len(self.shards) > 1 or self.served != self.routing_shard

    def placed(self) -> bool:
        """Whether the node its key routes to still serves every shard it was built for,
        as the slot map has them now (the map may have been read again since)."""
        if not self.served or self.routing_shard is None:
            return True
        node_of = self.placement.node_of
        node = node_of(self.routing_shard)
        return all(node_of(shard) == node for shard in self.served.split(","))

    # -- a call that Redis Cluster refused whole (a slot moved): sent again per shard ------

    def split(self) -> list[NodeCall]:
        """The same items as calls of one shard each (each serving only its own shard:
        a link or a cascade into another shard then goes the way of one across nodes)."""
        parts: dict[str, NodeCall] = {}
        for start, end in self.layout.spans(self.fields):
            shard = self.fields[start]
            part = parts.get(shard)
            if part is None:
                part = parts[shard] = NodeCall(self.script, self.placement, shard, shard,
                                               self.script_args)
            part.item(*self.fields[start:end])
        return list(parts.values())

    def merge(self, parts: Sequence[NodeCall], replies: Sequence[Any]) -> Any:
        """The reply the call would have given, from its parts' replies (split order):
        each item's answer from its shard's part, in the call's item order; a part that
        failed gives its error to each of its items."""
        cursors = {part.routing_shard: [0, reply] for part, reply in zip(parts, replies)}
        answers: list[Any] = []
        rest: list[list[Any]] = []
        counts = [0, 0, 0]
        per_part = self.layout.per_part
        for reply in replies:
            if not isinstance(reply, Exception) and self.layout.reply == "parts":
                for number, extra in enumerate(reply[1:]):
                    if number == 2 and self.script.name == "evict":
                        counts = [int(x) + int(y) for x, y in zip(counts, extra)]
                        continue
                    while len(rest) <= number:
                        rest.append([])
                    rest[number] += extra
        width = self.layout.width
        for start, _ in self.layout.spans(self.fields):
            cursor = cursors[self.fields[start]]
            reply = cursor[1]
            count = int(self.fields[start + width - 1]) if per_part else 1
            if isinstance(reply, Exception):
                answers += [reply] * count
                continue
            values = reply[0] if self.layout.reply == "parts" else reply
            answers += values[cursor[0]:cursor[0] + count]
            cursor[0] += count
        if self.layout.reply != "parts":
            return answers
        if self.script.name == "evict":
            while len(rest) < 2:
                rest.append([])
            return [answers, *rest, counts]
        return [answers, *rest]


class NodeCalls(Generic[T]):
    """Calls of one script, one per Redis node serving the shards the items name, each
    remembering what its replies stand for (the tags), so replies can be read back item
    by item."""

    def __init__(self, script: LuaScript, placement: Placement, script_args: Sequence[Any]):
        self._script = script
        self._placement = placement
        self._args = script_args
        self._calls: dict[str, NodeCall] = {}
        self._tags: dict[str, list[T]] = {}
        self._positions: dict[str, int] = {}
        self._node_of: dict[str, str] = {}

    def __bool__(self) -> bool:
        return bool(self._calls)

    def item(self, shard: str, tag: T, *fields: Any) -> None:
        """An item of `shard` answering once, with `tag` for its reply."""
        node = self._node(shard)
        self._calls[node].item(shard, *fields)
        self._tags[node].append(tag)

    def items(self, shard: str, tags: list[T], *fields: Any) -> None:
        """An item of `shard` answering per part, `tags` for its replies in order."""
        node = self._node(shard)
        self._calls[node].item(shard, *fields)
        self._tags[node] += tags

    def _node(self, shard: str) -> str:
        node = self._node_of.get(shard)
        if node is None:
            node = self._node_of[shard] = self._placement.node_of(shard)
            if node not in self._calls:
                self._calls[node] = NodeCall(self._script, self._placement,
                                             self._placement.served(node), None, self._args)
                self._tags[node] = []
        return node

    def queue(self, batch: Batch, read_only: bool = False) -> None:
        for node, call in self._calls.items():
            self._positions[node] = call.queue(batch, read_only)

    def replies(self, results: Sequence[Any]) -> Iterator[tuple[list[T], Any]]:
        """(tags, reply) per call, in queue order."""
        for node, position in self._positions.items():
            yield self._tags[node], results[position]

    def resent_tags(self, batch: Batch) -> Iterator[T]:
        """The tags of items whose call was sent again after a lost reply (batch.resent)."""
        for node, position in self._positions.items():
            if position in batch.resent:
                yield from self._tags[node]

    def per_item(self, results: Sequence[Any], part: int | None = None
                 ) -> Iterator[tuple[T, Any]]:
        """(tag, that item's reply) for scripts that return one reply per item (or, with
        `part`, a list whose part-th element has one per item). A call refused as a whole
        gives its error to every item; within a reply split per shard (a call Redis
        Cluster refused whole), an item of a failed shard gets that shard's error."""
        for tags, reply in self.replies(results):
            if isinstance(reply, Exception):
                items: Sequence[Any] = [reply] * len(tags)
            else:
                items = reply if part is None else reply[part]
            yield from zip(tags, items)
