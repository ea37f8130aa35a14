"""The Lua scripts of lua/ and the one way to build a call of a shard script.

Every shard script takes the shard's keys as KEYS[1..7], then node keys, and ARGV starts
with the common header (lua/_lib.lua), and gets the parts of lua/_lib.lua it names (its
'-- uses:' line; all of them without one); each module that drives a script builds its
items through ShardCall, which keeps the node keys of one call unique and of one shard tag.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Sequence
from importlib import resources
from typing import Any, Generic, TypeVar

from .errors import CrossSlotCall
from .executor import Batch, LuaScript
from .keys import KeySchema
from .layouts import LAYOUTS

T = TypeVar("T")

LIBRARY = "_lib"
SHARD_SCRIPTS = (
    "link", "put_start", "register", "put_end", "grant_lease", "delete", "evict", "unlink",
    "resolve", "repair_node", "recount_shard", "trim_fences", "invalidate", "scrub",
)
OTHER_SCRIPTS = ("lock_token", "segment", "segment_flag", "read_events", "lend")
SCRIPT_NAMES = SHARD_SCRIPTS + OTHER_SCRIPTS

RETRY_SAFE = frozenset({"link", "put_start", "register", "put_end", "grant_lease", "unlink",
                        "resolve", "lock_token", "trim_fences", "invalidate", "segment_flag"})
"""Scripts whose second run leaves the same state and gives an answer the caller accepts:
link and unlink compare epochs, put_start/put_end/register recognise the writer's token,
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
LAZY = re.compile(r"^-- lazy:([\w ]*)$", re.MULTILINE)
LAZY_MARK = re.compile(r"^[ \t]*-- @lazy$", re.MULTILINE)


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


def with_lazy_parts(body: str) -> str:
    """The script's body with its '-- @lazy' line replaced by the parts its '-- lazy:'
    line names and those they need, less the prelude's (library_for): defined inside the
    function that holds the mark, so only a call that takes that path pays for them."""
    lazy = LAZY.search(body)
    if lazy is None:
        return body
    _, parts = library_parts()
    wanted = _with_needs(lazy.group(1).split(), parts) - _prelude_parts(body, parts)
    marks = LAZY_MARK.findall(body)
    if len(marks) != 1:
        raise ValueError(f"a script with a '-- lazy:' line needs one '-- @lazy' line, not "
                         f"{len(marks)}")
    text = "".join(text for name, (_, text) in parts.items() if name in wanted)
    return LAZY_MARK.sub(lambda _: text, body)


def build_script(name: str, shebang: bool = True) -> LuaScript:
    """The script with the helpers it uses prepended (library_for). Its first line may be
    a Redis 7 shebang (`#!lua flags=allow-oom` on scripts that free memory: they must run
    when Redis is at maxmemory; a plain `#!lua` makes Redis refuse the whole script up
    front there, never half-way through): it stays first. shebang=False drops it
    (fakeredis has none)."""
    body = read_lua(name)
    first, _, rest = body.partition("\n")
    header = ""
    if first.startswith("#!lua"):
        header, body = (first + "\n" if shebang else ""), rest
    source = header + library_for(body) + "\n" + with_lazy_parts(body)
    return LuaScript(name, source, hashlib.sha1(source.encode()).hexdigest())


class Scripts:
    """Every script, loaded once per process and called by EVALSHA."""

    def __init__(self, shebang: bool = True) -> None:
        self.all = [build_script(name, shebang) for name in SCRIPT_NAMES]
        self.by_name = {script.name: script for script in self.all}

    def __getitem__(self, name: str) -> LuaScript:
        return self.by_name[name]


class ShardCall:
    """One call of a shard script: the shard's keys, each node key once, the common
    header, the script's own arguments and its items, checked against the script's
    layout (layouts.py) when it is made and when it is queued."""

    def __init__(self, script: LuaScript, schema: KeySchema, shard: str,
                 header: Sequence[Any], *script_args: Any):
        self.script = script
        self.layout = LAYOUTS[script.name]
        problem = self.layout.problem(header, script_args)
        if problem:
            raise ValueError(f"script {script.name}: {problem} (layouts.py)")
        self.schema = schema
        self.shard = shard
        self.keys = schema.shard_keys(shard).as_list()
        self.args: list[Any] = [*header, *script_args]
        self.items = 0
        self._node_index: dict[str, int] = {}
        self._node_prefix = schema.node_prefix(shard)

    def node(self, prefix_hash: str) -> int:
        """KEYS index (1-based, as Lua counts) of the prefix's node key."""
        index = self._node_index.get(prefix_hash)
        if index is None:
            key = self.schema.node(prefix_hash)  # its shard computed once: the key names it
            if not key.startswith(self._node_prefix):
                raise CrossSlotCall(f"script {self.script.name} for shard {self.shard} got "
                                    f"node {prefix_hash} of shard {self.schema.shard(prefix_hash)}")
            self.keys.append(key)
            index = self._node_index[prefix_hash] = len(self.keys)
        return index

    def item(self, *args: Any) -> None:
        self.args.extend(args)
        self.items += 1

    def queue(self, batch: Batch, read_only: bool = False) -> int:
        problem = self.layout.items_problem(self.args)
        if problem:
            raise ValueError(f"script {self.script.name}: {problem} (layouts.py)")
        return batch.call(self.script, self.keys, self.args, retry_safe=self.script.name in
                          RETRY_SAFE, read_only=read_only, one_tag=True)


class ShardCalls(Generic[T]):
    """Calls of one script, one per shard, each remembering what its items stand for (the
    tags), so replies can be read back item by item."""

    def __init__(self, make: Callable[[str], ShardCall]):
        self._make = make
        self._calls: dict[str, ShardCall] = {}
        self._tags: dict[str, list[T]] = {}
        self._positions: dict[str, int] = {}

    def __bool__(self) -> bool:
        return bool(self._calls)

    def add(self, shard: str, tag: T) -> ShardCall:
        """The shard's call, with `tag` noted for the item the caller adds to it next."""
        call = self._call(shard)
        self._tags[shard].append(tag)
        return call

    def add_all(self, shard: str, tags: list[T]) -> ShardCall:
        """The shard's call, with `tags` noted for the replies of what the caller adds to
        it next, in order: one item a tag, or an item that answers per part."""
        call = self._call(shard)
        self._tags[shard] += tags
        return call

    def _call(self, shard: str) -> ShardCall:
        call = self._calls.get(shard)
        if call is None:
            call = self._calls[shard] = self._make(shard)
            self._tags[shard] = []
        return call

    def queue(self, batch: Batch, read_only: bool = False) -> None:
        for shard, call in self._calls.items():
            self._positions[shard] = call.queue(batch, read_only)

    def replies(self, results: Sequence[Any]) -> Iterator[tuple[list[T], Any]]:
        """(tags, reply) per call, in queue order."""
        for shard, position in self._positions.items():
            yield self._tags[shard], results[position]

    def resent_tags(self, batch: Batch) -> Iterator[T]:
        """The tags of items whose call was sent again after a lost reply (batch.resent)."""
        for shard, position in self._positions.items():
            if position in batch.resent:
                yield from self._tags[shard]

    def per_item(self, results: Sequence[Any], part: int | None = None
                 ) -> Iterator[tuple[T, Any]]:
        """(tag, that item's reply) for scripts that return one reply per item (or, with
        `part`, a list whose part-th element has one per item). A call refused as a whole
        gives its error to every item."""
        for tags, reply in self.replies(results):
            if isinstance(reply, Exception):
                items: Sequence[Any] = [reply] * len(tags)
            else:
                items = reply if part is None else reply[part]
            yield from zip(tags, items)
